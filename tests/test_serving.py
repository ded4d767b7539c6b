"""The predictor behind real HTTP: KServe's ModelServer on loopback, V1 and V2, bad input."""

from __future__ import annotations

import base64
import concurrent.futures
import io
import json
import os
import subprocess
import sys

import httpx
import numpy as np
import pytest
from PIL import Image

from fmnist.dataset.official import CLASS_NAMES
from fmnist.launcher.local import free_ports
from serving.deploy.client import png_bytes, v1_image_request, wait_until_ready

NAME = "fashion-mnist"
BODY_LIMIT = 300_000


@pytest.fixture(scope="session")
def images():
    from tests.fixtures import synthetic_split

    pixels, _ = synthetic_split(24, seed=3)
    return pixels



@pytest.fixture(scope="module")
def server(exported_model):
    port = free_ports(1)[0]
    process = subprocess.Popen(
        [sys.executable, "-m", "serving.model_server.server", f"--model_dir={exported_model}",
         f"--http_port={port}", f"--max_body_bytes={BODY_LIMIT}", "--max_instances=64"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(url, NAME, timeout=180, is_alive=lambda: process.poll() is None)
    except (TimeoutError, RuntimeError):
        process.kill()
        raise AssertionError(process.stdout.read().decode(errors="replace")[-3000:]) from None
    yield url, process
    process.terminate()
    assert process.wait(timeout=60) is not None


@pytest.fixture(scope="module")
def in_process(exported_model):
    """The exported model's own answers, as the selection step computes them."""
    from serving.deploy.verification import in_process_predictions

    return lambda pixels: in_process_predictions(str(exported_model), pixels)


def predict(url: str, body, **kwargs) -> httpx.Response:
    return httpx.post(f"{url}/v1/models/{NAME}:predict", json=body, timeout=30, **kwargs)


def b64(data: bytes) -> dict:
    return {"image_bytes": {"b64": base64.b64encode(data).decode()}}


def test_v1_base64_pngs_answer_like_the_model_in_process(server, images, in_process):
    url, _ = server
    response = predict(url, v1_image_request(images))
    assert response.status_code == 200, response.text
    predictions = response.json()["predictions"]
    assert len(predictions) == len(images)
    for prediction in predictions:
        assert len(prediction["probabilities"]) == 10
        assert abs(sum(prediction["probabilities"]) - 1) < 1e-4
        assert prediction["class_name"] == CLASS_NAMES[prediction["class_index"]]
        assert prediction["class_index"] == int(np.argmax(prediction["probabilities"]))
    served = [p["class_index"] for p in predictions]
    assert served == in_process(images).tolist()


def test_raw_pixel_arrays_get_the_same_answers_as_pngs(server, images):
    url, _ = server
    as_png = predict(url, v1_image_request(images[:4])).json()["predictions"]
    as_lists = predict(url, {"instances": images[:4].tolist()}).json()["predictions"]
    named = predict(url, {"instances": [{"pixels": image.tolist()} for image in images[:4]]})
    for a, b, c in zip(as_png, as_lists, named.json()["predictions"], strict=True):
        assert a["class_index"] == b["class_index"] == c["class_index"]
        np.testing.assert_allclose(a["probabilities"], b["probabilities"], atol=1e-5)


def test_jpeg_and_colour_images_of_any_size_go_through_the_savedmodel_graph(
        server, images, exported_model):
    """What TF Serving would answer for the same bytes: the SavedModel's serving_default."""
    import tensorflow as tf

    from serving.model_server.predictor import resolve_saved_model_dir

    url, _ = server
    encoded = []
    for i, image in enumerate(images[:3]):
        big = Image.fromarray(image).resize((84, 84)).convert("RGB")
        buffer = io.BytesIO()
        big.save(buffer, format="JPEG" if i % 2 == 0 else "PNG")
        encoded.append(buffer.getvalue())
    response = predict(url, {"instances": [b64(data) for data in encoded]})
    assert response.status_code == 200, response.text
    signature = tf.saved_model.load(resolve_saved_model_dir(str(exported_model))).signatures[
        "serving_default"]
    expected = signature(image_bytes=tf.constant(encoded))["probabilities"].numpy()
    served = np.array([p["probabilities"] for p in response.json()["predictions"]])
    np.testing.assert_allclose(served, expected, atol=1e-5)


def test_v2_open_inference_protocol_with_bytes_and_pixels(server, images):
    url, _ = server
    infer = f"{url}/v2/models/{NAME}/infer"
    encoded = [base64.b64encode(png_bytes(image)).decode() for image in images[:3]]
    by_bytes = httpx.post(infer, json={"id": "r1", "inputs": [
        {"name": "image_bytes", "shape": [3], "datatype": "BYTES", "data": encoded}]})
    assert by_bytes.status_code == 200, by_bytes.text
    body = by_bytes.json()
    assert body["id"] == "r1" and body["model_name"] == NAME
    outputs = {o["name"]: o for o in body["outputs"]}
    assert outputs["probabilities"]["shape"] == [3, 10]
    assert outputs["probabilities"]["datatype"] == "FP32"
    assert outputs["class_index"]["datatype"] == "INT32"
    assert outputs["class_name"]["data"] == [CLASS_NAMES[i]
                                             for i in outputs["class_index"]["data"]]
    by_pixels = httpx.post(infer, json={"inputs": [
        {"name": "pixels", "shape": [3, 28, 28], "datatype": "UINT8",
         "data": images[:3].reshape(-1).tolist()}]})
    assert by_pixels.status_code == 200, by_pixels.text
    pixel_outputs = {o["name"]: o for o in by_pixels.json()["outputs"]}
    assert pixel_outputs["class_index"]["data"] == outputs["class_index"]["data"]


def _truncated_jpeg(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).resize((64, 64)).save(buffer, format="JPEG")
    data = buffer.getvalue()
    return data[:len(data) * 7 // 10]  # the header is intact; the scan data stops short


BAD_V1 = [
    ("malformed JSON", b"{\"instances\": [", "not JSON|Unrecognized request format"),
    ("no instances", {"images": []}, "instances"),
    ("empty batch", {"instances": []}, "empty batch"),
    ("bad base64", {"instances": [{"image_bytes": {"b64": "not base64!!"}}]},
     "not valid base64"),
    ("not an image", {"instances": [b64(b"plain text, not pixels")]},
     "not a PNG, JPEG, GIF or BMP"),
    ("wrong shape", {"instances": [[[0.0] * 27] * 28]}, r"shape \[28, 28\], got \[28, 27\]"),
    ("wrong dtype", {"instances": [[["x"] * 28] * 28]}, "non-numeric"),
    ("out of range", {"instances": [[[300.0] * 28] * 28]}, "0–255"),
    ("too many instances", {"instances": [[[0] * 28] * 28] * 65}, "at most 64"),
    ("unknown keys", {"instances": [{"image": "x"}]}, "unknown keys"),
]


@pytest.mark.parametrize(("case", "body", "message"), BAD_V1, ids=[c[0] for c in BAD_V1])
def test_bad_v1_requests_are_400_and_the_server_answers_the_next(server, images, case, body,
                                                                message):
    import re

    url, process = server
    if isinstance(body, bytes):
        response = httpx.post(f"{url}/v1/models/{NAME}:predict", content=body,
                              headers={"content-type": "application/json"})
    else:
        response = predict(url, body)
    assert response.status_code == 400, (case, response.status_code, response.text)
    assert re.search(message, response.json()["error"]), response.text
    assert predict(url, v1_image_request(images[:1])).status_code == 200
    assert process.poll() is None


def test_an_undecodable_image_fails_only_its_own_request_in_a_shared_batch(server, images):
    """The truncated JPEG passes the header check and fails in TensorFlow's decoder, inside a
    batch with other clients' images: only its request gets the error."""
    url, _ = server
    good = v1_image_request(images[:1])
    bad = {"instances": [b64(_truncated_jpeg(images[0]))]}
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        futures = [pool.submit(predict, url, bad if i == 5 else good) for i in range(12)]
        responses = [f.result() for f in futures]
    assert responses[5].status_code == 400
    assert "cannot be decoded" in responses[5].json()["error"]
    assert all(r.status_code == 200 for i, r in enumerate(responses) if i != 5)


def test_bad_v2_requests_are_4xx(server):
    url, _ = server
    infer = f"{url}/v2/models/{NAME}/infer"
    cases = [
        ({"inputs": [{"name": "pixels", "shape": [1, 28, 27], "datatype": "FP32",
                      "data": [0.0] * 756}]}, "shape \\[N, 28, 28\\]"),
        ({"inputs": [{"name": "pixels", "shape": [1, 28, 28], "datatype": "FP32",
                      "data": [0.0] * 5}]}, "does not fit shape"),
        ({"inputs": [{"name": "pixels", "shape": [1, 28, 28], "datatype": "BYTES",
                      "data": ["a"] * 784}]}, "numeric tensor"),
        ({"inputs": [{"name": "images", "shape": [1], "datatype": "BYTES", "data": ["a"]}]},
         "exactly one input named"),
        ({"inputs": [{"name": "image_bytes", "shape": [0], "datatype": "BYTES", "data": []}]},
         "empty batch"),
    ]
    import re

    for body, message in cases:
        response = httpx.post(infer, json=body)
        assert response.status_code == 400, (body, response.text)
        assert re.search(message, response.json()["error"]), response.text
    malformed = httpx.post(infer, content=b"{", headers={"content-type": "application/json"})
    assert 400 <= malformed.status_code < 500


def test_an_oversized_body_is_413_whether_declared_or_streamed(server, images):
    url, _ = server
    big = {"instances": [[[0] * 28] * 28] * 40, "padding": "x" * BODY_LIMIT}
    declared = predict(url, big)
    assert declared.status_code == 413
    assert "limit" in declared.json()["error"]

    def chunks():
        data = json.dumps(big).encode()
        for start in range(0, len(data), 65536):
            yield data[start:start + 65536]

    streamed = httpx.post(f"{url}/v1/models/{NAME}:predict", content=chunks(),
                          headers={"content-type": "application/json"})
    assert streamed.status_code == 413
    assert predict(url, v1_image_request(images[:1])).status_code == 200


def test_unknown_model_is_404(server, images):
    url, _ = server
    response = httpx.post(f"{url}/v1/models/other:predict", json=v1_image_request(images[:1]))
    assert response.status_code == 404


def test_the_server_listens_on_loopback_only(server):
    import psutil

    _, process = server
    listening = [c for c in psutil.Process(process.pid).connections()
                 if c.status == psutil.CONN_LISTEN]
    assert listening and all(c.laddr.ip == "127.0.0.1" for c in listening)


def test_concurrent_requests_are_batched(exported_model, images):
    """Concurrent callers share model calls: fewer batches than requests, same answers."""
    import asyncio

    from serving.model_server.predictor import FashionMnistModel

    model = FashionMnistModel(NAME, str(exported_model), max_batch_size=8,
                              max_batch_latency_ms=5)
    model.load()
    bodies = [v1_image_request(images[i:i + 1]) for i in range(16)]

    async def run():
        return await asyncio.gather(*(model(body, {}) for body in bodies))

    answers = asyncio.run(run())
    stats = model.batcher.stats.as_dict()
    assert stats["requests"] == 16 and stats["instances"] == 16
    assert stats["batches"] < 16 and stats["largest_batch"] > 1
    alone = FashionMnistModel(NAME, str(exported_model), fast_path=False)
    alone.load()
    for body, (answer, _) in zip(bodies, answers, strict=True):
        expected, _ = asyncio.run(alone(body, {}))
        assert answer["predictions"][0]["class_index"] == \
            expected["predictions"][0]["class_index"]


def test_make_serve_serves_the_latest_selected_model(exported_model, tmp_path, images):
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"best_model_path": str(exported_model)}))
    port = free_ports(1)[0]
    process = subprocess.Popen(
        [sys.executable, "-m", "fmnist.app.cli", "serve", "--summary", str(summary),
         "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_ready(url, NAME, timeout=180, is_alive=lambda: process.poll() is None)
        assert predict(url, v1_image_request(images[:2])).status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=60)


def test_serve_without_a_selected_model_says_what_to_do(tmp_path, capsys):
    from fmnist.app.cli import main

    assert main(["serve", "--summary", str(tmp_path / "missing.json")]) == 2
    assert "run the pipeline first" in capsys.readouterr().err
