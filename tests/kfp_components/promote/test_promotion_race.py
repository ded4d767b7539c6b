"""serve_early's promotion is atomic (issue 23): two models that finish training at the same
time race to be served, and the worse one never replaces the better one. Locally the rule is
the deployment's lock (``fmnist_kfp.serving.deploy.local_deployer.promote_locally``); the test
forces the interleaving that would downgrade without it — both read "nothing served", the better one
is saved first, the worse one after — and shows the lock prevents it, in both finishing orders.
The servers are small real HTTP processes that answer readiness as the predictor does."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time

import pytest

from fmnist_kfp.serving.deploy import local_deployer
from fmnist_kfp.serving.deploy.local_deployer import (
    LocalPromotion,
    LocalServer,
    promote_locally,
    running_server,
)

NAME = "fashion-mnist"
_READY_SERVER = """
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"name": sys.argv[1], "ready": True}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *args): pass
server = http.server.HTTPServer(("127.0.0.1", 0), H)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv(local_deployer.STATE_DIR_ENV, str(tmp_path / "state"))
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def _model(tmp_path, tag: str) -> str:
    directory = tmp_path / tag / "1"
    directory.mkdir(parents=True)
    (directory / "saved_model.pb").write_text(tag)  # a distinct fingerprint per model
    return str(tmp_path / tag)


def _starter(started: list, barrier: threading.Barrier, better_saved: threading.Event):
    """A start() that (1) waits at ``barrier`` for the other promotion to have read the
    deployment too (given up after a second: under the lock the other one cannot), and (2)
    for the worse model, returns only once the better one is saved: without the lock, the
    worse one is saved last."""
    def start(name: str, model_dir: str, server_args=None) -> LocalServer:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=1.0)
        if model_dir.endswith("worse"):
            better_saved.wait(timeout=5.0)
        process = subprocess.Popen([sys.executable, "-c", _READY_SERVER, name],
                                   stdout=subprocess.PIPE, text=True)
        started.append(process)
        port = int(process.stdout.readline())
        return LocalServer(name=name, url=f"http://127.0.0.1:{port}", port=port,
                           pid=process.pid, model_dir=model_dir,
                           model_fingerprint=local_deployer.model_fingerprint(model_dir),
                           test_accuracy=None, log_file="", started=time.time())
    return start


def _race(tmp_path, started, first: str) -> list[LocalPromotion]:
    models = {"better": (_model(tmp_path, "better"), 0.9312),
              "worse": (_model(tmp_path, "worse"), 0.9188)}
    barrier, better_saved = threading.Barrier(2), threading.Event()
    start = _starter(started, barrier, better_saved)
    decisions: list[LocalPromotion] = []

    def promote(which: str) -> None:
        model_dir, accuracy = models[which]
        decision = promote_locally(NAME, model_dir, accuracy, model_type=which, tolerance=0.005,
                                   verify=lambda url: {"ok": True, "accuracy": accuracy},
                                   start=start,
                                   log=lambda message: None)
        if which == "better":
            better_saved.set()
        decisions.append(decision)

    order = [first, "worse" if first == "better" else "better"]
    threads = [threading.Thread(target=promote, args=(which,)) for which in order]
    for thread in threads:
        thread.start()
        time.sleep(0.05)  # the first one reads the deployment first
    for thread in threads:
        thread.join(timeout=30)
    return decisions


@pytest.mark.parametrize("first", ["better", "worse"])
def test_racing_promotions_never_serve_the_worse_model(tmp_path, state, first):
    decisions = _race(tmp_path, state, first)
    served = running_server(NAME)
    assert served.model_type == "better" and served.validation_accuracy == 0.9312
    by_model = {d.model_type: d.action for d in decisions}
    if first == "better":  # the worse one, deciding after it, is rejected
        assert by_model == {"better": "created", "worse": "rejected"}
    else:  # the worse one served first, the better one replaced it
        assert by_model == {"worse": "created", "better": "promoted"}
    history = [json.loads(line) for line in
               local_deployer.history_path(NAME).read_text().splitlines()]
    assert history[-1]["model_type"] == "better"


def test_without_the_lock_the_same_race_downgrades(tmp_path, state, monkeypatch):
    """The forced interleaving is real: with the lock taken out, both read "nothing
    served", and the worse model, saved last, ends up served."""
    monkeypatch.setattr(local_deployer, "deployment_lock",
                        lambda name: contextlib.nullcontext())
    _race(tmp_path, state, "better")
    assert running_server(NAME).model_type == "worse"


def test_bless_early_compares_validation_strictly_and_falls_back_to_the_served_test_accuracy():
    from fmnist_kfp.serving.deploy.blessing import bless_early

    assert bless_early(0.91, None, None, 0.005).blessed  # nothing served
    assert bless_early(0.9301, 0.93, None, 0.005).blessed
    assert not bless_early(0.93, 0.93, None, 0.005).blessed  # a tie keeps the served model
    assert not bless_early(0.92, 0.93, None, 0.005).blessed
    # Served by an ordinary deployment (a test accuracy only): blessing's tolerance rule.
    assert bless_early(0.926, None, 0.93, 0.005).blessed
    assert not bless_early(0.924, None, 0.93, 0.005).blessed

