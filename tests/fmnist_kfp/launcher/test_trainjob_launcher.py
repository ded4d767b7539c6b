"""The TrainJob launcher through the kubernetes client against the Trainer v2 stand-in
(tests/standins/trainer_v2.py: Trainer's webhook and controller, JobSet's restarts and
conditions, Indexed Jobs, scripted pods). Time is fake: every wait is bounded by a deadline in
fake seconds."""

from __future__ import annotations

import io
import json
import signal
import subprocess

import pytest

from fmnist_kfp.errors import TrainingJobError, UserInputError
from fmnist_kfp.kubernetes.trainjob import OVERRIDES, PATCHES
from fmnist_kfp.launcher.trainjob_launcher import TrainJobLauncher
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.training_job import TrainingJobSpec
from tests.crd_schemas import validate_strict
from tests.launcher_harness import drain, read_until, spawn_script
from tests.standins.kubernetes import FakeTime
from tests.standins.trainer_v2 import CRDS, TrainerStandIn

NAME = "fmnist-basic-3f2a9c"
JOBS = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/kubeflow/trainjobs"
DEADLINE = 600.0  # fake seconds


def _spec(tmp_path, **overrides) -> TrainingJobSpec:
    values = dict(name=NAME, config=TrainingConfig(model_type="basic"),
                  data_dir="/mnt/fmnist/dataset", export_dir=str(tmp_path / "model" / "1"),
                  work_dir=str(tmp_path / "model"), num_workers=2)
    values.update(overrides)
    return TrainingJobSpec(**values)


def _launcher(standin, shape: str = OVERRIDES, scheduling: dict | None = None,
              **kwargs) -> TrainJobLauncher:
    settings = KubernetesSettings(image="ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0",
                                  namespace="kubeflow", pvc_name="fmnist-pvc",
                                  scheduling=scheduling or {})
    time = FakeTime()
    values = dict(api_client=standin.api_client(), shape=shape, poll_seconds=5,
                  timeout_seconds=DEADLINE, out=io.StringIO(), request_timeout_seconds=2,
                  clock=time, sleep=time.sleep)
    values.update(kwargs)
    return TrainJobLauncher(settings, **values)


def _finish(tmp_path) -> None:
    """What node 0 leaves on shared storage when the job succeeds."""
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "result.json").write_text(json.dumps({"model_type": "basic"}))


def _conditions(standin) -> list[tuple[str, str, str]]:
    job = standin.trainjob(NAME)
    return [(c["type"], c["status"], c["reason"]) for c in job["status"]["conditions"]]


@pytest.mark.parametrize(("version", "shape"), [("v2.1.0", OVERRIDES), ("v2.2.0", PATCHES)])
def test_creates_a_valid_trainjob_and_returns_node_0s_result(tmp_path, version, shape):
    _finish(tmp_path)
    with TrainerStandIn(trainer_version=version,
                        logs={"node-0": "epoch 1\nepoch 2\n"}) as standin:
        launcher = _launcher(standin, shape)
        outcome = launcher.run(_spec(tmp_path))
        final = _conditions(standin)
        [controller] = standin.trainjobs.values()
        pods = list(controller.pods_created)
    [posted] = standin.posts()
    validate_strict(posted, CRDS[version], "v1alpha1")
    assert outcome.result == {"model_type": "basic"} and outcome.restarts == 0
    assert final == [("Complete", "True", "AllJobsCompleted")]
    assert ("DELETE", f"{JOBS}/{NAME}") not in standin.methods()  # a finished job is kept
    out = launcher.out.getvalue()
    assert out.splitlines()[0] == (f"created TrainJob kubeflow/{NAME} (2 node(s) on runtime "
                                   "fmnist-tensorflow, at most 2 restarts)")
    assert out.count(f"[{pods[0].name}] epoch 2") == 1  # node 0's log, once
    assert "node-0-1" not in out.replace(f"{NAME}-node-0-1", "")  # not node 1's
    # The pods as JobSet and the Job controller make them, with the runtime's env resolved.
    assert sorted(p.hostname for p in pods) == [f"{NAME}-node-0-0", f"{NAME}-node-0-1"]
    assert {p.subdomain for p in pods} == {NAME}
    assert [p.env["JOB_COMPLETION_INDEX"] for p in pods] == ["0", "1"]
    assert {(p.env["FMNIST_JOBSET_NAME"], p.env["FMNIST_REPLICATED_JOB"],
             p.env["FMNIST_JOB_INDEX"], p.env["FMNIST_NUM_NODES"]) for p in pods} == {
        (NAME, "node", "0", "2")}


def test_a_node_killed_restarts_the_jobset_within_max_restarts(tmp_path):
    """Exit 137 (a signal): the Job fails (backoffLimit 0), JobSet recreates every Job under
    the next restart attempt; within max_restarts the job goes on and succeeds."""
    _finish(tmp_path)
    with TrainerStandIn(scripts={"node-1": [137, 0]}) as standin:
        launcher = _launcher(standin)
        outcome = launcher.run(_spec(tmp_path, max_restarts=1))
        [controller] = standin.trainjobs.values()
        attempts = sorted({p.labels["jobset.sigs.k8s.io/restart-attempt"]
                           for p in controller.pods_created})
    assert outcome.restarts == 1 and attempts == ["0", "1"]
    assert "1 restart(s)" in launcher.out.getvalue()


def test_more_restarts_than_max_restarts_fail_and_delete_the_job(tmp_path):
    """The runtime allows 5 JobSet restarts; the job's budget is 1: the launcher stops it."""
    with TrainerStandIn(scripts={"node-0": [137, 137, 137]}) as standin:
        launcher = _launcher(standin)
        with pytest.raises(TrainingJobError, match="2 restarts of its JobSet, more than "
                                                   "max_restarts=1"):
            launcher.run(_spec(tmp_path, max_restarts=1))
    assert ("DELETE", f"{JOBS}/{NAME}") in standin.methods()
    assert standin.trainjobs == {}
    assert f"deleting the failed TrainJob kubeflow/{NAME}" in launcher.out.getvalue()


def test_a_bug_fails_the_job_at_once_with_jobsets_reason(tmp_path):
    """Exit 1: the runtime's podFailurePolicy fails the Job, its FailJobSet rule the JobSet;
    Trainer copies JobSet's Failed condition."""
    with TrainerStandIn(scripts={"node-1": [1]}) as standin:
        launcher = _launcher(standin)
        with pytest.raises(TrainingJobError, match="FailJobSetFailurePolicyAction: applying "
                                                   "FailJobSet failure policy action"):
            launcher.run(_spec(tmp_path))
        final = standin.deleted_trainjobs[("kubeflow", NAME)]
    assert [c["type"] for c in final["status"]["conditions"]] == ["Failed"]
    assert ("DELETE", f"{JOBS}/{NAME}") in standin.methods()


def test_suspension_is_queued_time_and_no_restart(tmp_path):
    """Kueue holds the TrainJob suspended (queued, with its Workload's reason), admits it,
    suspends it again (preemption: every pod deleted) and resumes it: new pods under the same
    restart attempt, not a restart."""
    _finish(tmp_path)
    with TrainerStandIn(kueue=True, trainer_version="v2.2.0", admit_after_ticks=2,
                        running_ticks=6) as standin:
        launcher = _launcher(standin, PATCHES, scheduling={"queue": "team-a"})
        reads = {"n": 0}
        original = launcher.runner.sleep

        def sleep(seconds):  # Kueue preempts once the job runs, then re-admits it
            reads["n"] += 1
            controller = standin.trainjobs.get(("kubeflow", NAME))
            if controller and reads["n"] == 5:
                standin.suspend(NAME)
            if controller and reads["n"] == 8:
                standin.suspend(NAME, value=False)
            original(seconds)

        launcher.runner.sleep = sleep
        outcome = launcher.run(_spec(tmp_path))
        [controller] = standin.trainjobs.values()
        created = controller.pods_created
    out = launcher.out.getvalue()
    assert "queued: couldn't assign flavors to pod set node" in out
    assert outcome.restarts == 0
    assert len(created) == 4  # two generations of two nodes
    assert {p.labels["jobset.sigs.k8s.io/restart-attempt"] for p in created} == {"0"}


def test_a_retried_launcher_reattaches_instead_of_creating_a_second_job(tmp_path):
    _finish(tmp_path)
    with TrainerStandIn() as standin:
        from fmnist_kfp.kubernetes.trainjob import build_trainjob

        first = _launcher(standin)
        standin.add_trainjob(build_trainjob(_spec(tmp_path), first.settings))
        launcher = _launcher(standin)
        outcome = launcher.run(_spec(tmp_path))
    assert "re-attaching to the existing TrainJob" in launcher.out.getvalue()
    assert outcome.result == {"model_type": "basic"}
    assert len(standin.trainjobs) == 1


def test_a_missing_runtime_is_refused_by_trainers_webhook(tmp_path):
    with TrainerStandIn(runtimes={}) as standin:
        with pytest.raises(TrainingJobError, match="specified clusterTrainingRuntime must be "
                                                   "created before the TrainJob is created"):
            _launcher(standin).run(_spec(tmp_path))
    assert standin.trainjobs == {}


def test_what_a_trainjob_cannot_do_fails_before_anything_is_created(tmp_path):
    with TrainerStandIn() as standin, pytest.raises(UserInputError, match="evaluator"):
        _launcher(standin).run(_spec(tmp_path, evaluator=True))
    assert standin.calls == []


def test_the_steps_deadline_is_the_jobs_plus_ten_minutes():
    def launcher(deadline: int, **kwargs) -> TrainJobLauncher:
        settings = KubernetesSettings(image="img:1", namespace="kubeflow",
                                      active_deadline_seconds=deadline)
        return TrainJobLauncher(settings, api_client=object(), **kwargs)

    assert launcher(100).runner.timeout_seconds == 700
    assert launcher(0).runner.timeout_seconds == 0
    assert launcher(100, timeout_seconds=5).runner.timeout_seconds == 5


# ---------------------------------------------------------------------------------------------
# SIGTERM: a terminated pipeline run sends it to the launcher pod; the TrainJob goes with it.

_CHILD = """
import sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from tests.standins.trainer_v2 import TrainerStandIn
from tests.fmnist_kfp.launcher.test_trainjob_launcher import _launcher, _spec

class Remote(TrainerStandIn):
    def __init__(self):
        pass
    url = {url!r}

launcher = _launcher(Remote(), out=sys.stdout, clock=None, sleep=None, poll_seconds=0.05,
                     timeout_seconds=120)
print("launching", flush=True)
launcher.run(_spec(Path({tmp!r})))
"""


@pytest.mark.process
def test_sigterm_while_waiting_deletes_the_trainjob(tmp_path):
    seen: list[str] = []
    with TrainerStandIn(running_ticks=100_000) as standin:
        process, lines = spawn_script(_CHILD, url=standin.url, tmp=str(tmp_path))
        try:
            assert read_until(lines, "Running (2/2 nodes)", seen), "\n".join(seen)
            process.send_signal(signal.SIGTERM)
            drain(process, lines, seen)
        finally:
            process.kill()
    output = "\n".join(seen)
    assert process.returncode == 128 + signal.SIGTERM, output
    assert ("DELETE", f"{JOBS}/{NAME}") in standin.methods()
    assert f"deleted TrainJob kubeflow/{NAME}" in output
    assert isinstance(process, subprocess.Popen)
