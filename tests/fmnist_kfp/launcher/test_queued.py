"""TFJobs in a Kueue queue (issue 23), through the real TrainingClient against the Kueue
stand-in (tests/standins/kueue.py: created suspended by Kueue's webhook, a Workload saying why
it waits, unsuspended on admission) beside the training operator's (suspended: no pods). The
launcher shows ``queued: <Kueue's reason>``, counts the wait against the start deadline, not
the run deadline, and runs the job to success once admitted. Time is fake."""

from __future__ import annotations

import io
import json

import pytest

from fmnist_kfp.kubernetes.runner import StartDeadlineExceeded
from fmnist_kfp.launcher.tfjob_launcher import TFJobLauncher
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


@pytest.mark.parametrize("scheduler", ["volcano", "scheduler-plugins"])
def test_a_gang_job_gets_one_pod_group_holding_every_replica(tmp_path, scheduler):
    """With the training operator started with --gang-scheduler-name (kubeflow/trainer v1.9.2
    cmd/training-operator.v1/main.go lines 191-202), a gang TFJob gets one PodGroup of all its
    replicas, and every pod is in it and goes to the gang scheduler; under Volcano no pod
    exists before the PodGroup is Inqueue."""
    from tests.standins.kubernetes import KubernetesStandIn

    seen_pods: list[int] = []
    with KubernetesStandIn(gang_scheduler=scheduler, gang_placed_after_ticks=3) as standin:
        launcher = _launcher(standin, {"gang": scheduler})
        original = launcher.runner.log

        def log(message: str) -> None:  # pods that exist at each progress line
            seen_pods.append(len(list(standin.pods("kubeflow"))))
            original(message)

        launcher.runner.log = log
        outcome = launcher.run(_spec(tmp_path))
        controller = standin.jobs[("kubeflow", NAME)]
        group = controller.pod_group
        pods = [pod.manifest() for pod in controller.pods.values()]
    assert outcome.result == {"model_type": "basic"}
    name = {"volcano": "volcano", "scheduler-plugins": "scheduler-plugins-scheduler"}[scheduler]
    if scheduler == "volcano":
        validate_strict({k: v for k, v in group.items() if k != "status"},
                        "scheduling.volcano.sh_podgroups.yaml", "v1beta1")
        assert group["spec"] == {"minMember": 2, "queue": "default", "priorityClassName": ""}
        assert seen_pods[1] == 0  # created, then waiting for the gang: no pod yet
    else:
        validate_strict(group, "scheduling.x-k8s.io_podgroups.yaml", "v1alpha1")
        assert group["spec"] == {"minMember": 2}
    assert group["metadata"]["name"] == NAME
    assert len(pods) == 2  # the succeeded workers, kept by cleanPodPolicy Running
    for pod in pods:
        assert pod["spec"]["schedulerName"] == name
        if scheduler == "volcano":
            assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == NAME
        else:
            assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == NAME
