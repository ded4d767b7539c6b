"""TFJobs in a Kueue queue (issue 23), through the real TrainingClient against the Kueue
stand-in (tests/standins/kueue.py: created suspended by Kueue's webhook, a Workload saying why
it waits, unsuspended on admission) beside the training operator's (suspended: no pods). The
launcher shows ``queued: <Kueue's reason>``, counts the wait against the start deadline, not
the run deadline, and runs the job to success once admitted. Time is fake."""

from __future__ import annotations

import io
import json
from datetime import datetime
from types import SimpleNamespace

import pytest

from fmnist_kfp.errors import TrainingJobError
from fmnist_kfp.kubernetes.runner import StartDeadlineExceeded
from fmnist_kfp.launcher.tfjob_launcher import RestartCount, TFJobLauncher
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.training_job import TrainingJobSpec
from tests.crd_schemas import validate_strict
from tests.standins.kubernetes import FakeTime
from tests.standins.kueue import KueueStandIn, workload_name

NAME = "fmnist-basic-3f2a9c"
QUEUES = {("kubeflow", "team-a"): "cluster-queue"}


def _spec(tmp_path) -> TrainingJobSpec:
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "result.json").write_text(json.dumps({"model_type": "basic"}))
    return TrainingJobSpec(name=NAME, config=TrainingConfig(model_type="basic"),
                           data_dir="/mnt/fmnist/dataset",
                           export_dir=str(tmp_path / "model" / "1"),
                           work_dir=str(tmp_path / "model"), num_workers=2)


def _launcher(standin, scheduling: dict, **kwargs) -> TFJobLauncher:
    settings = KubernetesSettings(image="ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0",
                                  namespace="kubeflow", pvc_name="fmnist-pvc",
                                  scheduling=scheduling)
    time = FakeTime()
    values = dict(training_client=standin.training_client(), poll_seconds=60,
                  out=io.StringIO(), request_timeout_seconds=2, clock=time, sleep=time.sleep)
    values.update(kwargs)
    return TFJobLauncher(settings, **values)


def _states(launcher) -> list[str]:
    return [line.split(": ", 1)[1] for line in launcher.out.getvalue().splitlines()
            if line.startswith(f"TFJob kubeflow/{NAME}: ")]


def test_a_queued_job_waits_as_queued_then_runs_to_success_once_admitted(tmp_path):
    with KueueStandIn(local_queues=QUEUES, admit_after_reads=15) as standin:
        launcher = _launcher(standin, {"queue": "team-a", "priority_class": "fmnist-high"},
                             timeout_seconds=600)
        outcome = launcher.run(_spec(tmp_path))
        workload = standin.workloads[("kubeflow", NAME)]
        job = standin.job(NAME)
    [posted] = standin.posts()
    validate_strict(posted, "tfjob.kubeflow.org_v1.yaml", "v1")
    assert posted["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert posted["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "fmnist-high"
    assert "suspend" not in posted["spec"]["runPolicy"]  # Kueue's webhook suspends it
    # The Workload Kueue made of it is one its CRD accepts: our pod templates are valid
    # PodSet templates (Kueue v0.19.2's Workload CRD, strict).
    validate_strict(workload, "kueue.x-k8s.io_workloads.yaml", "v1beta1")
    assert workload["metadata"]["name"] == workload_name(NAME, f"uid-{NAME}")
    assert [ps["name"] for ps in workload["spec"]["podSets"]] == ["worker"]
    states = _states(launcher)
    assert states[0] == ("queued: couldn't assign flavors to pod set worker: insufficient "
                         "unused quota for cpu in flavor default-flavor, 4 more needed")
    assert any(state.startswith("Running") for state in states[1:])
    assert outcome.result == {"model_type": "basic"}
    conditions = [(c["type"], c["status"], c["reason"]) for c in job["status"]["conditions"]]
    assert ("Suspended", "False", "TFJobResumed") in conditions
    # Queued for 15 polls of 60 fake seconds, then ran: past the 600 s run deadline, which
    # the queued time did not count against.
    assert launcher.runner.clock() > 900


def test_a_job_never_admitted_fails_at_its_start_deadline_and_is_deleted(tmp_path):
    with KueueStandIn(local_queues={}, admit_after_reads=None) as standin:
        launcher = _launcher(standin, {"queue": "team-a", "start_deadline_minutes": 10},
                             timeout_seconds=0)
        with pytest.raises(StartDeadlineExceeded) as failure:
            launcher.run(_spec(tmp_path))
        assert standin.job(NAME) is not None and ("kubeflow", NAME) not in standin.jobs
    message = str(failure.value)
    assert "still queued after 10 minute(s), past its start deadline of 10 minute(s)" in message
    assert "LocalQueue team-a doesn't exist" in message
    assert "start_deadline_minutes" in message
    assert _states(launcher) == ["queued: LocalQueue team-a doesn't exist"]


def test_without_permission_to_read_workloads_the_job_still_waits_queued(tmp_path):
    with KueueStandIn(local_queues=QUEUES, admit_after_reads=3) as standin:
        standin.inject("GET", "workloads", 403, 403, 403, 403, 403, 403)
        launcher = _launcher(standin, {"queue": "team-a"})
        outcome = launcher.run(_spec(tmp_path))
    states = _states(launcher)
    assert states[0].startswith("queued: waiting for Kueue to admit it to LocalQueue team-a; "
                                "its Workload could not be read (HTTP 403")
    assert outcome.result == {"model_type": "basic"}


def test_with_kueues_tfjob_integration_off_the_queue_is_ignored(tmp_path):
    """Kueue v0.19 ships kubeflow.org/tfjob commented out of integrations.frameworks: the job
    runs at once, never queued (what `fmnist-kfp preflight` warns of)."""
    with KueueStandIn(local_queues=QUEUES, tfjob_integration=False) as standin:
        launcher = _launcher(standin, {"queue": "team-a"})
        launcher.run(_spec(tmp_path))
    assert not any(state.startswith("queued") for state in _states(launcher))
    assert standin.workloads == {}


def _chief_and_workers(tmp_path, **overrides) -> TrainingJobSpec:
    spec = _spec(tmp_path)
    spec.use_chief = True
    for key, value in overrides.items():
        setattr(spec, key, value)
    return spec


def _uids_by_progress_line(launcher, standin) -> list[set[str]]:
    """The UIDs of the job's pods at each progress line the launcher prints."""
    seen: list[set[str]] = []
    original = launcher.runner.log

    def log(message: str) -> None:
        seen.append({pod.uid for pod in standin.pods("kubeflow")})
        original(message)

    launcher.runner.log = log
    return seen


@pytest.mark.parametrize("evictions", [
    [("Preempted", 6)],
    [("Preempted", 6), ("PodsReadyTimeout", 2)],
], ids=["preempted-once", "preempted-then-pods-ready-timeout"])
def test_an_evicted_job_is_requeued_and_its_recreated_pods_are_no_restarts(tmp_path,
                                                                            evictions):
    """Issue 29 item 5. Kueue evicts an admitted job (preemption; waitForPodsReady's timeout,
    on by default since v0.19) by suspending the TFJob; the training operator deletes every
    pod, and on re-admission creates all three replicas anew under new UIDs (kubeflow/trainer
    v1.9.2 pkg/controller.v1/common/job.go lines 43-69, 146-173). With max_restarts=2 the
    launcher used to count those 3 new UIDs as 3 restarts and fail the job after one
    preemption; a new admission is a new generation of replicas, not a restart."""
    with KueueStandIn(local_queues=QUEUES, admit_after_reads=3, evictions=evictions,
                      running_ticks=12) as standin:
        launcher = _launcher(standin, {"queue": "team-a", "priority_class": "fmnist-high"},
                             timeout_seconds=3600)
        uids = _uids_by_progress_line(launcher, standin)
        outcome = launcher.run(_chief_and_workers(tmp_path, max_restarts=2))
        workload = standin.workloads[("kubeflow", NAME)]
        job = standin.job(NAME)
        final = {pod.uid for pod in standin.pods("kubeflow")}
    assert [reason for _, _, reason in standin.evicted] == [r for r, _ in evictions]
    assert outcome.result == {"model_type": "basic"}
    assert outcome.restarts == 0
    states = _states(launcher)
    evicted_at = next(i for i, s in enumerate(states)
                      if s.startswith("queued: Preempted to accommodate a workload"))
    assert any(s.startswith("Running") for s in states[:evicted_at])  # it had run
    assert not any("restart" in s for s in states)
    # Every pod of the last admission is new: none of the 3 that ran before the preemption.
    before = set().union(*uids[:evicted_at + 1])
    assert len(before) == 3 and len(final) == 3 and not before & final
    # What Kueue and the operator left (CRDs strict): Evicted and Preempted reset on the
    # re-admission, the TFJob resumed.
    validate_strict(workload, "kueue.x-k8s.io_workloads.yaml", "v1beta1")
    kinds = {c["type"]: (c["status"], c["reason"]) for c in workload["status"]["conditions"]}
    assert kinds["Evicted"] == ("False", "QuotaReserved")
    assert kinds["Preempted"] == ("False", "QuotaReserved")
    assert kinds["Admitted"] == ("True", "Admitted")
    conditions = [(c["type"], c["status"], c["reason"]) for c in job["status"]["conditions"]]
    assert ("Suspended", "False", "TFJobResumed") in conditions


def test_a_real_restart_still_counts_across_a_preemption(tmp_path):
    """A worker killed (exit 137, retried under ExitCode) before the preemption and again
    after the re-admission: 2 restarts, past max_restarts=1, though the preemption itself
    recreated every pod and counts for nothing."""
    scripts = {"worker-1": [(137, 2), (137, 6)]}  # the 2nd incarnation is cut by the eviction
    with KueueStandIn(local_queues=QUEUES, admit_after_reads=3, evictions=[("Preempted", 8)],
                      scripts=scripts, running_ticks=12) as standin:
        launcher = _launcher(standin, {"queue": "team-a"}, timeout_seconds=3600)
        with pytest.raises(TrainingJobError, match="2 restarts, more than max_restarts=1"):
            launcher.run(_chief_and_workers(tmp_path, max_restarts=1))
    assert [reason for _, _, reason in standin.evicted] == ["Preempted"]
    states = _states(launcher)
    first_restart = next(i for i, s in enumerate(states) if "1 restart(s)" in s)
    evicted_at = next(i for i, s in enumerate(states) if s.startswith("queued: Preempted"))
    second_restart = next(i for i, s in enumerate(states) if "2 restart(s)" in s)
    assert first_restart < evicted_at < second_restart


def test_a_real_restart_before_a_preemption_is_counted_once(tmp_path):
    """The same restart, then a preemption, within max_restarts=1: the job succeeds with 1."""
    scripts = {"worker-1": [(137, 2)]}
    with KueueStandIn(local_queues=QUEUES, admit_after_reads=3, evictions=[("Preempted", 8)],
                      scripts=scripts, running_ticks=12) as standin:
        launcher = _launcher(standin, {"queue": "team-a"}, timeout_seconds=3600)
        outcome = launcher.run(_chief_and_workers(tmp_path, max_restarts=1))
    assert [reason for _, _, reason in standin.evicted] == ["Preempted"]
    assert outcome.restarts == 1


def _condition(type_: str, status: str, at: str, reason: str = ""):
    return SimpleNamespace(type=type_, status=status, reason=reason,
                           last_transition_time=datetime.fromisoformat(at),
                           last_update_time=None)


def _pod(uid: str, rtype: str, index: int, created: str | None, restarts: int = 0):
    return SimpleNamespace(
        metadata=SimpleNamespace(
            uid=uid, labels={"training.kubeflow.org/replica-type": rtype,
                             "training.kubeflow.org/replica-index": str(index)},
            creation_timestamp=datetime.fromisoformat(created) if created else None),
        status=SimpleNamespace(container_statuses=[SimpleNamespace(restart_count=restarts)]))


def test_pods_are_counted_in_the_generation_they_were_created_in():
    """RestartCount's cases the stand-ins do not reach: a poll that lists a terminating pod of
    the previous admission beside the job's resume, one that missed a whole suspend/resume
    cycle, and a read of the job made before the operator recorded the resume."""
    created = _condition("Created", "True", "2025-01-01T00:00:00Z")
    resumed_1 = _condition("Suspended", "False", "2025-01-01T00:00:10Z", "TFJobResumed")
    suspended = _condition("Suspended", "True", "2025-01-01T00:05:00Z", "TFJobSuspended")
    resumed_2 = _condition("Suspended", "False", "2025-01-01T00:07:00Z", "TFJobResumed")
    resumed_3 = _condition("Suspended", "False", "2025-01-01T00:20:00Z", "TFJobResumed")
    first = [_pod("a0", "worker", 0, "2025-01-01T00:00:11Z"),
             _pod("a1", "worker", 1, "2025-01-01T00:00:11Z")]
    second = [_pod("b0", "worker", 0, "2025-01-01T00:07:01Z"),
              _pod("b1", "worker", 1, "2025-01-01T00:07:01Z")]
    count = RestartCount()
    assert count.update([created, resumed_1], first) == 0
    # Read before the operator recorded the resume (Suspended still True), new pods listed.
    assert count.update([created, suspended], second) == 0
    # The resume recorded; a terminating pod of the first admission still listed.
    assert count.update([created, resumed_2], [first[0], *second]) == 0
    # A whole cycle missed between two polls: the third admission's pods only.
    third = [_pod("c0", "worker", 0, "2025-01-01T00:20:00Z"),
             _pod("c1", "worker", 1, "2025-01-01T00:20:01Z")]
    assert count.update([created, resumed_3], third) == 0
    # Within an admission a new UID is a restart, and so is a container restart.
    assert count.update([created, resumed_3],
                        [_pod("c0b", "worker", 0, "2025-01-01T00:21:00Z"), third[1]]) == 1
    assert count.update([created, resumed_3],
                        [_pod("c0b", "worker", 0, "2025-01-01T00:21:00Z", restarts=1),
                         third[1]]) == 2


def test_without_creation_timestamps_pods_go_in_the_latest_generation():
    count = RestartCount()
    resumed = _condition("Suspended", "False", "2025-01-01T00:07:00Z", "TFJobResumed")
    assert count.update([], [_pod("a0", "worker", 0, None)]) == 0
    assert count.update([resumed], [_pod("b0", "worker", 0, None)]) == 0
    assert count.update([resumed], [_pod("b0x", "worker", 0, None)]) == 1
