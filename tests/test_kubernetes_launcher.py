"""The TFJob launcher against a stand-in of the Kubernetes API that records calls (it checks
what we send and how we react to job states; it is not a cluster)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from fmnist.errors import TrainingJobError
from fmnist.launcher.kubernetes import TFJobLauncher
from fmnist.settings.jobs import KubernetesSettings
from fmnist.settings.training import TrainingConfig
from fmnist.training.job import TrainingJobSpec
from tests.crd_schemas import validate_strict
from tests.k8s_standin import KubernetesStandIn

JOBS = "/apis/kubeflow.org/v1/namespaces/kubeflow/tfjobs"


def _spec(tmp_path) -> TrainingJobSpec:
    return TrainingJobSpec(
        name="fmnist-basic-3f2a9c", config=TrainingConfig(model_type="basic"),
        data_dir="/mnt/fmnist/dataset", export_dir=str(tmp_path / "model" / "1"),
        work_dir=str(tmp_path / "model"), num_workers=2,
    )


def _launcher(standin, **kwargs) -> TFJobLauncher:
    settings = KubernetesSettings(image="ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0",
                                  namespace="kubeflow", pvc_name="fmnist-pvc")
    return TFJobLauncher(settings, training_client=standin.training_client(), poll_seconds=0.05,
                         out=io.StringIO(), **kwargs)


def _finish(tmp_path) -> None:
    """What the chief leaves on shared storage when the job succeeds."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "result.json").write_text(json.dumps({"model_type": "basic"}))


def test_creates_a_valid_tfjob_and_returns_the_chiefs_result(tmp_path):
    _finish(tmp_path)
    states = [{"type": "Created"}, {"type": "Running"}, {"type": "Succeeded"}]
    with KubernetesStandIn(states) as standin:
        outcome = _launcher(standin).run(_spec(tmp_path))
    posts = [body for method, _, body in standin.calls if method == "POST"]
    assert len(posts) == 1
    validate_strict(posts[0], "tfjob.kubeflow.org_v1.yaml", "v1")
    assert posts[0]["metadata"]["name"] == "fmnist-basic-3f2a9c"
    assert outcome.result == {"model_type": "basic"}
    assert ("DELETE", f"{JOBS}/fmnist-basic-3f2a9c") not in standin.methods()


def test_the_chiefs_log_is_streamed_while_the_job_runs(tmp_path, capsys):
    _finish(tmp_path)
    states = [{"type": "Running"}] * 3 + [{"type": "Succeeded"}]
    with KubernetesStandIn(states) as standin:
        standin.pod_log = "epoch=1 epochs=2 loss=0.5 accuracy=0.8\nepoch=2 epochs=2 loss=0.3\n"
        _launcher(standin).run(_spec(tmp_path))
    printed = capsys.readouterr().out  # the SDK prints each line with its pod's name
    assert "[Pod fmnist-basic-3f2a9c-worker-0]: epoch=1 epochs=2" in printed
    assert any("/log" in path for _, path in standin.methods())


def test_a_retried_launcher_reattaches_instead_of_creating_a_second_job(tmp_path):
    _finish(tmp_path)
    with KubernetesStandIn([{"type": "Running"}, {"type": "Succeeded"}]) as standin:
        first = _launcher(standin)
        standin.jobs["fmnist-basic-3f2a9c"] = {"metadata": {"name": "fmnist-basic-3f2a9c"}}
        first.run(_spec(tmp_path))  # the job exists already: a retry of the launcher pod
    assert [m for m, _ in standin.methods() if m == "POST"] == []
    assert "re-attaching to the existing TFJob" in first.out.getvalue()


def test_a_failed_tfjob_fails_the_step_with_the_operators_reason(tmp_path):
    states = [{"type": "Running"},
              {"type": "Failed", "reason": "TFJobFailed",
               "message": "TFJob kubeflow/fmnist-basic-3f2a9c has failed because 1 Worker "
                          "replica(s) failed."}]
    with KubernetesStandIn(states) as standin, pytest.raises(TrainingJobError) as failure:
        _launcher(standin).run(_spec(tmp_path))
    assert "TFJobFailed" in str(failure.value) and "1 Worker replica(s) failed" in str(
        failure.value)


def test_the_step_deadline_deletes_the_job(tmp_path):
    with KubernetesStandIn([{"type": "Running"}]) as standin:
        with pytest.raises(TimeoutError):
            _launcher(standin, timeout_seconds=0.3).run(_spec(tmp_path))
    assert ("DELETE", f"{JOBS}/fmnist-basic-3f2a9c") in standin.methods()


def test_sigterm_deletes_the_job(tmp_path):
    """A terminated pipeline run sends SIGTERM to the launcher pod: the TFJob goes with it."""
    with KubernetesStandIn([{"type": "Running"}]) as standin:
        script = textwrap.dedent(f"""
            import io, sys
            sys.path.insert(0, {os.getcwd()!r})
            from tests.k8s_standin import KubernetesStandIn
            from tests.test_kubernetes_launcher import _launcher, _spec
            from pathlib import Path
            class Remote(KubernetesStandIn):
                def __init__(self): pass
                url = {standin.url!r}
            launcher = _launcher(Remote())
            launcher.out = sys.stdout
            launcher.run(_spec(Path({str(tmp_path)!r})))
        """)
        process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                   text=True)
        deadline = time.time() + 60
        while not any(m == "POST" for m, _ in standin.methods()) and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, output
    assert ("DELETE", f"{JOBS}/fmnist-basic-3f2a9c") in standin.methods()
    assert "deleted TFJob kubeflow/fmnist-basic-3f2a9c" in output


def test_gpus_with_zero_workers_fail_before_anything_is_created(tmp_path):
    from fmnist.errors import UserInputError

    spec = _spec(tmp_path)
    spec.num_workers = 0
    spec.gpus_per_worker = 1
    with KubernetesStandIn() as standin, pytest.raises(UserInputError):
        _launcher(standin).run(spec)
    assert standin.calls == []
