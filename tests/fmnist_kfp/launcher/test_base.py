"""What the two cluster launchers share (fmnist_kfp.launcher.base): the job checked once
against their operator, how they follow it (:class:`Watching`), and a run's end read as the
step's result or a ``TrainingJobError``. Here on a launcher of its own over a scripted job (a
:class:`RemoteJob` whose reads the test writes); the TFJob and TrainJob launchers against the
real operators: tests/fmnist_kfp/launcher/test_tfjob_launcher.py and
test_trainjob_launcher_on_the_cluster.py."""

from __future__ import annotations

import io
import json
import sys
from dataclasses import replace

import pytest

from fmnist_kfp.errors import TrainingJobError, UserInputError
from fmnist_kfp.kubernetes.runner import JobStatus, RemoteJob, RemoteJobError
from fmnist_kfp.kubernetes.training_operators import ClusterJob
from fmnist_kfp.launcher.base import ClusterLauncher, Watching
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.training_job import TrainingJobSpec

SETTINGS = KubernetesSettings(image="ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0", namespace="team-a",
                              pvc_name="fmnist-data")


class TFJobs(ClusterLauncher):
    OPERATOR = "tfjob"


class Clock:
    """The runner's clock and sleep: a sleep moves the clock on, nothing waits."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _spec(tmp_path, **overrides) -> TrainingJobSpec:
    values = dict(name="fmnist-basic-3f2a9c", config=TrainingConfig(model_type="basic"),
                  data_dir="/mnt/fmnist/dataset", export_dir=str(tmp_path / "model" / "1"),
                  work_dir=str(tmp_path / "model"), num_workers=2)
    values.update(overrides)
    return TrainingJobSpec(**values)


def _launcher(clock: Clock | None = None, out=None) -> TFJobs:
    clock = clock or Clock()
    return TFJobs(SETTINGS, Watching(poll_seconds=5, out=out or io.StringIO(), clock=clock,
                                     sleep=clock.sleep))


def _job(statuses: list[JobStatus], clock: Clock, cleaned: list[str]) -> RemoteJob:
    """A job already created whose reads answer ``statuses`` in turn, each 30 s after the
    last."""
    answers = iter(statuses)

    def read():
        clock.now += 30
        return next(answers)

    return RemoteJob("TFJob", "team-a", "fmnist-basic-3f2a9c", read=read,
                     status=lambda answer: answer, cleanup=cleaned.append)


def test_a_cluster_job_given_is_run_as_checked(tmp_path):
    job = ClusterJob(_spec(tmp_path), SETTINGS, "tfjob")
    assert _launcher().checked(job) is job


def test_a_spec_is_checked_against_the_launchers_operator_before_anything_is_created(tmp_path):
    checked = _launcher().checked(_spec(tmp_path))
    assert isinstance(checked, ClusterJob)
    assert (checked.operator, checked.settings) == ("tfjob", SETTINGS)
    # A TFJob's pods and Services are named <job>-<type>-<index>, DNS labels: a name the spec
    # takes (55 characters) whose fmnist-...-worker-1 would be 64 is refused.
    long_name = _spec(tmp_path, name="fmnist-" + "x" * 48)
    with pytest.raises(UserInputError, match="is too long: its pod and service"):
        _launcher().checked(long_name)


def test_the_launcher_runs_in_its_settings_namespace_and_prints_to_stdout_by_default():
    launcher = TFJobs(SETTINGS, Watching())
    assert launcher.namespace == "team-a"
    assert launcher.out is sys.stdout
    assert launcher.request_timeout_seconds == 60.0


def test_the_step_deadline_is_the_watchings_else_the_jobs_own_plus_ten_minutes():
    assert TFJobs(SETTINGS, Watching(timeout_seconds=90)).runner.timeout_seconds == 90
    timed = replace(SETTINGS, active_deadline_seconds=3600)
    assert TFJobs(timed, Watching()).runner.timeout_seconds == 3600 + 600
    assert TFJobs(SETTINGS, Watching()).runner.timeout_seconds == 0.0


def test_a_finished_job_gives_the_chiefs_result_its_time_and_its_restarts(tmp_path):
    spec = _spec(tmp_path)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "result.json").write_text(json.dumps({"test_accuracy": 0.91}))
    clock, out, cleaned = Clock(), io.StringIO(), []
    launcher = _launcher(clock, out)
    job = _job([JobStatus(progress="2/2 workers running"),
                JobStatus(done=True, progress="Succeeded")], clock, cleaned)
    result = launcher._run(job, spec, clock(), lambda: 1)
    assert result.result == {"test_accuracy": 0.91}
    assert result.restarts == 1
    assert result.wall_seconds == clock.now - 1000.0 and result.wall_seconds >= 60
    # The runner's progress lines go where the launcher prints.
    assert "TFJob team-a/fmnist-basic-3f2a9c: 2/2 workers running" in out.getvalue()
    assert cleaned == []


def test_a_failed_job_is_a_training_job_error_naming_why(tmp_path):
    clock, cleaned = Clock(), []
    launcher = _launcher(clock)
    job = _job([JobStatus(done=True, failed=True, reason="BackoffLimitExceeded: worker-1 "
                          "exited 137")], clock, cleaned)
    with pytest.raises(TrainingJobError, match="BackoffLimitExceeded") as raised:
        launcher._run(job, _spec(tmp_path), clock(), lambda: 0)
    assert isinstance(raised.value.__cause__, RemoteJobError)
