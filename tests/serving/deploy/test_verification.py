"""Deployment verification: the served answers are the selected model's own, float rounding and
near-ties aside, and a wrong model never passes.

The rule (:func:`fmnist_kfp.serving.deploy.verification.agreement`) is checked on constructed
answers (a near-tie flipped by float noise passes; permuted classes and another model fail), then on
a real model server on loopback serving a real exported CNN, the right one and two wrong ones.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fmnist_kfp.kfp_components.predict.step import ServedModelMismatch, judge
from fmnist_kfp.serving.deploy.verification import (
    PROBABILITY_TOLERANCE,
    TIE_MARGIN,
    Comparison,
    agreement,
    make_verifier,
)

NAME = "verified"


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def _near_tie_model(count: int = 200, ties: int = 20, seed: int = 0) -> np.ndarray:
    """In-process probabilities of a weakly trained model: mostly confident, but on ``ties``
    images its two best classes are 1e-7 apart (the case that failed a deploy at 0.995)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 1, (count, 10))
    logits[np.arange(count), rng.integers(0, 10, count)] += 4
    probabilities = _softmax(logits)
    for i in range(ties):
        first, second = np.argsort(probabilities[i])[-2:][::-1]
        probabilities[i, second] = probabilities[i, first] - 1e-7
    return probabilities


def _served(probabilities: np.ndarray, noise: float, seed: int = 1):
    """What another numerical path of the same model answers: probabilities moved by at most
    ``noise``, and the class they rank first."""
    rng = np.random.default_rng(seed)
    served = probabilities + rng.uniform(-noise, noise, probabilities.shape)
    return served.argmax(axis=1).tolist(), served.tolist()


def test_float_noise_that_flips_near_ties_still_agrees():
    expected = _near_tie_model()
    classes, probabilities = _served(expected, noise=1e-6)
    found = agreement(expected, classes, probabilities)
    assert found.near_ties > 0 and found.fraction < 1.0  # the old rule (agreement 1.0) failed
    assert found.unexplained == 0 and found.agrees
    assert found.max_probability_difference <= 1e-6


def test_classes_alone_agree_when_every_difference_is_a_near_tie():
    expected = _near_tie_model()
    classes, _ = _served(expected, noise=1e-6)
    assert agreement(expected, classes).agrees  # a server that sends classes only


def test_permuted_classes_fail():
    expected = _near_tie_model()
    permuted = np.roll(expected, 1, axis=1)  # the model's columns shifted by one class
    found = agreement(expected, permuted.argmax(axis=1).tolist(), permuted.tolist())
    assert not found.agrees
    assert found.unexplained > 150 and found.max_probability_difference > 0.5


def test_another_checkpoint_fails_even_where_its_classes_mostly_agree():
    expected = _near_tie_model()
    # Another checkpoint of the same network: the same answers on most images, probabilities
    # moved by a few hundredths, a few confident classes changed.
    rng = np.random.default_rng(2)
    other = _softmax(np.log(expected) + rng.normal(0, 0.05, expected.shape))
    other[:3] = np.roll(other[:3], 1, axis=1)
    found = agreement(expected, other.argmax(axis=1).tolist(), other.tolist())
    assert found.fraction > 0.9
    assert not found.agrees and found.unexplained >= 3
    # The probabilities alone give it away, even with no class changed.
    unchanged = _softmax(np.log(expected[3:]) + rng.normal(0, 0.05, expected[3:].shape))
    assert not agreement(expected[3:], expected[3:].argmax(axis=1).tolist(),
                         unchanged.tolist()).agrees


def test_a_difference_beyond_the_tie_margin_is_unexplained():
    expected = np.full((1, 10), 0.05)
    expected[0, :2] = [0.30, 0.30 - 1.5 * TIE_MARGIN]
    expected /= expected.sum()
    assert agreement(expected, [1]).unexplained == 1
    expected[0, 1] = expected[0, 0] - 0.5 * TIE_MARGIN
    assert agreement(expected, [1]).near_ties == 1


def test_unanswered_images_never_agree():
    expected = _near_tie_model(count=4, ties=0)
    found = agreement(expected, [-1, *expected[1:].argmax(axis=1).tolist()],
                      [None, *expected[1:].tolist()])
    assert found.unexplained == 1 and not found.agrees
    assert not agreement(np.zeros((0, 10)), []).agrees  # no image checked proves nothing


def test_the_prediction_step_accepts_a_flipped_near_tie_and_refuses_a_wrong_model():
    near_tie = Comparison(
        url="http://127.0.0.1:1", requests=13, failures=0, images=200, correct=143,
        accuracy=0.715, seconds=0.5, errors=[], ok=True, agreement=0.995, near_ties=1,
        unexplained_disagreements=0, max_probability_difference=3e-7,
        probability_tolerance=PROBABILITY_TOLERANCE, expected_accuracy=0.72)
    judge(near_tie, "http://127.0.0.1:1", serves_model=True)  # the old rule raised here
    wrong = replace(near_tie, ok=False, agreement=0.81, near_ties=0,
                    unexplained_disagreements=38, max_probability_difference=0.62)
    with pytest.raises(ServedModelMismatch, match="38 unexplained") as raised:
        judge(wrong, "http://127.0.0.1:1", serves_model=True)
    assert wrong.describe() in str(raised.value)
    judge(wrong, "http://127.0.0.1:1", serves_model=False)  # an earlier model: only measured


# -- a real model server ------------------------------------------------------------------


def _export(directory, seed: int, permute: bool = False):
    """The exported CNN of ``tests.conftest.export_untrained_model`` (same seed, same
    weights); ``permute`` shifts its classifier's columns by one class."""
    import tensorflow as tf

    from fmnist_kfp.settings.training import TrainingConfig
    from fmnist_kfp.training.export import export_saved_model
    from fmnist_kfp.training.models import build_model

    tf.keras.utils.set_random_seed(seed)
    model = build_model(TrainingConfig(model_type="basic"))
    if permute:
        classifier = [layer for layer in model.layers if layer.name.startswith("dense")][-1]
        kernel, bias = classifier.get_weights()
        classifier.set_weights([np.roll(kernel, 1, axis=1), np.roll(bias, 1)])
    export_saved_model(model, str(directory / "1"))
    return directory


@pytest.fixture(scope="module")
def served(exported_model, tmp_path_factory):
    """The model server on loopback, serving ``exported_model`` (seed 7)."""
    import os

    from fmnist_kfp.serving.deploy.local_deployer import start_server, stop_process

    state = tmp_path_factory.mktemp("serving-state")
    previous = os.environ.get("FMNIST_SERVING_STATE_DIR")
    os.environ["FMNIST_SERVING_STATE_DIR"] = str(state)
    server = start_server(NAME, str(exported_model))
    try:
        yield server
    finally:
        stop_process(server.pid)
        if previous is None:
            os.environ.pop("FMNIST_SERVING_STATE_DIR")
        else:
            os.environ["FMNIST_SERVING_STATE_DIR"] = previous


@pytest.fixture(scope="module")
def sample(synthetic_dataset):
    from fmnist_kfp.serving.deploy.verification import test_sample

    return test_sample(str(synthetic_dataset), 64)


def test_the_served_model_passes_its_own_verification(served, exported_model, sample):
    result = make_verifier(str(exported_model), NAME, *sample)(served.url)
    assert result.ok and result.failures == 0 and result.images == 64
    assert result.unexplained_disagreements == 0
    assert result.max_probability_difference <= PROBABILITY_TOLERANCE


@pytest.mark.parametrize(("wrong", "seed", "permute"), [
    ("permuted classes", 7, True),
    ("another checkpoint", 8, False),
])
def test_a_wrong_model_fails_verification(served, sample, tmp_path, wrong, seed, permute):
    """The verifier expects another model than the one served: the selected model's classes
    permuted, or the same network with other weights."""
    other = _export(tmp_path / "other", seed, permute=permute)
    result = make_verifier(str(other), NAME, *sample)(served.url)
    assert result.failures == 0  # every request was answered ...
    assert not result.ok, (wrong, result)  # ... by the wrong model
    # Even two untrained networks (near-uniform answers) are several tolerances apart.
    assert result.max_probability_difference > 5 * PROBABILITY_TOLERANCE


def _with_stored(model_dir, tmp_path, images, probabilities):
    """A copy of ``model_dir`` with ``probabilities`` stored beside it as selection does."""
    import shutil

    from fmnist_kfp.selection.held_out_scores import store_probabilities

    copy = tmp_path / "selected"
    shutil.copytree(model_dir, copy)
    store_probabilities(str(copy), images, probabilities)
    return copy


def test_selections_stored_answers_are_what_the_served_model_is_held_to(
        served, exported_model, sample, tmp_path):
    """Deploy and predict read the model's answers from selection instead of loading the
    model; the check is as strict: stored answers of the wrong classes fail it, and a model
    that is not the one they were computed for is scored again."""
    from fmnist_kfp.serving.deploy.verification import in_process_probabilities

    images, labels = sample
    own = in_process_probabilities(str(exported_model), images)
    selected = _with_stored(exported_model, tmp_path, images, own)
    lines: list[str] = []
    result = make_verifier(str(selected), NAME, images, labels, log=lines.append)(served.url)
    assert result.ok and any("selection stored" in line for line in lines)

    wrong = _with_stored(exported_model, tmp_path / "wrong", images, np.roll(own, 1, axis=1))
    result = make_verifier(str(wrong), NAME, images, labels)(served.url)
    assert result.failures == 0 and not result.ok

    # The same directory holding another SavedModel: the stored answers are not its own.
    (wrong / "1" / "assets").mkdir(exist_ok=True)
    (wrong / "1" / "assets" / "retrained").write_text("other bytes, other digest")
    lines.clear()
    result = make_verifier(str(wrong), NAME, images, labels, log=lines.append)(served.url)
    assert result.ok and not any("selection stored" in line for line in lines)


def test_a_comparison_is_recorded_with_the_keys_of_before():
    """The record a deployment keeps (its ``verification``): the same keys in the same order."""
    assert list(Comparison.__dataclass_fields__) == [
        "url", "requests", "failures", "images", "correct", "accuracy", "seconds", "errors", "ok",
        "agreement", "near_ties", "unexplained_disagreements", "max_probability_difference",
        "probability_tolerance", "expected_accuracy"]


class _RelayAfter:
    """A port that refuses connections (bound, not listening) until ``start``, then relays
    each request to ``target``: a Service whose rules still point at a pod that stopped."""

    def __init__(self, target: str):
        import http.server
        import socket

        import httpx

        class Relay(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                answer = httpx.post(target + self.path, content=body,
                                    headers={"Content-Type": "application/json"}, timeout=30)
                self.send_response(answer.status_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Relay,
                                                      bind_and_activate=False)
        self.server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.server_bind()  # bound: connecting is refused until it listens
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.serving = False

    def start(self) -> None:
        import threading

        self.server.server_activate()
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.serving = True

    def close(self) -> None:
        if self.serving:
            self.server.shutdown()
        self.server.server_close()


def test_a_refused_connection_is_sent_again_until_the_server_listens(served, exported_model,
                                                                    sample):
    """Right after a rollout a Service can send a connection to the pod that stopped
    (kube-proxy syncs later): the check sends the refused request again, and passes."""
    import threading
    import time

    relay = _RelayAfter(served.url)
    timer = threading.Timer(1.5, relay.start)
    timer.start()
    started = time.monotonic()
    try:
        result = make_verifier(str(exported_model), NAME, *sample)(relay.url)
    finally:
        timer.join()
        relay.close()
    assert result.ok and result.failures == 0, result
    assert time.monotonic() - started >= 1.5  # it was refused first


def test_a_server_that_stays_down_fails_the_check_once_its_retry_time_is_spent(
        served, exported_model, sample, monkeypatch):
    """The retry time is shared by the check's requests: four refused requests wait it out
    once, not once each. (The pauses are counted, not slept.)"""
    from fmnist_kfp.serving.deploy import client

    monkeypatch.setattr(client, "CONNECT_RETRY_SECONDS", 1.0)
    paused: list[float] = []
    monkeypatch.setattr(client.time, "sleep", paused.append)
    relay = _RelayAfter(served.url)  # never listens
    images, labels = sample
    try:
        check = client.check_predictions(relay.url, NAME, images, labels, batch_size=16)
    finally:
        relay.close()
    assert check.requests == 4 and check.failures == 4 and not check.ok
    assert check.errors[0].startswith("request 1: ConnectError")
    assert sum(paused) == 1.0, paused


def test_the_docs_give_the_retry_time_the_check_uses():
    import re

    from fmnist_kfp.serving.deploy.client import CONNECT_RETRY_SECONDS
    from tests import ROOT

    text = " ".join((ROOT / "docs" / "serving.md").read_text().split())
    [seconds] = re.findall(r"refused is sent again, for up to (\d+) s over the whole check", text)
    assert float(seconds) == CONNECT_RETRY_SECONDS
