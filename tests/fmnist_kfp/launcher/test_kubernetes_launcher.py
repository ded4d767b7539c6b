"""The TFJob launcher under API faults, against the API stand-in (tests/standins/kubernetes.py)
whose fault injection answers one chosen request: transient errors, 401/403/410, a create held
until SIGTERM. Everything else the launcher meets on the real Training Operator
(test_tfjob_launcher.py); these move onto it through the fault proxy in front of the real API
server. Time is fake: every wait is bounded by a deadline in fake seconds."""

from __future__ import annotations

import io
import json
import queue
import signal
import subprocess

import pytest

from fmnist_kfp.errors import TrainingJobError
from fmnist_kfp.launcher.tfjob_launcher import TFJobLauncher
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.training_job import TrainingJobSpec
from tests.launcher_harness import drain, read_until, spawn_script
from tests.standins.kubernetes import FakeTime, KubernetesStandIn

NAME = "fmnist-basic-3f2a9c"
JOBS = "/apis/kubeflow.org/v1/namespaces/kubeflow/tfjobs"
DEADLINE = 600.0  # fake seconds: a launcher that never sees the end fails the test at once


def _spec(tmp_path, **overrides) -> TrainingJobSpec:
    values = dict(name=NAME, config=TrainingConfig(model_type="basic"),
                  data_dir="/mnt/fmnist/dataset", export_dir=str(tmp_path / "model" / "1"),
                  work_dir=str(tmp_path / "model"), num_workers=2)
    values.update(overrides)
    return TrainingJobSpec(**values)


def _launcher(standin, restart_policy: str = "ExitCode", **kwargs) -> TFJobLauncher:
    settings = KubernetesSettings(image="ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0",
                                  namespace="kubeflow", pvc_name="fmnist-pvc",
                                  restart_policy=restart_policy)
    time = FakeTime()
    values = dict(training_client=standin.training_client(), poll_seconds=5,
                  timeout_seconds=DEADLINE, out=io.StringIO(), request_timeout_seconds=2,
                  clock=time, sleep=time.sleep)
    values.update(kwargs)
    return TFJobLauncher(settings, **values)


def _finish(tmp_path) -> None:
    """What the chief leaves on shared storage when the job succeeds."""
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "result.json").write_text(json.dumps({"model_type": "basic"}))


def _conditions(standin) -> list[tuple[str, str]]:
    job = standin.job(NAME)
    return [(c["type"], c["status"]) for c in job["status"]["conditions"]]


@pytest.mark.parametrize("fault", [500, 503, 429, "timeout", "reset"])
def test_a_transient_api_error_mid_run_leaves_the_job_alive_and_the_step_succeeds(
        tmp_path, fault):
    """One bad read while the TFJob runs (at 1cd2394 it deleted the running job and failed
    the step)."""
    _finish(tmp_path)
    with KubernetesStandIn(running_ticks=4) as standin:
        standin.timeout_hold_seconds = 0.6
        launcher = _launcher(standin, request_timeout_seconds=0.5)
        original = standin.on_get

        def after_running(handler):  # the fault arrives once the job is running
            job = standin.job(NAME)
            if job and any(c["type"] == "Running" for c in job["status"].get("conditions", [])):
                standin.on_get = original
                standin.inject("GET", "tfjobs", fault, fault)
            original(handler)

        standin.on_get = after_running
        outcome = launcher.run(_spec(tmp_path))
    assert outcome.result == {"model_type": "basic"}
    assert not any(m == "DELETE" for m, _ in standin.methods())
    # Exactly the two faults; a timed-out request still holds one of the SDK's pool threads
    # for a moment, which can time out a retry too.
    retries = launcher.out.getvalue().count("failed transiently")
    assert retries == 2 if fault != "timeout" else retries >= 2


def test_a_transient_error_listing_pods_is_retried_too(tmp_path):
    _finish(tmp_path)
    with KubernetesStandIn() as standin:
        standin.inject("GET", "pods", 500)
        _launcher(standin).run(_spec(tmp_path))
    assert not any(m == "DELETE" for m, _ in standin.methods())


@pytest.mark.parametrize("resource", ["tfjobs", "pods"])
@pytest.mark.parametrize("status", [401, 403, 410])
def test_an_auth_or_gone_answer_mid_run_leaves_the_tfjob_running(tmp_path, resource, status):
    """A 401 or 403 (the step's token or RBAC) or 410 Gone reading the TFJob or listing its
    pods says nothing about the job: it is left for a retried step to re-attach to (Kubernetes
    API conventions, "HTTP Status codes", kubernetes/community api-conventions.md lines
    1514-1530 and 1562-1566 at 24e7d8f). Until the fix the runner deleted it."""
    with KubernetesStandIn(running_ticks=50) as standin:
        launcher = _launcher(standin)
        original = standin.on_get

        def after_running(handler):
            job = standin.job(NAME)
            if job and any(c["type"] == "Running" for c in job["status"].get("conditions", [])):
                standin.on_get = original
                standin.inject("GET", resource, status)
            original(handler)

        standin.on_get = after_running
        with pytest.raises(TrainingJobError) as failure:
            launcher.run(_spec(tmp_path))
        assert standin.job(NAME) is not None and (("kubeflow", NAME) in standin.jobs)
    assert not any(m == "DELETE" for m, _ in standin.methods())
    message = str(failure.value)
    assert f"reading TFJob kubeflow/{NAME} was refused (HTTP {status} " in message
    assert "left as it is, still running and not deleted" in message
    assert "a retry of this step re-attaches to it" in message


@pytest.mark.parametrize("status", [401, 403, 410])
def test_an_auth_or_gone_answer_reading_the_log_skips_the_log_and_the_job_goes_on(tmp_path,
                                                                                  status):
    _finish(tmp_path)
    with KubernetesStandIn(logs={"worker-0": "line one\n"}, running_ticks=4) as standin:
        standin.inject("GET", "log", status)
        launcher = _launcher(standin)
        outcome = launcher.run(_spec(tmp_path))
    assert outcome.result == {"model_type": "basic"}
    assert not any(m == "DELETE" for m, _ in standin.methods())
    assert launcher.out.getvalue().count(f"[{NAME}-worker-0] line one") == 1


# ---------------------------------------------------------------------------------------------
# SIGTERM: a terminated pipeline run sends it to the launcher pod; the TFJob goes with it.

_CHILD = """
import sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from tests.standins.kubernetes import KubernetesStandIn
from tests.fmnist_kfp.launcher.test_kubernetes_launcher import _launcher, _spec

class Remote(KubernetesStandIn):
    def __init__(self):
        pass
    url = {url!r}

launcher = _launcher(Remote(), out=sys.stdout, clock=None, sleep=None, poll_seconds=0.05,
                     timeout_seconds=120)
print("launching", flush=True)
launcher.run(_spec(Path({tmp!r})))
"""


def _launch_child(standin, tmp_path) -> tuple[subprocess.Popen, queue.Queue]:
    return spawn_script(_CHILD, url=standin.url, tmp=str(tmp_path))



@pytest.mark.process
def test_sigterm_while_the_create_call_is_in_flight_deletes_what_was_created(tmp_path):
    """The stand-in holds the create until the signal has been handled; at 1cd2394 the
    handler was installed only after create returned, so the job was left behind."""
    seen: list[str] = []
    with KubernetesStandIn() as standin:
        gate = standin.gate("POST", "tfjobs")
        process, lines = _launch_child(standin, tmp_path)
        try:
            assert gate.arrived.wait(60), "the create call never arrived"
            process.send_signal(signal.SIGTERM)
            read_until(lines, "SIGTERM while creating", seen)  # handled (or the child died)
            gate.release()
            drain(process, lines, seen)
        finally:
            process.kill()
    output = "\n".join(seen)
    assert process.returncode == 128 + signal.SIGTERM, output
    assert ("DELETE", f"{JOBS}/{NAME}") in standin.methods(), output
    assert standin.jobs == {}
    assert f"deleted TFJob kubeflow/{NAME}" in output


def test_a_failed_log_read_is_skipped_and_the_lines_come_on_the_next_poll(tmp_path):
    _finish(tmp_path)
    with KubernetesStandIn(logs={"worker-0": "line one\nline two\n"}, running_ticks=4
                           ) as standin:
        standin.inject("GET", "log", 500)
        launcher = _launcher(standin)
        launcher.run(_spec(tmp_path))
    out = launcher.out.getvalue()
    assert out.count(f"[{NAME}-worker-0] line one") == 1
    assert out.count(f"[{NAME}-worker-0] line two") == 1
    assert "failed transiently" not in out  # logs are no part of the job's state


