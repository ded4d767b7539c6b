"""Talking to a served model over HTTP the way users do: V1 ``:predict`` with base64 PNGs.

Used by the prediction step, by deployment verification (local and canary) and by tests.
"""

from __future__ import annotations

import base64
import io
import logging
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import numpy as np

DEFAULT_TIMEOUT = 30.0
# How long, in all, a check sends again requests whose connection was refused. Right after a
# rollout a Service's rules can still send a connection to the old pod, which stopped
# listening when it was told to stop: the kubelet begins a deleted pod's teardown at once
# (kubernetes v1.34.1 pkg/kubelet/pod_workers.go L873-877), while kube-proxy applies the
# EndpointSlice change on its next sync, at least a second apart (pkg/proxy/apis/config/
# v1alpha1/defaults.go L77-78). A refused request never reached a model: sending it again
# is safe.
CONNECT_RETRY_SECONDS = 10.0
logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request


def png_bytes(image: np.ndarray) -> bytes:
    """A uint8 [28, 28] image as PNG, the way a user's client would upload it."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.asarray(image, np.uint8), mode="L").save(buffer, format="PNG")
    return buffer.getvalue()


def v1_image_request(images: Iterable[np.ndarray]) -> dict:  # a list, or an array of them
    return {"instances": [
        {"image_bytes": {"b64": base64.b64encode(png_bytes(image)).decode()}} for image in images
    ]}


def predict_url(base_url: str, model_name: str) -> str:
    return f"{base_url.rstrip('/')}/v1/models/{model_name}:predict"


def query_examples(base_url: str, model_name: str, image: str = "shirt.png") -> list[str]:
    """How a person asks the served model about a photo ``image``: a ``curl`` command line
    and a Python one, each printing the V1 answer (shown where a run prints the URL; run as
    written by tests/serving/model_server/test_serving.py)."""
    url = predict_url(base_url, model_name)
    return [
        f'curl -s {url} -d "{{\\"instances\\": [{{\\"image_bytes\\": '
        f'{{\\"b64\\": \\"$(base64 -w0 {image})\\"}}}}]}}"',
        f"python -c \"import base64, httpx; print(httpx.post('{url}', json={{'instances': "
        f"[{{'image_bytes': {{'b64': base64.b64encode(open('{image}', 'rb').read())"
        f".decode()}}}}]}}).json())\"",
    ]


def wait_until_ready(base_url: str, model_name: str, timeout: float = 120.0,
                     is_alive=None) -> None:
    """Polls ``GET /v1/models/<name>`` until the model reports ready."""
    import httpx

    deadline = time.monotonic() + timeout
    url = f"{base_url.rstrip('/')}/v1/models/{model_name}"
    last = "no answer"
    while time.monotonic() < deadline:
        if is_alive is not None and not is_alive():
            raise RuntimeError(f"the model server exited before {model_name} was ready")
        try:
            response = httpx.get(url, timeout=5.0)
            if response.status_code == 200 and response.json().get("ready"):
                return
            last = f"HTTP {response.status_code}"
        except httpx.HTTPError as error:
            last = type(error).__name__
        time.sleep(0.5)
    raise TimeoutError(f"{url} was not ready after {timeout:.0f} s ({last})")


class RefusedConnections:
    """Sends a request again while its connection is refused, for at most ``seconds`` over
    all the requests of one check (:data:`CONNECT_RETRY_SECONDS`): a server that stays down
    costs a check that long once, not once a request."""

    def __init__(self, seconds: float, pause: float = 0.5):
        self.left = seconds
        self.pause = pause

    def retry(self, send, *args, **kwargs):
        """``send(*args, **kwargs)``, again while its connection is refused."""
        import httpx

        while True:
            try:
                return send(*args, **kwargs)
            except httpx.ConnectError:
                if self.left <= 0:
                    raise
                pause = min(self.pause, self.left)
                time.sleep(pause)
                self.left -= pause


@dataclass
class PredictionCheck:
    """What a sample of real test images got from a served model."""

    url: str
    requests: int
    failures: int
    images: int
    correct: int
    accuracy: float
    predicted: list[int]  # -1 where a request failed
    seconds: float
    errors: list[str]
    # Each image's served probabilities; None where a request failed or the answer has none.
    probabilities: list[list[float] | None] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failures == 0 and self.images > 0

    def as_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def check_predictions(base_url: str, model_name: str, images: np.ndarray, labels: np.ndarray,
                      *, batch_size: int = 16, timeout: float = DEFAULT_TIMEOUT,
                      log=None) -> PredictionCheck:
    """Sends ``images`` as b64 PNGs in V1 requests of ``batch_size`` and scores the answers."""
    import httpx

    url = predict_url(base_url, model_name)
    predicted: list[int] = []
    probabilities: list[list[float] | None] = []
    errors: list[str] = []
    requests = failures = 0
    started = time.monotonic()
    refused = RefusedConnections(CONNECT_RETRY_SECONDS)
    with httpx.Client(timeout=timeout) as client:
        for start in range(0, len(images), batch_size):
            chunk = images[start:start + batch_size]
            requests += 1
            try:
                response = refused.retry(client.post, url, json=v1_image_request(chunk))
            except httpx.HTTPError as error:
                failures += 1
                errors.append(f"request {requests}: {type(error).__name__}: {error}")
                predicted.extend([-1] * len(chunk))
                probabilities.extend([None] * len(chunk))
                continue
            if response.status_code != 200:
                failures += 1
                errors.append(f"request {requests}: HTTP {response.status_code} "
                              f"{response.text[:200]}")
                predicted.extend([-1] * len(chunk))
                probabilities.extend([None] * len(chunk))
                continue
            answers = response.json()["predictions"]
            predicted.extend(p["class_index"] for p in answers)
            probabilities.extend(p.get("probabilities") for p in answers)
            if log and requests % 20 == 0:
                log(f"sent {requests} requests, {len(predicted)} images")
    correct = int(np.sum(np.asarray(predicted) == np.asarray(labels[:len(predicted)])))
    return PredictionCheck(
        url=url, requests=requests, failures=failures, images=len(images), correct=correct,
        accuracy=correct / len(images) if len(images) else 0.0, predicted=predicted,
        seconds=round(time.monotonic() - started, 3), errors=errors[:10],
        probabilities=probabilities,
    )
