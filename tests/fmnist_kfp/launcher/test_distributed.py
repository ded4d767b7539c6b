"""Multi-worker training on loopback: MultiWorkerMirroredStrategy, failure and resume."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import sys
import threading
import time

import pytest

from fmnist_kfp.errors import TrainingJobError
from fmnist_kfp.launcher.local_processes import LocalProcessLauncher, tf_config_for
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.distributed import ClusterRole
from fmnist_kfp.training.training_job import TrainingJobSpec
from tests import fake_worker
from tests import launcher_harness as harness

# Every test here waits on processes: a regression that hangs fails in bounded time, 4x the
# slowest seen on a busy 2-core machine (60 s to start TensorFlow and fail); the slow
# training test has its own, larger bound.
pytestmark = pytest.mark.timeout(240)


def test_tf_config_matches_the_training_operators_shape():
    replicas = [("chief", 0), ("worker", 0), ("worker", 1)]
    config = tf_config_for(replicas, [1001, 1002, 1003], 2)
    assert config["cluster"] == {
        "chief": ["127.0.0.1:1001"],
        "worker": ["127.0.0.1:1002", "127.0.0.1:1003"],
    }
    assert config["task"] == {"type": "worker", "index": 1}


def test_cluster_role_picks_the_chief(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config_for([("worker", 0), ("worker", 1)],
                                                              [1, 2], 0)))
    assert ClusterRole.from_env().is_chief and ClusterRole.from_env().num_workers == 2
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config_for([("chief", 0), ("worker", 0)],
                                                              [1, 2], 1)))
    role = ClusterRole.from_env()
    assert not role.is_chief and role.num_workers == 2
    monkeypatch.delenv("TF_CONFIG")
    assert ClusterRole.from_env() == ClusterRole("worker", 0, 1)


def _spec(tmp_path, dataset, **overrides) -> TrainingJobSpec:
    values = dict(name="test-two-workers",
                  config=TrainingConfig(model_type="basic", epochs=6, batch_size=32),
                  num_workers=2)
    return harness.job_spec(tmp_path, dataset, **{**values, **overrides})


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_workers_train_one_model_and_resume_after_a_worker_is_killed(
    tmp_path, synthetic_dataset
):
    """Worker 1 is SIGKILLed after the first epoch checkpoint; the job restarts, both workers
    resume after the checkpointed epoch, and the run finishes with every epoch trained once."""
    log = io.StringIO()
    launcher = LocalProcessLauncher(out=log)
    spec = _spec(tmp_path, synthetic_dataset)
    outcome: dict = {}
    thread = threading.Thread(target=lambda: outcome.update(result=launcher.run(spec)))
    thread.start()
    checkpoint = tmp_path / "model" / "backup" / "chief" / "checkpoint"  # the chief's epoch
    deadline = time.time() + 240
    while not checkpoint.exists() and time.time() < deadline:
        time.sleep(0.1)
    assert checkpoint.exists(), "no epoch checkpoint appeared:\n" + log.getvalue()
    victim = launcher.workers[1]
    os.kill(victim.process.pid, signal.SIGKILL)
    thread.join(timeout=300)
    assert not thread.is_alive()
    output = log.getvalue()
    result = outcome["result"]
    assert result.restarts == 1, output
    assert "worker-1 failed with signal 9; restarting all workers" in output
    assert "resumed_from_epoch=" in output
    resumed_at = int(output.split("resumed_from_epoch=")[1].split()[0])
    assert 1 <= resumed_at < 6
    # No epoch before the checkpoint was trained twice: at most the epoch in flight is lost.
    after_restart = output.split("restart 1/2")[1]
    # Each epoch line: "[job/worker-0] <timestamp> epoch=N ...".
    assert len(re.findall(r"\[test-two-workers/worker-0\] \S+Z epoch=", after_restart)) == \
        6 - resumed_at
    assert result.result["replicas"] == 2
    assert result.result["global_batch_size"] == 64  # per-replica batch × replicas
    assert [e["epoch"] for e in result.result["history"]] == [1, 2, 3, 4, 5, 6]
    assert result.result["final_metrics"]["accuracy"] > 0.9
    assert (tmp_path / "model" / "1" / "saved_model.pb").exists()
    assert not [p for p in (tmp_path / "model" / "backup").rglob("*") if p.is_file()]
    assert "MultiWorkerMirroredStrategy over 2 workers" in output
    assert harness.no_processes_left(launcher)


def test_a_failing_worker_fails_the_job_with_its_error(tmp_path, synthetic_dataset):
    """A worker that exits with an error (here: a data directory without a dataset) is a
    permanent failure, as under the operator's ExitCode policy: no restart, the error shown."""
    (tmp_path / "empty").mkdir()
    launcher = LocalProcessLauncher(out=io.StringIO())
    spec = _spec(tmp_path, tmp_path / "empty", max_restarts=3)
    with pytest.raises(TrainingJobError) as failure:
        launcher.run(spec)
    message = str(failure.value)
    assert "failed with exit code 1 after 0 restart(s) (an exit code of 1-127 is not retried)" \
        in message
    assert "metadata.json is missing" in message
    assert harness.no_processes_left(launcher)


def test_a_job_killed_more_often_than_max_restarts_allows_fails_naming_them(
    tmp_path, monkeypatch
):
    """Each attempt's worker-1 is SIGKILLed (as a preempted pod is): two restarts are allowed,
    the third kill fails the job, and the error says how many restarts were spent and why
    there is no other. Stand-in workers: this is about the launcher, not TensorFlow."""
    monkeypatch.setattr(TrainingJobSpec, "trainer_command", fake_worker.command(str(tmp_path)))
    log = io.StringIO()
    launcher = LocalProcessLauncher(out=log)
    spec = _spec(tmp_path, tmp_path, max_restarts=2)
    killed: list[int] = []

    def kill_each_attempt() -> None:
        attempt = None
        deadline = time.monotonic() + 60
        while len(killed) < 3 and time.monotonic() < deadline:
            workers = launcher.workers
            if workers is not attempt and len(workers) == 2:  # a new attempt, fully started
                attempt = workers
                os.kill(workers[1].process.pid, signal.SIGKILL)
                killed.append(workers[1].process.pid)
            time.sleep(0.05)

    killer = threading.Thread(target=kill_each_attempt, daemon=True)
    killer.start()
    with pytest.raises(TrainingJobError) as failure:
        launcher.run(spec)
    killer.join(timeout=10)
    assert len(killed) == 3, log.getvalue()
    assert ("worker-1 failed with signal 9 after 2 restart(s) (max_restarts=2 allows no more)"
            in str(failure.value))
    output = log.getvalue()
    assert "(restart 1/2)" in output and "(restart 2/2)" in output
    assert "restart 3/2" not in output
    assert harness.no_processes_left(launcher)


def test_sigterm_stops_every_worker_before_the_launcher_exits(tmp_path):
    """KFP terminates a run by SIGTERM to the step: the launcher passes it on to each worker
    (each records it: not the parent-death SIGKILL), waits for them, and exits 143 with no
    process of its own left behind."""
    process, lines = harness.start("launcher", tmp_path)
    seen: list[str] = []
    try:
        pids = harness.worker_pids(lines, 2, seen)
        assert set(pids) == {"harness-job/worker-0", "harness-job/worker-1"}
        process.send_signal(signal.SIGTERM)
        output = harness.finish(process, lines, seen)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signal.SIGTERM, "\n".join(output)
    assert output[-1] == "left=[]", "\n".join(output)
    assert sorted(p.name for p in tmp_path.glob("sigterm-*")) == sorted(
        f"sigterm-{pid}" for pid in pids.values())
    assert all(harness.gone(pid) for pid in pids.values())


def _env_reporting_worker(self, python: str = sys.executable) -> list[str]:
    """A stand-in trainer that records the TF_CONFIG it was given and reports success."""
    script = ("import json, os, sys; work = sys.argv[1]; os.makedirs(work, exist_ok=True); "
              "open(os.path.join(work, 'tf_config-' + str(os.getpid())), 'w')"
              ".write(os.environ.get('TF_CONFIG', '<unset>')); "
              "open(os.path.join(work, 'result.json'), 'w').write('{}')")
    return [python, "-c", script, self.work_dir]


@pytest.mark.parametrize(("workers", "chief", "distributed"), [(1, False, False),
                                                               (2, False, True),
                                                               (1, True, True)])
def test_tf_config_only_for_a_distributed_job(workers, chief, distributed, tmp_path,
                                              monkeypatch):
    """As the training operator: TF_CONFIG only when the job has more than one replica
    (kubeflow/trainer v1.9.2 pkg/controller.v1/tensorflow/util.go isDistributed, lines 74-95,
    and tfjob_controller.go SetClusterSpec, lines 561-564)."""
    monkeypatch.setattr(TrainingJobSpec, "trainer_command", _env_reporting_worker)
    monkeypatch.setenv("TF_CONFIG", '{"inherited": true}')  # never passed on
    spec = TrainingJobSpec(name="env", config=TrainingConfig(), data_dir=str(tmp_path),
                           export_dir=str(tmp_path / "w" / "1"), work_dir=str(tmp_path / "w"),
                           num_workers=workers, use_chief=chief)
    LocalProcessLauncher(out=io.StringIO()).run(spec)
    seen = [path.read_text() for path in (tmp_path / "w").glob("tf_config-*")]
    assert len(seen) == workers + chief
    if distributed:
        configs = [json.loads(text) for text in seen]
        assert all(config["environment"] == "cloud" for config in configs)
        assert sorted(c["task"]["type"] for c in configs) == sorted(
            ["worker"] * workers + ["chief"] * chief)
    else:
        assert seen == ["<unset>"]
