"""Serving benchmark: requests/s and latency of the local predictor under `wrk`.

Side by side, in one run, on loopback, with the same base64-PNG V1 request (one real test
image): the predictor, the predictor with every request through TensorFlow (no Lite fast
path), the same server with a no-op model (requests parsed and answered with a constant) and
KServe's bare floor (the request not even read). 1, 5 and 32 concurrent connections, rounds
interleaved, medians reported. Throughput on this kind of VM drifts by tens of percent from
minute to minute, so the ratios are taken within each round, between measurements seconds
apart, and their median is reported. Then 10,000 requests at 32 connections, counting failures, and
in-process predictions on the same image for scale. Writes bench/results/serving.json.
"""

from __future__ import annotations

import argparse
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
from fmnist.launcher.local import free_ports

SERVERS = {
    "predictor": [],
    "predictor_tensorflow_only": ["--no_fast_path"],
    "noop_model": ["--noop=model"],
    "noop_bare": ["--noop=bare"],
}
MODEL_NAME = "fashion-mnist"
_WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("{body}", "rb"); wrk.body = f:read("*a"); f:close()
done = function(summary, latency, requests)
  io.write(string.format("RESULT p50=%f p99=%f max=%f requests=%d non200=%d errors=%d\\n",
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000,
    summary.requests, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write
      + summary.errors.timeout))
end
"""



def _default_model_dir() -> str:
    summary = Path("runs/local/summary.json")
    if summary.exists():
        return json.loads(summary.read_text())["best_model_path"]
    tta = RESULTS / "work" / "tta"
    if (tta / "1" / "saved_model.pb").exists():
        return str(tta)
    return ""


def _request_body(data_source: str, path: Path) -> None:
    from fmnist.dataset.sources import load
    from serving.deploy.client import v1_image_request

    image = load(data_source).splits["test"].images[0]
    path.write_text(json.dumps(v1_image_request([image])))


def _start(name: str, args: list[str], model_dir: str, log_dir: Path):
    from serving.deploy.client import wait_until_ready

    port = free_ports(1)[0]
    command = [sys.executable, "-m", "serving.model_server.server", f"--model_dir={model_dir}",
               f"--model_name={MODEL_NAME}", f"--http_port={port}", *args]
    log = open(log_dir / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                               env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    url = f"http://127.0.0.1:{port}"
    wait_until_ready(url, MODEL_NAME, timeout=180, is_alive=lambda: process.poll() is None)
    return process, f"{url}/v1/models/{MODEL_NAME}:predict"


def run_wrk(url: str, script: Path, connections: int, seconds: float) -> dict:
    threads = 1 if connections < 8 else 2
    command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{math.ceil(seconds)}s",
               "--timeout", "10s", "-s", str(script), url]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
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


def in_process(model_dir: str, data_source: str, seconds: float = 5.0) -> dict:
    """Predictions per second without HTTP: the SavedModel's signature one image at a time,
    and the predictor's own predict (parsing, batching, fast path) with 5 concurrent callers."""
    import asyncio

    import tensorflow as tf

    from fmnist.dataset.sources import load
    from fmnist.training.export import BYTES_SIGNATURE
    from serving.deploy.client import png_bytes, v1_image_request
    from serving.model_server.predictor import FashionMnistModel, resolve_saved_model_dir

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
            "predictor_predict_5_concurrent_callers": round(predictor_rate, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_source(parser)
    parser.add_argument("--model-dir", default="", help="default: the latest run's model")
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--connections", default="1,5,32")
    parser.add_argument("--failure-run-requests", type=int, default=10_000)
    parser.add_argument("--output", default=str(RESULTS / "serving.json"))
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
    connections = [int(c) for c in args.connections.split(",")]
    work = Path(tempfile.mkdtemp(prefix="fmnist-bench-"))
    body = work / "body.json"
    _request_body(args.data_source, body)
    script = work / "post.lua"
    script.write_text(_WRK_SCRIPT.format(body=body))
    servers = {}
    try:
        for name, server_args in SERVERS.items():
            servers[name] = _start(name, server_args, model_dir, work)
            print(f"started {name}", flush=True)
        samples: dict[str, dict[int, list[dict]]] = {n: {c: [] for c in connections}
                                                      for n in servers}
        for round_index in range(args.rounds):
            for conns in connections:
                for name, (_, url) in servers.items():
                    run_wrk(url, script, conns, 2)  # warm-up
                    sample = run_wrk(url, script, conns, args.seconds)
                    samples[name][conns].append(sample)
                    print(json.dumps({"round": round_index, "server": name,
                                      "connections": conns, **sample}), flush=True)
        medians = {
            name: {str(c): {key: statistics.median(s[key] for s in runs) for key in runs[0]}
                   for c, runs in by_conn.items()}
            for name, by_conn in samples.items()
        }
        # Long enough for the asked number of requests at the measured rate, with margin.
        rate = medians["predictor"].get("32", {}).get("requests_per_second") or 100.0
        seconds = max(5.0, 1.5 * args.failure_run_requests / rate)
        failure_run = run_wrk(servers["predictor"][1], script, 32, seconds)
        failure_run["asked_for_at_least"] = args.failure_run_requests
        print(json.dumps({"failure_run": failure_run}), flush=True)
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
    results = {
        "machine": {"cpus": os.cpu_count(), "arch": platform.machine()},
        "request": "V1 :predict, one 28x28 test image as base64 PNG",
        "seconds_per_measurement": args.seconds,
        "rounds": args.rounds,
        "servers": medians,
        "throughput_ratios": ratios,
        "ratios_at_5_connections": {name: by_conns["5"]["median"]
                                    for name, by_conns in ratios.items() if "5" in by_conns},
        "failure_run_32_connections": failure_run,
        "in_process": in_process(model_dir, args.data_source),
        "book_requests_per_second": 95.7,
    }
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2))
    print(json.dumps({k: results[k] for k in ("ratios_at_5_connections",
                                              "failure_run_32_connections", "in_process")}))
    print(f"wrote {output}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
