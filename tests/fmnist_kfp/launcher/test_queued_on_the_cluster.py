"""Kueue v0.19.2 for real (issue 41): the kueue-controller-manager built from its Go module,
installed from its own manifests (config/default: webhooks, internal cert rotation, the
visibility API through the aggregator) with its default configuration, beside Trainer v2.2.0,
JobSet v0.11.0 and the Training Operator v1.9.2 on the Trainer 2.2 cluster (tests/cluster.py).
The cluster admin's part is ``manifests/scheduling`` (ClusterQueue, flavor, LocalQueue, the
priorities), its CPU quota cut to one job's pods (:data:`SHARE`) so that a second job waits on
this one node, and the tfjob integration turned on as docs/scheduling.md tells the admin to.

The launchers run as the train step runs them, as the ``pipeline-runner`` ServiceAccount bound
to manifests/standalone-rbac's Role; the pods are the image ``scripted-pod``
(tests/scripted_pod.py), which sleeps as a test says. What Kueue does is Kueue's own: the
webhook that creates a job suspended, the Workload and its conditions, admission, preemption by
priority (Evicted, Preempted, Requeued), re-admission; the operators then delete and recreate
the pods."""

from __future__ import annotations

import io
import threading
import time

import pytest
import yaml

from fmnist_kfp.errors import FmnistError
from fmnist_kfp.kubernetes.runner import StartDeadlineExceeded
from fmnist_kfp.kubernetes.trainjob import PATCHES
from fmnist_kfp.kubernetes.workload import read_workload
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.training_job import TrainingJobSpec
from tests.cluster import SCRIPTED_IMAGE, leave_scripted_result, until
from tests.setup_manifests import build

QUEUE = "fmnist"  # manifests/scheduling's LocalQueue
# The ClusterQueue's CPU quota here: one job's pods (2 × POD_CPU) at a time. The node has the
# machine's CPUs less what Kueue and JobSet request (500m each); a job's pods fit beside them.
POD_CPU = "250m"
SHARE = "500m"
KUEUE = "kueue-system"
KUEUE_CONFIG = "kueue-manager-config"
KUEUE_DEPLOYMENT = "kueue-controller-manager"
KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"
STEP_SECONDS = 180
PATHS = {"tfjob": "/apis/kubeflow.org/v1/namespaces/{namespace}/tfjobs/{name}",
         "trainjob": "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}"}
KINDS = {"tfjob": "TFJob", "trainjob": "TrainJob"}


@pytest.fixture(scope="module")
def cluster(real_cluster_trainer_2_2):
    """The Trainer 2.2 cluster with the Training Operator, Kueue (its default configuration),
    our runtime, and manifests/scheduling's cluster-scoped objects, the quota cut to
    :data:`SHARE`."""
    cluster = real_cluster_trainer_2_2
    cluster.install("TRAINING_OPERATOR_V1")
    cluster.install("KUEUE_V0_19")
    cluster.apply_training_runtime()
    for obj in build("scheduling"):
        if obj["kind"] == "ClusterQueue":
            for flavor in obj["spec"]["resourceGroups"][0]["flavors"]:
                for resource in flavor["resources"]:
                    if resource["name"] == "cpu":
                        resource["nominalQuota"] = SHARE
        if obj["kind"] != "LocalQueue":  # namespaced: each test's own (:func:`_namespace`)
            cluster.apply(obj)
    return cluster


@pytest.fixture(scope="module")
def kueue_with_tfjobs(cluster):
    """Kueue with kubeflow.org/tfjob enabled (:func:`_enable_tfjob_integration`)."""
    if "kubeflow.org/tfjob" not in _frameworks(cluster):
        _enable_tfjob_integration(cluster)
    return cluster


def _namespace(cluster, role_edit=None) -> str:
    """A namespace of the train step's: the ServiceAccount and its Role (``role_edit``ed),
    the claim, and the LocalQueue (applied with -n, as manifests/scheduling says), once Kueue
    has marked it active."""
    import uuid

    name = f"queued-{uuid.uuid4().hex[:6]}"
    cluster.grant_pipeline_runner(name, role_edit)
    cluster.add_claim(name)
    cluster.apply(_local_queue(), namespace=name)
    _until_local_queue_active(cluster, name, "True")
    return name


@pytest.fixture
def namespace(kueue_with_tfjobs):
    """A test's own namespace (:func:`_namespace`), made once the ClusterQueue's whole quota
    is free. The tests here share one ClusterQueue sized for one job, and the test before
    ends as its step sees its job done, a moment before Kueue marks the Workload Finished: a
    first job created in that moment is found inadmissible, and Kueue may leave it so after
    the quota frees (in CI of 69af1d7 it stayed queued 60 s; kubernetes-sigs/kueue#8653:
    a finishing Workload does not always requeue the inadmissible ones)."""
    _until_the_quota_is_free(kueue_with_tfjobs)
    name = _namespace(kueue_with_tfjobs)
    yield name
    kueue_with_tfjobs.delete_namespace(name)


def _quota_holders(cluster) -> list[str]:
    """The Workloads that reserve quota in any namespace (QuotaReserved and not Finished),
    each with its conditions and whether it is being deleted: what a job waits behind."""
    workloads = cluster.read_or_none(f"{KUEUE_API}/workloads")["items"]
    held = []
    for workload in workloads:
        conditions = _conditions(workload)
        if conditions.get("QuotaReserved", ("",))[0] == "True" and \
                conditions.get("Finished", ("",))[0] != "True":
            metadata = workload["metadata"]
            deleting = " (being deleted)" if metadata.get("deletionTimestamp") else ""
            held.append(f"{metadata['namespace']}/{metadata['name']}{deleting}: {conditions}")
    return held


def _with_quota_holders(cluster, step: Step) -> str:
    """What ``step`` printed, then the Workloads holding quota: why its job may still wait."""
    return f"{step.printed()}\nquota held by: {_quota_holders(cluster)}"


def _until_the_quota_is_free(cluster) -> None:
    """Until the LocalQueue's ClusterQueue reserves quota for no Workload, showing what holds
    it. Kueue counts them in status.reservingWorkloads (kubernetes-sigs/kueue v0.19.2
    apis/kueue/v1beta2/clusterqueue_types.go lines 384-387), written a second or so after
    the Workloads it counts finish."""
    path = f"{KUEUE_API}/clusterqueues/{_local_queue()['spec']['clusterQueue']}"
    until(lambda: ((cluster.read_or_none(path) or {}).get("status") or {}).get(
        "reservingWorkloads", 0) == 0, "the ClusterQueue's whole quota free", 120,
          shown=lambda: _quota_holders(cluster))


def _frameworks(cluster) -> list[str]:
    config_map = cluster.read_or_none(f"/api/v1/namespaces/{KUEUE}/configmaps/{KUEUE_CONFIG}")
    config = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    return config["integrations"]["frameworks"]


def _enable_tfjob_integration(cluster) -> None:
    """What docs/scheduling.md (and preflight's fix) tell the admin: add kubeflow.org/tfjob to
    integrations.frameworks in ConfigMap kueue-manager-config, then ``kubectl rollout restart
    deployment/kueue-controller-manager`` (a new template annotation: the Deployment
    controller starts a new pod, which takes the lease once the old one has stopped), until
    the new pod serves Kueue's webhooks."""
    from datetime import datetime, timezone

    from localcluster import operators

    path = f"/api/v1/namespaces/{KUEUE}/configmaps/{KUEUE_CONFIG}"
    config_map = cluster.read_or_none(path)
    config = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    config["integrations"]["frameworks"].append("kubeflow.org/tfjob")
    config_map["data"]["controller_manager_config.yaml"] = yaml.safe_dump(config)
    cluster.api_client.call_api(path, "PUT", body=config_map, auth_settings=["BearerToken"])
    deployment = f"/apis/apps/v1/namespaces/{KUEUE}/deployments/{KUEUE_DEPLOYMENT}"
    restarted = {"spec": {"template": {"metadata": {"annotations": {
        "kubectl.kubernetes.io/restartedAt": datetime.now(timezone.utc).isoformat()}}}}}
    cluster.api_client.call_api(
        deployment, "PATCH", body=restarted, auth_settings=["BearerToken"],
        header_params={"Content-Type": "application/strategic-merge-patch+json"})
    until(lambda: cluster.rolled_out(KUEUE, KUEUE_DEPLOYMENT),
          "kueue-controller-manager rolled out", 120,
          shown=lambda: cluster.read_or_none(deployment).get("status"))
    operators.wait_webhooks_serving(cluster.api_client, [
        "kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration"])


def _spec(name: str, tmp_path, **values) -> TrainingJobSpec:
    """Two workers (or nodes) that train nothing: the result a chief leaves is written here,
    where the launcher reads it."""
    work_dir = tmp_path / name
    leave_scripted_result(work_dir)
    return TrainingJobSpec(name=name, config=TrainingConfig(model_type="basic"),
                           data_dir="/mnt/fmnist/dataset", export_dir=str(work_dir / "1"),
                           work_dir=str(work_dir), num_workers=2, **values)


def _launcher(cluster, kind: str, namespace: str, scheduling: dict, **kwargs):
    """The train step's launcher of ``kind``, as the step's ServiceAccount."""
    settings = KubernetesSettings(image=SCRIPTED_IMAGE, namespace=namespace,
                                  pvc_name="fmnist-data", cpu=POD_CPU, memory="256Mi",
                                  operator=kind, scheduling=scheduling)
    configuration = cluster.configuration_as(namespace, "pipeline-runner")
    values = dict(poll_seconds=0.5, timeout_seconds=STEP_SECONDS, out=io.StringIO(),
                  request_timeout_seconds=10)
    values.update(kwargs)
    if kind == "tfjob":
        from kubeflow.training import TrainingClient

        from fmnist_kfp.launcher.tfjob_launcher import TFJobLauncher

        client = TrainingClient(client_configuration=configuration, namespace=namespace,
                                job_kind="TFJob")
        return TFJobLauncher(settings, training_client=client, **values)
    from kubernetes.client import ApiClient

    from fmnist_kfp.launcher.trainjob_launcher import TrainJobLauncher

    return TrainJobLauncher(settings, api_client=ApiClient(configuration), shape=PATCHES,
                            **values)


class Step(threading.Thread):
    """A launcher's run in a thread of its own, as a step runs beside another: its outcome or
    its error, and the states it printed."""

    def __init__(self, launcher, spec: TrainingJobSpec, kind: str):
        super().__init__(daemon=True)
        self.launcher, self.spec, self.kind = launcher, spec, kind
        self.outcome = self.error = None
        self.started = self.ended = 0.0

    def run(self) -> None:
        self.started = time.monotonic()
        try:
            self.outcome = self.launcher.run(self.spec)
        except BaseException as error:  # shown by finish()
            self.error = error
        self.ended = time.monotonic()

    def finish(self):
        self.join(STEP_SECONDS + 30)
        assert not self.is_alive(), self.printed()
        assert self.error is None, f"{self.error!r}\n{self.printed()}"
        return self.outcome

    def printed(self) -> str:
        return self.launcher.out.getvalue()

    def states(self) -> list[str]:
        prefix = f"{KINDS[self.kind]} {self.launcher.namespace}/{self.spec.name}: "
        return [line.removeprefix(prefix) for line in self.printed().splitlines()
                if line.startswith(prefix)]


def _pods(cluster, namespace: str) -> list:
    from kubernetes import client

    return client.CoreV1Api(cluster.api_client).list_namespaced_pod(namespace).items


def _running(cluster, namespace: str, job: str) -> bool:
    pods = [p for p in _pods(cluster, namespace) if p.metadata.name.startswith(job)]
    return len(pods) == 2 and all(p.status.phase == "Running" for p in pods)


def _workload(cluster, kind: str, namespace: str, name: str) -> dict | None:
    """The Workload Kueue made of job ``name``, as the launcher finds it
    (:func:`fmnist_kfp.kubernetes.workload.read_workload`, by its job-uid label); None when
    there is none (or no job)."""
    from kubernetes import client

    job = cluster.read_or_none(PATHS[kind].format(namespace=namespace, name=name))
    if job is None:
        return None
    found = read_workload(client.CustomObjectsApi(cluster.api_client), namespace,
                          job["metadata"]["uid"])
    return found if isinstance(found, dict) else None


def _conditions(workload: dict | None) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"])
            for c in ((workload or {}).get("status") or {}).get("conditions") or []}


def _preflight(cluster, namespace: str, operator: str, priority_class: str = "",
               api_client=None) -> dict:
    """`fmnist-kfp preflight --scheduling '{"queue": "fmnist"}'` (and ``priority_class``) as
    the cluster admin who set Kueue up runs it (the steps' Role may not read LocalQueues), or
    with ``api_client``'s identity: its Kueue and PriorityClass rows by name."""
    from fmnist_kfp.preflight import Cluster, preflight
    from fmnist_kfp.settings.scheduling import SchedulingSettings

    target = Cluster(namespace=namespace, runner_service_account="pipeline-runner",
                     pvc="fmnist-data", credentials_secret="", serving_namespace=namespace,
                     serving_service_account="default", multi_user=False,
                     scheduling=SchedulingSettings(queue=QUEUE, priority_class=priority_class),
                     operator=operator)
    return {row.check: row for row in preflight(None, api_client or cluster.api_client, target,
                                                 check_backend=False)
            if row.check.startswith(("Kueue", "PriorityClass"))}


def test_preflight_finds_tfjobs_unqueued_until_the_admin_enables_them(cluster, tmp_path):
    """Kueue v0.19 ships kubeflow.org/tfjob off (config/components/manager/
    controller_manager_config.yaml line 55, kubernetes-sigs/kueue#12606): preflight says so
    of the run's TFJob and gives the fix, and a queued TFJob runs at once, its queue ignored.
    TrainJobs are queued out of the box. After the fix it gives, both are green."""
    assert "kubeflow.org/tfjob" not in _frameworks(cluster)  # the default, first
    namespace = _namespace(cluster)
    try:
        tfjob_rows = _preflight(cluster, namespace, "tfjob")
        assert tfjob_rows["Kueue"].ok and tfjob_rows[f"Kueue LocalQueue {namespace}/{QUEUE}"].ok
        unmanaged = tfjob_rows["Kueue manages TFJobs"]
        assert unmanaged.ok is False, unmanaged
        assert "not suspended on create" in unmanaged.found
        assert "kubectl rollout restart deployment/kueue-controller-manager" in unmanaged.fix
        trainjob_rows = _preflight(cluster, namespace, "trainjob")
        assert trainjob_rows["Kueue manages TrainJobs"].ok, trainjob_rows

        cluster.script_pods(namespace, {"*": {"seconds": 1}})
        step = Step(_launcher(cluster, "tfjob", namespace, {"queue": QUEUE}),
                    _spec("fmnist-unqueued", tmp_path), "tfjob")
        step.start()
        assert step.finish().result == {"model_type": "basic"}
        assert not any(s.startswith("queued") for s in step.states()), step.states()
        assert _workload(cluster, "tfjob", namespace, "fmnist-unqueued") is None

        _enable_tfjob_integration(cluster)
        managed = _preflight(cluster, namespace, "tfjob")["Kueue manages TFJobs"]
        assert managed.ok, managed
        assert "is created suspended (server-side dry run)" in managed.found
    finally:
        cluster.delete_namespace(namespace)


def test_a_pod_dry_run_passes_through_kueues_pod_webhook(cluster):
    """What tests/cluster.py's new namespaces wait on (_wait_until_admission_sees): a dry-run
    pod create calls Kueue's pod webhook, which reads the namespace from its cache before
    anything else (kubernetes-sigs/kueue v0.19.2 pkg/controller/jobs/pod/pod_webhook.go lines
    113-118): a pod with a queue comes back marked managed by Kueue (lines 162-168), and the
    dry run stores no pod."""
    import uuid

    from kubernetes import client

    name = f"dry-run-{uuid.uuid4().hex[:6]}"
    cluster.ensure_namespace(name)
    try:
        core = client.CoreV1Api(cluster.api_client)
        pod = core.create_namespaced_pod(name, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "queued", "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
            "spec": {"containers": [{"name": "main", "image": SCRIPTED_IMAGE}]}},
            dry_run="All")
        assert pod.metadata.labels.get("kueue.x-k8s.io/managed") == "true", pod.metadata
        assert not core.list_namespaced_pod(name).items
    finally:
        cluster.delete_namespace(name)


def _tfjobs(cluster, namespace: str) -> list[dict]:
    return cluster.read_or_none(PATHS["tfjob"].format(namespace=namespace, name=""))["items"]


def test_a_namespace_set_up_for_kueue_passes_preflight_by_a_dry_run_that_stores_nothing(
        kueue_with_tfjobs, namespace):
    """manifests/scheduling applied (the LocalQueue with -n): every Kueue and priority row is
    green, Kueue's own webhook suspending the dry run of the run's TFJob, and the dry run
    leaves no TFJob behind."""
    rows = _preflight(kueue_with_tfjobs, namespace, "tfjob", priority_class="fmnist-high")
    assert sorted(rows) == sorted([
        "Kueue", f"Kueue LocalQueue {namespace}/{QUEUE}", "Kueue manages TFJobs",
        "PriorityClass fmnist-high", "Kueue WorkloadPriorityClass fmnist-high"])
    assert [row for row in rows.values() if not row.ok] == []
    assert "served at v1beta2" in rows["Kueue"].found
    assert "ClusterQueue fmnist, active" in rows[f"Kueue LocalQueue {namespace}/{QUEUE}"].found
    assert "value 1000, preemptionPolicy Never" in rows["PriorityClass fmnist-high"].found
    assert "is created suspended (server-side dry run)" in rows["Kueue manages TFJobs"].found
    assert _tfjobs(kueue_with_tfjobs, namespace) == []


def _local_queue(cluster_queue: str = "") -> dict:
    """manifests/scheduling's LocalQueue (naming ``cluster_queue`` where given)."""
    [local_queue] = [o for o in build("scheduling") if o["kind"] == "LocalQueue"]
    if cluster_queue:
        local_queue["spec"]["clusterQueue"] = cluster_queue
    return local_queue


def _local_queue_path(namespace: str) -> str:
    return f"{KUEUE_API}/namespaces/{namespace}/localqueues/{QUEUE}"


def _delete(cluster, path: str) -> None:
    cluster.api_client.call_api(path, "DELETE", auth_settings=["BearerToken"])
    assert cluster.gone(path), path


def _take_away_local_queue(cluster, namespace: str) -> None:
    _delete(cluster, _local_queue_path(namespace))


def _point_local_queue_at_a_missing_cluster_queue(cluster, namespace: str) -> None:
    """The LocalQueue made again naming ClusterQueue ``fmnist-gone`` (its clusterQueue cannot
    change in place: Kueue's webhook keeps it immutable), once Kueue marks it inactive."""
    _take_away_local_queue(cluster, namespace)
    cluster.apply(_local_queue("fmnist-gone"), namespace=namespace)
    _until_local_queue_active(cluster, namespace, "False")


def _until_local_queue_active(cluster, namespace: str, status: str) -> None:
    """Until Kueue has written the LocalQueue's Active condition ``status`` (it does so
    moments after the LocalQueue is made: what preflight reads until then is "no status
    yet")."""
    path = _local_queue_path(namespace)
    until(lambda: [c for c in ((cluster.read_or_none(path) or {}).get("status") or {}).get(
        "conditions", []) if c["type"] == "Active" and c["status"] == status],
          f"Kueue writing the LocalQueue's Active condition {status}", 60,
          shown=lambda: cluster.read_or_none(path))


def _take_away_workload_priority_class(cluster, namespace: str) -> None:
    _delete(cluster, f"{KUEUE_API}/workloadpriorityclasses/fmnist-high")


KUEUE_PIECES = {
    "local-queue": (f"Kueue LocalQueue {{namespace}}/{QUEUE}",
                    "kubectl apply -k manifests/scheduling -n {namespace}",
                    "missing: the run's jobs would wait suspended", _take_away_local_queue),
    "cluster-queue": (f"Kueue LocalQueue {{namespace}}/{QUEUE}",
                      "create or reactivate ClusterQueue fmnist-gone",
                      "inactive (ClusterQueueDoesNotExist: ",
                      _point_local_queue_at_a_missing_cluster_queue),
    "workload-priority-class": ("Kueue WorkloadPriorityClass fmnist-high",
                                "kubectl apply -k manifests/scheduling",
                                "missing: Kueue makes no Workload for a job naming it",
                                _take_away_workload_priority_class),
}


@pytest.mark.parametrize("piece", list(KUEUE_PIECES))
def test_each_missing_kueue_piece_is_the_one_row_missing_with_its_fix(kueue_with_tfjobs,
                                                                      namespace, piece):
    """Each piece of manifests/scheduling taken away on the real Kueue: the one row missing,
    saying what Kueue then does, and its fix. (Kueue not installed, and an older Kueue
    serving v1beta1 alone: tests/fmnist_kfp/preflight/test_scheduling.py, on the API server.)"""
    cluster = kueue_with_tfjobs
    check, fix, found, take_away = KUEUE_PIECES[piece]
    take_away(cluster, namespace)
    try:
        rows = _preflight(cluster, namespace, "tfjob", priority_class="fmnist-high")
    finally:
        for obj in build("scheduling"):  # what the module's other tests queue with
            if obj["kind"] == "WorkloadPriorityClass":
                cluster.apply(obj)
    missing = [row for row in rows.values() if row.ok is False]
    assert [row.check for row in missing] == [check.format(namespace=namespace)], rows
    assert missing[0].found.startswith(found), missing[0]
    assert fix.format(namespace=namespace) in missing[0].fix, missing[0]


def _scale(cluster, replicas: int) -> None:
    deployment = f"/apis/apps/v1/namespaces/{KUEUE}/deployments/{KUEUE_DEPLOYMENT}"
    cluster.api_client.call_api(
        deployment, "PATCH", body={"spec": {"replicas": replicas}},
        auth_settings=["BearerToken"],
        header_params={"Content-Type": "application/merge-patch+json"})


def test_what_preflight_cannot_check_of_kueue_is_a_note_not_a_miss(kueue_with_tfjobs,
                                                                   namespace):
    """The dry run refused: by the real authorizer (the steps' ServiceAccount, its Role let
    read the LocalQueue and not create TFJobs: HTTP 403), and by the API server while Kueue's
    webhook is down (its mutating webhook's failurePolicy is Fail: kueue v0.19.2
    config/components/webhook/manifests.yaml; HTTP 500). Either is a note with what to check,
    never a miss."""
    from kubernetes import client

    from localcluster import operators
    from tests.fmnist_kfp.preflight.cluster import rules_without

    cluster = kueue_with_tfjobs

    def reads_local_queues_creates_no_tfjobs(role: dict) -> dict:
        role["rules"] = rules_without(role["rules"], "create", "kubeflow.org", "tfjobs") + [
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": ["get"]}]
        return role

    cluster.grant_pipeline_runner(namespace, reads_local_queues_creates_no_tfjobs)
    cluster.wait_until_granted(namespace, "pipeline-runner", "get", "kueue.x-k8s.io",
                               "localqueues")
    as_runner = client.ApiClient(cluster.configuration_as(namespace, "pipeline-runner"))
    rows = _preflight(cluster, namespace, "tfjob", api_client=as_runner)
    assert rows[f"Kueue LocalQueue {namespace}/{QUEUE}"].ok, rows
    refused = rows["Kueue manages TFJobs"]
    assert refused.ok is None, refused
    assert refused.found.startswith(
        f"could not check: the server-side dry run of the run's TFJob (labelled "
        f"kueue.x-k8s.io/queue-name={QUEUE}) in {namespace} was refused (HTTP 403"), refused

    _scale(cluster, 0)
    try:
        until(lambda: not _pods(cluster, KUEUE), "kueue-controller-manager stopped", 60)
        down = _preflight(cluster, namespace, "tfjob")["Kueue manages TFJobs"]
    finally:
        _scale(cluster, 1)
        until(lambda: cluster.rolled_out(KUEUE, KUEUE_DEPLOYMENT),
              "kueue-controller-manager back", 120)
        operators.wait_webhooks_serving(cluster.api_client, [
            "kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration"])
    assert down.ok is None, down
    assert "was refused (HTTP 500" in down.found, down
    assert "check kueue-controller-manager in kueue-system" in down.fix, down
    assert _tfjobs(cluster, namespace) == []


def _quota_message(pod_set: str) -> str:
    """Kueue's QuotaReserved message for a job that waits for the whole quota here."""
    return (f"couldn't assign flavors to pod set {pod_set}: insufficient unused quota for cpu "
            f"in flavor fmnist-default, {SHARE} more needed")


def _hold_the_quota(cluster, kind: str, namespace: str, tmp_path) -> Step:
    """A job ``holder`` whose pods hold the ClusterQueue's whole quota until :func:`_release`
    (tests/scripted_pod.py ``until``): what waits behind it is seen waiting whatever the
    machine's load."""
    cluster.script_pods(namespace, {f"holder-{n}": {"until": "release", "seconds": 0} for n in (
        "worker-0", "worker-1", "node-0-0", "node-0-1")} | {"*": {"seconds": 2}})
    holder = Step(_launcher(cluster, kind, namespace, {"queue": QUEUE}),
                  _spec("holder", tmp_path), kind)
    holder.start()
    until(lambda: _running(cluster, namespace, "holder"), "the holder's pods running", 60,
          shown=lambda: _with_quota_holders(cluster, holder))
    return holder


def _release(cluster, namespace: str) -> None:
    (cluster.claim_dir(namespace, "fmnist-data") / "release").touch()


# The waiter's run deadline where it is checked, and how long it is kept queued before that:
# longer than the deadline, which the queued time must not count against.
RUN_DEADLINE_SECONDS = 30


@pytest.mark.parametrize("first, second", [("trainjob", "tfjob"), ("tfjob", "trainjob")])
def test_a_job_past_the_quota_waits_queued_then_runs_once_admitted(kueue_with_tfjobs,
                                                                   namespace, tmp_path,
                                                                   first, second):
    """The first job holds the ClusterQueue's whole quota; the second is created suspended by
    Kueue's webhook and waits, its step quoting the Workload's QuotaReserved message, until
    the first finishes and Kueue admits it. Its wait counts against no run deadline: the
    TFJob's step allows 30 s of running, and is kept queued longer than that first."""
    cluster = kueue_with_tfjobs
    holder = _hold_the_quota(cluster, first, namespace, tmp_path)
    deadline = RUN_DEADLINE_SECONDS if second == "tfjob" else STEP_SECONDS
    waiter = Step(_launcher(cluster, second, namespace, {"queue": QUEUE},
                            timeout_seconds=deadline), _spec("waiter", tmp_path), second)
    waiter.start()
    pod_set = {"tfjob": "worker", "trainjob": "node"}[second]
    queued = f"queued: {_quota_message(pod_set)}"
    try:
        until(lambda: queued in waiter.states(), "the waiter queued in Kueue's words", 60,
              shown=waiter.states)
        if deadline < STEP_SECONDS:
            until(lambda: time.monotonic() - waiter.started > deadline + 2,
                  "the waiter queued past its run deadline", deadline + 30)
    finally:
        _release(cluster, namespace)
    assert holder.finish().restarts == 0
    outcome = waiter.finish()
    assert outcome.result == {"model_type": "basic"} and outcome.restarts == 0
    states = waiter.states()
    assert states[0].startswith("queued: "), states
    # Once resumed the operator's Suspended condition turns False: shown as its reason, never
    # as "Suspended" (it may still be True at a read just after Kueue unsuspended the job).
    assert not any(s.startswith("Suspended") and "resumed" in s for s in states), states
    assert any(s.startswith("Running") for s in states[states.index(queued):]), states
    admitted = _conditions(_workload(cluster, second, namespace, "waiter"))
    assert admitted["Admitted"] == ("True", "Admitted"), admitted


@pytest.mark.parametrize("low, high", [("tfjob", "trainjob"), ("trainjob", "tfjob")])
def test_a_job_preempted_by_a_higher_priority_resumes_with_no_restart_counted(
        kueue_with_tfjobs, namespace, tmp_path, low, high):
    """A fmnist-low job runs; a fmnist-high one comes. Kueue preempts the low one within the
    ClusterQueue (withinClusterQueue: LowerPriority): its Workload Evicted and Preempted, the
    job suspended, every pod deleted by its operator; the high one runs; the low one is
    requeued, admitted again, and its operator makes all its pods anew. With max_restarts=1
    those new pods are no restarts: the step succeeds with 0 (kubeflow/trainer v1.9.2
    pkg/controller.v1/common/job.go lines 43-69 and 146-173; JobSet's suspension, Trainer
    v2.2.0 pkg/runtime/framework/plugins/jobset)."""
    cluster = kueue_with_tfjobs
    # The low job's first start outlasts the test; after its re-admission it finishes.
    cluster.script_pods(namespace, {f"low-{n}": {"seconds": [300, 2]} for n in (
        "worker-0", "worker-1", "node-0-0", "node-0-1")} | {"*": {"seconds": 2}})
    lower = Step(_launcher(cluster, low, namespace,
                           {"queue": QUEUE, "priority_class": "fmnist-low"}),
                 _spec("low", tmp_path, max_restarts=1), low)
    lower.start()
    until(lambda: _running(cluster, namespace, "low"), "the low job's pods running", 60,
          shown=lambda: _with_quota_holders(cluster, lower))
    first_pods = {p.metadata.uid for p in _pods(cluster, namespace)}
    higher = Step(_launcher(cluster, high, namespace,
                            {"queue": QUEUE, "priority_class": "fmnist-high"}),
                  _spec("high", tmp_path), high)
    higher.start()
    preempted = until(
        lambda: (c := _conditions(_workload(cluster, low, namespace, "low"))).get(
            "Preempted", ("", ""))[0] == "True" and c, "the low job preempted", 60,
        shown=lambda: lower.printed())
    assert preempted["Evicted"] == ("True", "Preempted"), preempted
    assert preempted["Preempted"] == ("True", "InClusterQueue"), preempted
    assert higher.finish().restarts == 0, higher.printed()
    outcome = lower.finish()
    assert outcome.result == {"model_type": "basic"}
    assert outcome.restarts == 0, lower.states()
    # (Whether a poll fell in the preempted seconds, to show it queued again, is the
    # machine's timing: the Workload's conditions above are what says it was preempted.)
    states = lower.states()
    assert not any("restart" in s for s in states), lower.printed()
    # What finished the job ran again after the re-admission, in new pods: its hosts started
    # twice (tests/scripted_pod.py counts starts on the claim), and no pod left is one that
    # ran before. A TFJob succeeds when worker 0 does, and the Training Operator then deletes
    # a worker still running (cleanPodPolicy Running), which may not have started again; a
    # TrainJob's JobSet needs both nodes.
    starts = cluster.claim_dir(namespace, "fmnist-data") / "starts"
    hosts = {"tfjob": ("low-worker-0",), "trainjob": ("low-node-0-0", "low-node-0-1")}[low]
    assert [len((starts / host).read_text().splitlines()) for host in hosts] == [2] * len(
        hosts), lower.printed()
    last_pods = {p.metadata.uid for p in _pods(cluster, namespace)
                 if p.metadata.name.startswith("low")}
    assert last_pods and not last_pods & first_pods, lower.printed()
    final = _conditions(_workload(cluster, low, namespace, "low"))
    assert final["Admitted"] == ("True", "Admitted") and final["Evicted"][0] == "False", final


@pytest.mark.slow  # scores for real
def test_a_batch_prediction_job_waits_queued_then_scores_once_admitted(
        kueue_with_tfjobs, namespace, exported_model, synthetic_dataset, tmp_path):
    """The batch-prediction step's Indexed Job in the queue (Kueue's batch/job integration, on
    by default): created suspended by Kueue's webhook behind a TFJob that holds the quota,
    shown queued in Kueue's words, then admitted and scored by its two pods."""
    from kubernetes import client

    from fmnist_kfp.batch.indexed_job_scorer import IndexedJobScorer
    from fmnist_kfp.kfp_components.batch_predict.step import batch_predict_step
    from fmnist_kfp.kubernetes.runner import RemoteJobRunner

    cluster = kueue_with_tfjobs
    holder = _hold_the_quota(cluster, "tfjob", namespace, tmp_path)
    lines: list[str] = []
    queued = f"queued: {_quota_message('main')}"
    settings = KubernetesSettings(
        image="registry.example.com/fmnist-kfp:0.1.0", namespace=namespace,
        pvc_name="fmnist-data", mount_path=str(cluster.claim_dir(namespace, "fmnist-data")),
        cpu=POD_CPU, memory="2Gi", scheduling={"queue": QUEUE})
    as_runner = client.ApiClient(cluster.configuration_as(namespace, "pipeline-runner"))
    scorer = IndexedJobScorer(settings, batch_api=client.BatchV1Api(as_runner),
                              runner=RemoteJobRunner(poll_seconds=0.5, timeout_seconds=300,
                                                     log=lines.append))
    seen: list[bool] = []

    def release_once_queued() -> None:
        try:
            seen.append(bool(until(lambda: any(line.endswith(queued) for line in lines),
                                   "the Job queued in Kueue's words", 180)))
        finally:
            _release(cluster, namespace)

    releaser = threading.Thread(target=release_once_queued, daemon=True)
    releaser.start()
    try:
        metadata = batch_predict_step(
            model_dir=str(exported_model), data_dir=str(synthetic_dataset),
            output_dir=str(tmp_path / "predictions"), workers=2, backend="kubernetes",
            scorer=scorer).artifact_metadata()
    finally:
        _release(cluster, namespace)
        releaser.join(5)
    holder.finish()
    assert seen == [True], lines  # seen queued before the quota was released
    assert metadata["rows"] == 500 and metadata["errors"] == 0, lines


def _without_workloads(role: dict) -> dict:
    role["rules"] = [r for r in role["rules"] if "workloads" not in r.get("resources", [])]
    return role


@pytest.mark.parametrize("readable", [True, False], ids=["workloads read",
                                                          "workloads forbidden"])
def test_a_job_never_admitted_fails_at_its_start_deadline_and_is_deleted(kueue_with_tfjobs,
                                                                         tmp_path, readable):
    """A LocalQueue the namespace lacks: Kueue's Workload says so, and the step quotes it
    until its start deadline (10 minutes of a fake clock, moved on once Kueue has said why)
    deletes the job. Where the step's Role cannot read Workloads, it still waits queued,
    saying why it cannot quote Kueue."""
    cluster = kueue_with_tfjobs
    namespace = _namespace(cluster, None if readable else _without_workloads)
    try:
        fake = [0.0]

        def sleep(seconds: float) -> None:
            """A poll every 30 fake seconds and 0.2 real ones; fake time moves only once
            Kueue has said why the Workload waits, so the polls at the deadline read it."""
            until(lambda: _conditions(_workload(cluster, "tfjob", namespace,
                                                "fmnist-unadmitted")).get("QuotaReserved"),
                  "Kueue's reason on the Workload", 60)
            time.sleep(0.2)
            fake[0] += seconds

        launcher = _launcher(cluster, "tfjob", namespace,
                             {"queue": "team-a", "start_deadline_minutes": 10},
                             timeout_seconds=0, poll_seconds=30, clock=lambda: fake[0],
                             sleep=sleep)
        with pytest.raises(StartDeadlineExceeded) as failure:
            launcher.run(_spec("fmnist-unadmitted", tmp_path))
        message = str(failure.value)
        assert "still queued after 10 minute(s), past its start deadline of 10 minute(s)" in \
            message
        assert "start_deadline_minutes" in message
        if readable:
            assert "LocalQueue team-a doesn't exist" in message, message
        else:
            assert ("waiting for Kueue to admit it to LocalQueue team-a; its Workload could "
                    "not be read (HTTP 403") in message, message
        assert cluster.gone(PATHS["tfjob"].format(namespace=namespace,
                                                  name="fmnist-unadmitted"))
        assert isinstance(failure.value, FmnistError)
    finally:
        cluster.delete_namespace(namespace)
