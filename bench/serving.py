"""Serving benchmark: requests/s and latency of the local predictor under `wrk`, on loopback.

Side by side, in one run, with the same V1 request (one real test image as base64 PNG): the
predictor, the predictor with the model run by TensorFlow instead of LiteRT (`--no_fast_path`),
the same server with a no-op model (requests parsed and images decoded, a constant answered) and
KServe's bare floor (the request not even read). 1, 5 and 32 concurrent connections, rounds
interleaved, medians reported. Throughput on a shared VM drifts by tens of percent from minute
to minute, so ratios are taken within each round, between measurements seconds apart, and
their median is reported. Then a mixed-format run (different real test images, half PNG, half
JPEG) against the predictor and the no-op model, and the acceptance run: at least 10,000
requests at 32 connections, counting failures, with its p99. Photos (issue 22): 64 different
test images sent as people send pictures (``fmnist_kfp.photos``: on white, off centre, sideways with
an EXIF tag, cut out, small in a large frame, shadowed, on a gradient, WebP, AVIF) at 1 and 5
connections, the latency the photo rules add per image (photo p50 minus plain PNG p50, at 1
connection, round by round), and the predictor's accuracy on each variant over HTTP.
``--compare-ref REF`` also serves the code of a git commit (for example the last one before a
change) beside today's, in the same rounds: its throughput and latency on every workload, its
accuracy per variant, and today's over it. In-process predictions for scale. The load average
before and after is recorded: figures taken while other work ran are not a quiet machine's.
Writes bench/results/serving.json; about 5 minutes with the defaults, 8 with ``--compare-ref``.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import RESULTS, add_data_source, data_source_missing

PREDICTOR = "fmnist_kfp.serving.model_server.server"
# Each server compared: its module (run with python -m) and flags.
SERVERS = {
    "predictor": (PREDICTOR, []),
    "predictor_tensorflow_only": (PREDICTOR, ["--no_fast_path"]),
    "noop_model": ("bench.noop_server", ["--noop=model"]),
    "noop_bare": ("bench.noop_server", ["--noop=bare"]),
}
MODEL_NAME = "fashion-mnist"
# Acceptance: p99 at 32 connections over >= 10,000 requests, no failures; at 5 connections
# the predictor keeps at least this share of the no-op model's requests/s.
P99_32_LIMIT_MS = 20.0
RATIO_5_FLOOR = 0.8
_RESULT = """
done = function(summary, latency, requests)
  io.write(string.format("RESULT p50=%f p99=%f max=%f requests=%d non200=%d errors=%d\\n",
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000,
    summary.requests, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write
      + summary.errors.timeout))
end
"""
_ONE_BODY = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("{body}", "rb"); wrk.body = f:read("*a"); f:close()
""" + _RESULT
# One body per line; each connection's requests walk through them from its own offset.
_MANY_BODIES = """
local bodies = {{}}
for line in io.lines("{bodies}") do bodies[#bodies + 1] = line end
local index = 0
init = function(args) index = math.random(#bodies) end
request = function()
  index = index % #bodies + 1
  return wrk.format("POST", nil, {{["Content-Type"] = "application/json"}}, bodies[index])
end
""" + _RESULT


def _default_model_dir() -> str:
    summary = Path("runs/local/summary.json")
    if summary.exists():
        return json.loads(summary.read_text())["best_model_path"]
    tta = RESULTS / "work" / "tta"
    if (tta / "1" / "saved_model.pb").exists():
        return str(tta)
    return ""


def _encoded(image, image_format: str) -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format=image_format)
    return base64.b64encode(buffer.getvalue()).decode()


def _request_bodies(data_source: str, work: Path) -> tuple[Path, Path]:
    """The single-image PNG body, and 64 bodies of different test images, half PNG, half
    JPEG."""
    from fmnist_kfp.dataset.sources import load

    images = load(data_source).splits["test"].images[:64]
    one = work / "body.json"
    one.write_text(json.dumps(
        {"instances": [{"image_bytes": {"b64": _encoded(images[0], "PNG")}}]}))
    mixed = work / "mixed.jsonl"
    mixed.write_text("\n".join(
        json.dumps({"instances": [{"image_bytes": {"b64": _encoded(
            image, "PNG" if i % 2 == 0 else "JPEG")}}]})
        for i, image in enumerate(images)) + "\n")
    return one, mixed


def _photo_bodies(data_source: str, work: Path) -> Path:
    """64 bodies, each a different test image sent as a photo, the photo variants in turn."""
    from fmnist_kfp.dataset.sources import load
    from fmnist_kfp.photos import PHOTO_VARIANTS, variant

    images = load(data_source).splits["test"].images[:64]
    photos = work / "photos.jsonl"
    photos.write_text("\n".join(
        json.dumps({"instances": [{"image_bytes": {"b64": base64.b64encode(variant(
            image, PHOTO_VARIANTS[i % len(PHOTO_VARIANTS)], seed=i)).decode()}}]})
        for i, image in enumerate(images)) + "\n")
    return photos


def variant_accuracy(url: str, data_source: str, count: int, batch: int = 10) -> dict:
    """The share of ``count`` test images classified right over HTTP, sent each way of
    ``fmnist_kfp.photos.VARIANTS``; a refused request (a 4xx: a format the server cannot read)
    counts its images as wrong and is counted."""
    import httpx

    from fmnist_kfp.dataset.sources import load
    from fmnist_kfp.photos import VARIANTS, variant

    test = load(data_source).splits["test"]
    images, labels = test.images[:count], test.labels[:count]
    result = {}
    with httpx.Client(timeout=60) as client:
        for name in VARIANTS:
            correct = refused = 0
            for start in range(0, len(images), batch):
                instances = [{"image_bytes": {"b64": base64.b64encode(
                    variant(image, name, seed=start + i)).decode()}}
                    for i, image in enumerate(images[start:start + batch])]
                response = client.post(url, json={"instances": instances})
                if response.status_code != 200:
                    refused += len(instances)
                    continue
                predicted = [p["class_index"] for p in response.json()["predictions"]]
                correct += sum(int(p == y) for p, y in
                               zip(predicted, labels[start:start + batch], strict=True))
            result[name] = {"accuracy": round(correct / len(images), 4),
                            "refused_images": refused}
    return result


def _source_of(ref: str, work: Path) -> Path:
    """The repository's files at commit ``ref``, extracted (``git archive``) under ``work``."""
    folder = work / "compare-ref"
    folder.mkdir()
    archive = subprocess.run(["git", "archive", ref], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def _start(name: str, module: str, args: list[str], model_dir: str, work: Path,
           source: Path | None = None):
    from fmnist_kfp.serving.deploy.client import wait_until_ready
    from fmnist_kfp.serving.model_server.ports import read_port_file

    port_file = work / f"{name}.ports.json"
    command = [sys.executable, "-m", module,
               f"--model_dir={model_dir}", f"--model_name={MODEL_NAME}", "--http_port=0",
               "--grpc_port=0", f"--port_file={port_file}", *args]
    log = open(work / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    if source is not None:  # another commit's server: its code first on the path
        env["PYTHONPATH"] = str(source)
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                               cwd=source)
    alive = lambda: process.poll() is None  # noqa: E731
    port = read_port_file(port_file, 180, is_alive=alive)["http_port"]
    url = f"http://127.0.0.1:{port}"
    wait_until_ready(url, MODEL_NAME, timeout=180, is_alive=alive)
    return process, f"{url}/v1/models/{MODEL_NAME}:predict"


def run_wrk(url: str, script: Path, connections: int, seconds: float) -> dict:
    threads = 1 if connections < 8 else 2
    command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{math.ceil(seconds)}s",
               "--timeout", "10s", "-s", str(script), url]
    output = subprocess.run(command, capture_output=True, text=True, check=True,
                            timeout=seconds + 60).stdout
    result = dict(re.findall(r"(\w+)=([\d.]+)", output.split("RESULT", 1)[1]))
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", output)[1])
    return {
        "requests_per_second": round(rate, 1),
        "p50_ms": round(float(result["p50"]), 2),
        "p99_ms": round(float(result["p99"]), 2),
        "max_ms": round(float(result["max"]), 2),
        "requests": int(result["requests"]),
        "failed": int(result["non200"]) + int(result["errors"]),
    }


def _round_ratios(predictor: list[dict], baseline: list[dict]) -> dict:
    """Requests/s of the predictor over the baseline's, round by round, and their median."""
    each = [round(p["requests_per_second"] / b["requests_per_second"], 3)
            for p, b in zip(predictor, baseline, strict=True) if b["requests_per_second"]]
    return {"median": statistics.median(each) if each else None, "rounds": each}


def _medians(runs: list[dict]) -> dict:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def in_process(model_dir: str, data_source: str, seconds: float = 3.0) -> dict:
    """Predictions per second without HTTP: the SavedModel's signature one image at a time,
    and the predictor's own call (parsing, decoding, batching, LiteRT) with 5 concurrent
    callers."""
    import asyncio

    import tensorflow as tf

    from fmnist_kfp.dataset.sources import load
    from fmnist_kfp.serving.deploy.client import png_bytes, v1_image_request
    from fmnist_kfp.serving.model_server.predictor import FashionMnistModel, resolve_saved_model_dir
    from fmnist_kfp.training.export import BYTES_SIGNATURE

    image = load(data_source).splits["test"].images[0]
    signature = tf.saved_model.load(resolve_saved_model_dir(model_dir)).signatures[
        BYTES_SIGNATURE]
    encoded = tf.constant([png_bytes(image)])
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        signature(image_bytes=encoded)
        count += 1
    signature_rate = count / (time.perf_counter() - started)

    model = FashionMnistModel(MODEL_NAME, model_dir)
    model.load()
    body = v1_image_request([image])

    async def caller(stop: float, counter: list) -> None:
        while time.perf_counter() < stop:
            await model(body, {})
            counter[0] += 1

    async def drive() -> float:
        counter = [0]
        begin = time.perf_counter()
        await asyncio.gather(*(caller(begin + seconds, counter) for _ in range(5)))
        return counter[0] / (time.perf_counter() - begin)

    predictor_rate = asyncio.run(drive())
    return {"savedmodel_signature_one_image_per_call": round(signature_rate, 1),
            "predictor_call_5_concurrent_callers": round(predictor_rate, 1)}


def _load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_source(parser)
    parser.add_argument("--model-dir", default="", help="default: the latest run's model")
    parser.add_argument("--seconds", type=float, default=4.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--connections", default="1,5,32")
    parser.add_argument("--acceptance-requests", type=int, default=10_000,
                        help="at least this many requests in the 32-connection run")
    parser.add_argument("--output", default=str(RESULTS / "serving.json"))
    parser.add_argument("--compare-ref", default="",
                        help="also serve this git commit's code, side by side in every round")
    parser.add_argument("--accuracy-images", type=int, default=300,
                        help="test images per photo variant in the accuracy measurement")
    args = parser.parse_args(argv)
    if data_source_missing(args):
        return 2
    if shutil.which("wrk") is None:
        print("error: wrk is not installed; apt-get install wrk", file=sys.stderr)
        return 2
    model_dir = args.model_dir or _default_model_dir()
    if not model_dir:
        print("error: no model to serve; run `make run` or the training benchmark first, "
              "or pass --model-dir", file=sys.stderr)
        return 2
    model_dir = str(Path(model_dir).resolve())
    connections = [int(c) for c in args.connections.split(",")]
    if 5 not in connections or 32 not in connections:
        print("error: --connections must include 5 and 32 (the acceptance figures)",
              file=sys.stderr)
        return 2
    if args.compare_ref and subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", f"{args.compare_ref}^{{commit}}"],
            capture_output=True).returncode != 0:
        print(f"error: --compare-ref {args.compare_ref!r} is not a commit of this repository "
              "(a shallow clone lacks history: git fetch --unshallow)", file=sys.stderr)
        return 2
    began, load_before = time.monotonic(), _load_average()
    work = Path(tempfile.mkdtemp(prefix="fmnist-bench-"))
    body, mixed = _request_bodies(args.data_source, work)
    photos = _photo_bodies(args.data_source, work)
    script = work / "post.lua"
    script.write_text(_ONE_BODY.format(body=body))
    mixed_script = work / "mixed.lua"
    mixed_script.write_text(_MANY_BODIES.format(bodies=mixed))
    photo_script = work / "photos.lua"
    photo_script.write_text(_MANY_BODIES.format(bodies=photos))
    servers = {}
    # The servers compared with the predictor on the mixed and photo workloads.
    compared = ["predictor", "noop_model"] + (["compare_ref"] if args.compare_ref else [])
    try:
        for name, (module, server_args) in SERVERS.items():
            servers[name] = _start(name, module, server_args, model_dir, work)
            print(f"started {name}", flush=True)
        if args.compare_ref:
            servers["compare_ref"] = _start("compare_ref", PREDICTOR, [], model_dir, work,
                                            _source_of(args.compare_ref, work))
            print(f"started compare_ref ({args.compare_ref})", flush=True)
        samples: dict[str, dict[int, list[dict]]] = {n: {c: [] for c in connections}
                                                      for n in servers}
        mixed_samples: dict[str, dict[int, list[dict]]] = {n: {5: [], 32: []} for n in compared}
        photo_samples: dict[str, dict[int, list[dict]]] = {n: {1: [], 5: []} for n in compared}
        for round_index in range(args.rounds):
            for conns in connections:
                for name, (_, url) in servers.items():
                    run_wrk(url, script, conns, 1)  # warm-up
                    sample = run_wrk(url, script, conns, args.seconds)
                    samples[name][conns].append(sample)
                    print(json.dumps({"round": round_index, "server": name,
                                      "connections": conns, **sample}), flush=True)
            for workload, by_server, lua in (("mixed", mixed_samples, mixed_script),
                                             ("photos", photo_samples, photo_script)):
                for conns in by_server["predictor"]:
                    for name in by_server:
                        if workload == "photos":
                            run_wrk(servers[name][1], lua, conns, 1)  # warm-up
                        sample = run_wrk(servers[name][1], lua, conns, args.seconds)
                        by_server[name][conns].append(sample)
                        print(json.dumps({"round": round_index, "server": name,
                                          workload: True, "connections": conns, **sample}),
                              flush=True)
        medians = {name: {str(c): _medians(runs) for c, runs in by_conn.items()}
                   for name, by_conn in samples.items()}
        # Long enough for the asked number of requests at the measured rate, with margin.
        rate = medians["predictor"]["32"]["requests_per_second"] or 100.0
        seconds = max(5.0, 1.3 * args.acceptance_requests / rate)
        acceptance = run_wrk(servers["predictor"][1], script, 32, seconds)
        print(json.dumps({"acceptance_run": acceptance}), flush=True)
        accuracy = {name: variant_accuracy(servers[name][1], args.data_source,
                                           args.accuracy_images)
                    for name in ("predictor", "compare_ref") if name in servers}
        print(json.dumps({"accuracy_per_variant": accuracy}), flush=True)
    finally:
        for process, _ in servers.values():
            process.terminate()
        for process, _ in servers.values():
            process.wait(timeout=60)
    ratios = {
        f"predictor_vs_{name}": {
            str(conns): _round_ratios(samples["predictor"][conns], samples[name][conns])
            for conns in connections
        }
        for name in samples if name != "predictor"
    }
    mixed_ratios = {str(c): _round_ratios(mixed_samples["predictor"][c],
                                          mixed_samples["noop_model"][c]) for c in (5, 32)}
    # The latency the photo rules add: each round's photo p50 minus its plain PNG p50, both
    # one request at a time on the predictor.
    added = [round(photo["p50_ms"] - plain["p50_ms"], 2) for photo, plain in
             zip(photo_samples["predictor"][1], samples["predictor"][1], strict=True)]
    photo_results = {
        "request": "V1 :predict, 64 different test images, each sent as one of "
                   "fmnist_kfp.photos.PHOTO_VARIANTS in turn",
        "servers": {name: {str(c): _medians(runs) for c, runs in by_conn.items()}
                    for name, by_conn in photo_samples.items()},
        "added_p50_ms_per_image_vs_plain_png": {"median": statistics.median(added),
                                                "rounds": added},
        "predictor_vs_noop_model": {str(c): _round_ratios(photo_samples["predictor"][c],
                                                          photo_samples["noop_model"][c])
                                    for c in (1, 5)},
        "accuracy_per_variant": {"images": args.accuracy_images, **accuracy},
    }
    compare_ref = None
    if args.compare_ref:
        compare_ref = {
            "ref": args.compare_ref,
            "commit": subprocess.run(["git", "rev-parse", args.compare_ref], text=True,
                                     capture_output=True, check=True).stdout.strip(),
            "predictor_vs_compare_ref": {
                "plain_png": {str(c): _round_ratios(samples["predictor"][c],
                                                    samples["compare_ref"][c])
                              for c in connections},
                "mixed": {str(c): _round_ratios(mixed_samples["predictor"][c],
                                                mixed_samples["compare_ref"][c])
                          for c in (5, 32)},
                "photos": {str(c): _round_ratios(photo_samples["predictor"][c],
                                                 photo_samples["compare_ref"][c])
                           for c in (1, 5)},
            },
        }
    ratio_5 = ratios["predictor_vs_noop_model"]["5"]["median"]
    results = {
        "machine": {"cpus": os.cpu_count(), "arch": platform.machine(),
                    "load_average_before": load_before, "load_average_after": _load_average(),
                    "note": "1/5/15-minute load averages; above the core count, other work "
                            "shared the machine: trust the within-round ratios more than "
                            "absolute figures"},
        "request": "V1 :predict, one 28x28 test image as base64 PNG",
        "seconds_per_measurement": args.seconds,
        "rounds": args.rounds,
        "servers": medians,
        "throughput_ratios": ratios,
        "mixed_formats": {
            "request": "V1 :predict, 64 different test images, half PNG and half JPEG",
            "servers": {name: {str(c): _medians(runs) for c, runs in by_conn.items()}
                        for name, by_conn in mixed_samples.items()},
            "predictor_vs_noop_model": mixed_ratios,
        },
        "photos": photo_results,
        "compare_ref": compare_ref,
        "acceptance": {
            "run_32_connections": {**acceptance,
                                   "asked_for_at_least": args.acceptance_requests},
            "p99_32_connections_ms": acceptance["p99_ms"],
            "p99_limit_ms": P99_32_LIMIT_MS,
            "ratio_5_connections_vs_noop_model": ratio_5,
            "ratio_floor": RATIO_5_FLOOR,
            "met": {
                "p99_32_connections": acceptance["p99_ms"] <= P99_32_LIMIT_MS,
                "no_failures": acceptance["failed"] == 0
                and acceptance["requests"] >= args.acceptance_requests,
                "ratio_5_connections": ratio_5 is not None and ratio_5 >= RATIO_5_FLOOR,
            },
        },
        "in_process": in_process(model_dir, args.data_source),
        "book_requests_per_second": 95.7,
    }
    results["wall_seconds"] = round(time.monotonic() - began, 1)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2))
    print(json.dumps({k: results[k] for k in ("machine", "acceptance", "compare_ref")},
                     indent=2))
    print(f"wrote {output}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
