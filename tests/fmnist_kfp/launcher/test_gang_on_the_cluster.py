"""Gang-scheduled TFJobs (``kubernetes.scheduling.gang``) on the real Training Operator v1.9.2
(tests/cluster.py), started with ``--gang-scheduler-name`` as preflight's fix says and as the
operator's CI does: the operator makes one PodGroup of all the replicas and hands every pod to
the gang scheduler.

No gang scheduler runs here (Volcano and scheduler-plugins are not among the programs
localcluster builds), so the test plays its one part: it admits the PodGroup (Volcano's
``Inqueue``) and binds the pods to the node, as the scheduler would once the whole gang fits.
Everything else, the PodGroup, when the pods are made, the launcher's states and deadlines,
is the operator's and the launcher's own."""

from __future__ import annotations

import io
import threading
import time

import pytest

from tests.cluster import SCRIPTED_IMAGE, leave_scripted_result, until

NAME = "fmnist-basic-gang"
WAIT_SECONDS = 120
OPERATOR = ("kubeflow", "training-operator")  # namespace, Deployment (its standalone overlay)
# The scheduler name the operator gives the pods, and the PodGroup API it creates, per
# --gang-scheduler-name (kubeflow/training-operator v1.9.2 cmd/training-operator.v1/main.go
# lines 191-202; pkg/controller.v1/control/podgroup_control.go).
SCHEDULERS = {"volcano": ("volcano", "scheduling.volcano.sh/v1beta1"),
              "scheduler-plugins": ("scheduler-plugins-scheduler", "scheduling.x-k8s.io/v1alpha1")}


def _operator_running(cluster, command: list[str]) -> None:
    """Runs the training operator's Deployment with ``command`` and waits until its one pod is
    the new one, ready, and its webhooks answer: never two operators reconciling at once."""
    from kubernetes import client

    from localcluster.operators import (
        TRAINING_OPERATOR_V1,
        WEBHOOK_KINDS,
        render,
        wait_webhooks_serving,
    )

    namespace, name = OPERATOR
    client.AppsV1Api(cluster.api_client).patch_namespaced_deployment(name, namespace, [
        {"op": "replace", "path": "/spec/template/spec/containers/0/command",
         "value": command}])
    until(lambda: cluster.rolled_out(namespace, name),
          f"the training operator running {command}", WAIT_SECONDS)
    wait_webhooks_serving(cluster.api_client, [o["metadata"]["name"] for o in render(
        TRAINING_OPERATOR_V1) if o["kind"] in WEBHOOK_KINDS])


@pytest.fixture(scope="module")
def operator(real_cluster):
    """Runs the cluster's training operator with the command it is handed (``use``), and
    with its own again, as kubeflow/manifests installs it, once the module is done. Each
    restart waits for the old pod's leader lease: going from one scheduler's flag straight
    to the other's saves one."""
    from kubernetes import client

    real_cluster.require_node()
    real_cluster.install("TRAINING_OPERATOR_V1")
    namespace, name = OPERATOR
    deployment = client.AppsV1Api(real_cluster.api_client).read_namespaced_deployment(
        name, namespace)
    plain = deployment.spec.template.spec.containers[0].command
    assert not any("gang" in word for word in plain)  # as kubeflow/manifests installs it
    running = [plain]

    def use(flag: str) -> None:
        command = [plain[0], f"--gang-scheduler-name={flag}", *plain[1:]]
        if running[0] != command:
            _operator_running(real_cluster, command)
            running[0] = command

    yield use
    if running[0] != plain:
        _operator_running(real_cluster, plain)


@pytest.fixture(scope="module", params=list(SCHEDULERS))
def gang(request, real_cluster, operator):
    """The cluster's training operator started with ``--gang-scheduler-name`` for the
    scheduler ``request.param`` (added as preflight's fix says:
    fmnist_kfp/preflight/scheduling.py ``_gang_flag_fix``)."""
    scheduler = request.param
    operator("volcano" if scheduler == "volcano" else "scheduler-plugins")
    return real_cluster, scheduler


@pytest.fixture
def namespace(gang):
    cluster, _ = gang
    name = cluster.step_namespace("gang")
    yield name
    cluster.delete_namespace(name)


def _launcher(cluster, namespace: str, scheduling: dict, **kwargs):
    from kubeflow.training import TrainingClient

    from fmnist_kfp.launcher.tfjob_launcher import TFJobLauncher
    from fmnist_kfp.settings.jobs import KubernetesSettings

    settings = KubernetesSettings(image=SCRIPTED_IMAGE, namespace=namespace,
                                  pvc_name="fmnist-data", cpu="100m", memory="256Mi",
                                  scheduling=scheduling)
    values = dict(training_client=TrainingClient(
        client_configuration=cluster.configuration_as(namespace, "pipeline-runner"),
        namespace=namespace, job_kind="TFJob"), poll_seconds=0.5, timeout_seconds=300,
        out=io.StringIO(), request_timeout_seconds=10)
    values.update(kwargs)
    return TFJobLauncher(settings, **values)


def _spec(tmp_path):
    from fmnist_kfp.settings.training import TrainingConfig
    from fmnist_kfp.training.training_job import TrainingJobSpec

    leave_scripted_result(tmp_path / "model")
    return TrainingJobSpec(name=NAME, config=TrainingConfig(model_type="basic"),
                           data_dir="/mnt/fmnist/dataset",
                           export_dir=str(tmp_path / "model" / "1"),
                           work_dir=str(tmp_path / "model"), num_workers=2)


def _pod_group(cluster, namespace: str, scheduler: str) -> dict | None:
    api = SCHEDULERS[scheduler][1]
    return cluster.read_or_none(f"/apis/{api}/namespaces/{namespace}/podgroups/{NAME}")


def _pods(cluster, namespace: str) -> list:
    from kubernetes import client

    return client.CoreV1Api(cluster.api_client).list_namespaced_pod(
        namespace, label_selector=f"training.kubeflow.org/job-name={NAME}").items


def _bind(cluster, namespace: str, pod: str) -> None:
    """What a scheduler does with a pod it places: the pod's ``binding`` subresource."""
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client)
    node = core.list_node().items[0].metadata.name
    core.create_namespaced_binding(namespace, {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}},
        _preload_content=False)  # the client cannot read the Status it answers as a Binding


def test_a_gang_job_gets_one_pod_group_holding_every_replica(gang, namespace, tmp_path):
    """One PodGroup named after the job, of minMember 2 (every replica), owned by the TFJob;
    each pod in it and sent to the gang scheduler, not the default one (so nothing runs until
    the gang scheduler places it); under Volcano no pod exists before the PodGroup is
    Inqueue (job.go lines 300-335, DelayPodCreationDueToPodGroup)."""
    cluster, scheduler = gang
    scheduler_name, api = SCHEDULERS[scheduler]
    cluster.script_pods(namespace, {"*": {"seconds": 1}})
    launcher = _launcher(cluster, namespace, {"gang": scheduler})
    outcome: list = []
    thread = threading.Thread(target=lambda: outcome.append(_run(launcher, tmp_path)),
                              daemon=True)
    thread.start()
    group = until(lambda: _pod_group(cluster, namespace, scheduler), "a PodGroup made",
                  WAIT_SECONDS)
    assert group["apiVersion"] == api
    assert group["spec"]["minMember"] == 2
    [owner] = group["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("TFJob", NAME, True)
    if scheduler == "volcano":
        assert group["spec"]["queue"] == "default"
        time.sleep(3)  # the operator reconciles meanwhile: still no pod
        assert _pods(cluster, namespace) == []
        cluster.api_client.call_api(  # the Volcano scheduler's admission of the gang
            f"/apis/{api}/namespaces/{namespace}/podgroups/{NAME}", "PATCH",
            body={"status": {"phase": "Inqueue"}}, auth_settings=["BearerToken"],
            header_params={"Content-Type": "application/merge-patch+json"})
    pods = until(lambda: (found := _pods(cluster, namespace)) and len(found) == 2 and found,
                 "both workers' pods made", WAIT_SECONDS)
    for pod in pods:
        assert pod.spec.scheduler_name == scheduler_name
        if scheduler == "volcano":
            assert pod.metadata.annotations["scheduling.k8s.io/group-name"] == NAME
        else:
            assert pod.metadata.labels["scheduling.x-k8s.io/pod-group"] == NAME
        assert pod.spec.node_name is None  # the default scheduler left it to the gang's
    for pod in pods:
        _bind(cluster, namespace, pod.metadata.name)
    thread.join(WAIT_SECONDS)
    assert outcome and outcome[0] == {"model_type": "basic"}, (
        outcome, launcher.out.getvalue()[-3000:])


def _run(launcher, tmp_path):
    try:
        return launcher.run(_spec(tmp_path)).result
    except Exception as error:  # shown by the test's assertion
        return error


@pytest.mark.parametrize("gang", ["volcano"], indirect=True)
def test_a_pending_volcano_gang_counts_against_the_run_deadline_not_the_start_deadline(
        gang, namespace, tmp_path):
    """Issue 29 item 9: what start_deadline_minutes counts, as its help says. Only Kueue's
    suspension is a queue to the launcher; a TFJob whose Volcano PodGroup stays Pending (the
    operator makes no pod meanwhile) is running as far as it can tell, so a 1-minute start
    deadline never fires and the 10-minute run deadline does. Time is the launcher's fake
    clock (tests/standins/kubernetes.py FakeTime), advanced only once the PodGroup exists."""
    from fmnist_kfp.kubernetes.runner import DeadlineExceeded, StartDeadlineExceeded
    from fmnist_kfp.settings.scheduling import SchedulingSettings
    from tests.standins.kubernetes import FakeTime

    cluster, scheduler = gang
    clock = FakeTime()

    def sleep(seconds: float) -> None:
        until(lambda: _pod_group(cluster, namespace, scheduler), "a PodGroup made",
              WAIT_SECONDS)
        time.sleep(0.05)  # the operator's reconciles go on in real time
        clock.sleep(seconds)

    launcher = _launcher(cluster, namespace, {"gang": "volcano", "start_deadline_minutes": 1},
                         timeout_seconds=600, poll_seconds=5, clock=clock, sleep=sleep)
    with pytest.raises(DeadlineExceeded) as failure:
        launcher.run(_spec(tmp_path))
    assert not isinstance(failure.value, StartDeadlineExceeded)
    assert "did not finish within the step's 600 s" in str(failure.value)
    assert _pods(cluster, namespace) == []  # the gang was never placed
    assert cluster.read_or_none(
        f"/apis/kubeflow.org/v1/namespaces/{namespace}/tfjobs/{NAME}") is None  # deleted
    states = [line for line in launcher.out.getvalue().splitlines() if f"/{NAME}: " in line]
    assert not any(": queued" in line for line in states), states
    [setting] = SchedulingSettings.__dataclass_fields__["start_deadline_minutes"] \
        .metadata.values()
    assert "Only Kueue's suspension counts" in setting.help and "Volcano" in setting.help
