"""``preflight`` against the real local cluster (tests/cluster.py: kube-apiserver v1.34.1 with
RBAC, the upstream CRDs, the node agent), run as a user's in-cluster step runs it: in a pod of
the project's image, as the ``pipeline-runner`` ServiceAccount bound to
``manifests/standalone-rbac``'s Role, with the pod's in-cluster configuration
(``preflight.kubernetes_api``). Installed for real: Kubeflow Trainer v2.1.0 and JobSet v0.10.1
(localcluster/operators.py, from their own manifests), our ClusterTrainingRuntime applied from
``manifests/trainer-runtime`` as a cluster admin applies it; for the TFJob path, the Training
Operator v1.9.2 with its validating webhook.

What cannot be green here, and why (each asserted as the row says it):

* ``Katib watches TrainJobs``/``TFJobs``: no katib-controller runs on this cluster (only
  Katib's CRDs are installed), and the steps' ServiceAccount may not read CRDs: a note.
* ``KServe default mode``: no KServe (only its CRDs), so no inferenceservice-config: a note.
* ``permissions``: the ServiceAccount may not impersonate itself, so the access reviews are
  asked as itself ("you"): a note, then every permission row.
* ``PVC``: manifests/standalone-rbac's Role grants no read of claims (the steps only mount
  it), so in the pod the claim is a note; as the cluster admin it is green (ReadWriteMany,
  Bound by the node's provisioner).
* ``NetworkPolicy istio-system/...``: the ServiceAccount may not read istio-system's policies.
* The Experiment's dry run is judged by the Experiment CRD's schema alone: Katib's webhook is
  not installed here.

The KFP backend is not part of this cluster: its check is left out (``check_backend=False``).

Found here: a row whose read was refused printed the client's whole exception (HTTP headers
and body) into the table; it now says ``cannot read it (HTTP 403 Forbidden)``. And as the
steps' ServiceAccount preflight cannot read the ClusterTrainingRuntime (no
Role grants a cluster-scoped read), so with the runtime deleted it said "note: cannot read it"
and "ready for a first run", while every TrainJob of the run would be refused by Trainer's
webhook. Preflight now sends the run's own TrainJob as a server-side dry run, and the webhook's
refusal names the runtime (:func:`test_without_the_runtime_preflight_is_red_naming_it`).
"""

from __future__ import annotations

import json
import textwrap
import time
import uuid

import pytest

from fmnist_kfp.kubernetes.trainjob import RUNTIME_APPLY, RUNTIME_NAME
from fmnist_kfp.preflight import Row, ready, render
from fmnist_kfp.settings.serving import KFP_STORE_SERVICE_ACCOUNT
from tests.setup_manifests import build

IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.2.0"  # a pod of it runs this checkout's Python
POD_SECONDS = 180
SETTLE_SECONDS = 60
# The rows that cannot be green on this cluster (the module docstring says why), and what each
# says.
NOTES = {
    "Katib watches TrainJobs": "could not check: cannot read the CRD",
    "Katib watches TFJobs": "could not check: cannot read the CRD",
    "KServe default mode": "unknown (inferenceservice-config not readable)",
    "training operator": "kubernetes.operator",
    "permissions": "you may not impersonate",
    "PVC ": "cannot read it (HTTP 403 Forbidden)",
    "NetworkPolicy istio-system/": "cannot read istio-system's NetworkPolicies (HTTP 403 "
                                   "Forbidden)",
}


@pytest.fixture(scope="module")
def trainer(real_cluster):
    """Trainer v2.1.0 and JobSet v0.10.1 installed, our runtime applied."""
    real_cluster.install("JOBSET_V0_10")
    real_cluster.install("TRAINER_V2_1")
    real_cluster.apply_training_runtime()
    _wait_for_webhook(real_cluster, "default", accepted=True)
    return real_cluster


def _namespace(cluster) -> str:
    """A namespace set up as the README's setup does for standalone KFP: the pipeline-runner
    ServiceAccount bound to manifests/standalone-rbac's Role, manifests/pvc's claim (Bound by
    the node's provisioner) and manifests/serving-credentials."""
    from kubernetes import client

    name = f"preflight-{uuid.uuid4().hex[:6]}"
    cluster.grant_pipeline_runner(name)
    for obj in build("pvc", namespace=name) + build("serving-credentials", namespace=name):
        if obj["kind"] != "Job":  # the claim's permissions Job readies its files, not needed
            cluster.apply(obj)
    core = client.CoreV1Api(cluster.api_client)
    deadline = time.monotonic() + SETTLE_SECONDS
    while core.read_namespaced_persistent_volume_claim("fmnist-data", name).status.phase != \
            "Bound":
        assert time.monotonic() < deadline, "the claim was never bound"
        time.sleep(0.2)
    return name


def _trainjob(namespace: str) -> dict:
    """A TrainJob as the train step builds it (for waiting on Trainer's webhook)."""
    from fmnist_kfp.kubernetes.trainjob import OVERRIDES, build_trainjob
    from fmnist_kfp.settings.jobs import KubernetesSettings
    from fmnist_kfp.settings.training import TrainingConfig
    from fmnist_kfp.training.training_job import TrainingJobSpec

    spec = TrainingJobSpec(name=f"wait-{uuid.uuid4().hex[:6]}", config=TrainingConfig(),
                           data_dir="/mnt/fmnist/dataset", export_dir="/mnt/fmnist/m/1",
                           work_dir="/mnt/fmnist/m")
    return build_trainjob(spec, KubernetesSettings(image=IMAGE, namespace=namespace), OVERRIDES)


def _wait_for_webhook(cluster, namespace: str, accepted: bool) -> None:
    """Until Trainer's webhook, which reads runtimes from its informer's cache, accepts (or
    refuses) a TrainJob naming our runtime."""
    from kubernetes.client.exceptions import ApiException

    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        try:
            cluster.create(_trainjob(namespace), namespace=namespace, dry_run=True)
            now = True
        except ApiException as error:
            if RUNTIME_NAME not in str(error.body):
                raise
            now = False
        if now == accepted:
            return
        assert time.monotonic() < deadline, (
            f"Trainer's webhook still {'refuses' if accepted else 'accepts'} {RUNTIME_NAME}")
        time.sleep(0.2)


def _preflight_in_a_pod(cluster, namespace: str, operator: str) -> list[Row]:
    """``preflight`` as an in-cluster step runs it: a pod as pipeline-runner, its in-cluster
    configuration; its rows."""
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client)
    script = f"""
        import json
        from fmnist_kfp import preflight
        api, source = preflight.kubernetes_api()
        assert source.startswith("in-cluster configuration"), source
        cluster = preflight.Cluster(
            namespace="{namespace}", runner_service_account="pipeline-runner", pvc="fmnist-data",
            credentials_secret="", serving_namespace="{namespace}",
            serving_service_account="{KFP_STORE_SERVICE_ACCOUNT}", multi_user=False,
            operator="{operator}")
        rows = preflight.preflight(None, api, cluster, check_backend=False)
        print("ROWS " + json.dumps([row.__dict__ for row in rows]))
    """
    pod = f"preflight-{operator}-{uuid.uuid4().hex[:4]}"
    core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod},
        "spec": {"serviceAccountName": "pipeline-runner", "restartPolicy": "Never",
                 "containers": [{"name": "main", "image": IMAGE,
                                 "command": ["python", "-c", textwrap.dedent(script)]}]}})
    phase, log = cluster.pod_finished(namespace, pod, POD_SECONDS, every=0.5)
    assert phase == "Succeeded", log
    (line,) = [line for line in log.splitlines() if line.startswith("ROWS ")]
    return [Row(**row) for row in json.loads(line[len("ROWS "):])]


def _by_check(rows: list[Row]) -> dict[str, Row]:
    return {row.check: row for row in rows}


def _assert_green(rows: list[Row], operator_rows: list[str]) -> None:
    report = render(rows)
    assert ready(rows), report
    checks = _by_check(rows)
    for check in operator_rows + [
            "Katib Experiment", "Katib Trial", "KServe InferenceService",
            "KServe ServingRuntime", "Katib Experiment the tune step creates"]:
        assert checks[check].ok is True, f"{check}:\n{report}"
    assert [row.ok for row in rows if row.check.startswith("serving credentials")] == [True]
    may = [row for row in rows if " may " in row.check]
    assert len(may) > 20 and all(row.ok is True for row in may), report
    for row in rows:  # every note is one this cluster cannot make green, saying why
        if row.ok is None:
            (said,) = [said for check, said in NOTES.items() if row.check.startswith(check)]
            assert said in row.found, report
        assert "HTTP response headers" not in row.found, report  # the status, not the dump


def test_with_trainer_and_our_runtime_preflight_is_green(trainer):
    namespace = _namespace(trainer)
    rows = _preflight_in_a_pod(trainer, namespace, "trainjob")
    _assert_green(rows, ["TrainJob (Trainer v2)", "JobSet",
                         f"ClusterTrainingRuntime {RUNTIME_NAME}",
                         "TrainJob the train step creates"])
    checks = _by_check(rows)
    # The ServiceAccount cannot read the runtime: Trainer's webhook, judging the run's TrainJob,
    # says it exists.
    assert "Trainer's webhook accepted" in checks[f"ClusterTrainingRuntime {RUNTIME_NAME}"].found
    assert "Trainer 2.1: podTemplateOverrides" in checks["TrainJob (Trainer v2)"].found
    assert "TrainJob trials" in checks["Katib Experiment the tune step creates"].found


def test_without_the_runtime_preflight_is_red_naming_it(trainer):
    """The runtime deleted, as on a cluster where nobody applied it: red, in the pod (where the
    runtime cannot be read) and as the cluster admin (where it can), the runtime's row naming
    the runtime and the apply that fixes it, and no other miss."""
    from fmnist_kfp.preflight import Cluster, preflight

    namespace = _namespace(trainer)
    trainer.api_client.call_api(
        f"/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/{RUNTIME_NAME}", "DELETE",
        auth_settings=["BearerToken"], response_type="object")
    try:
        _wait_for_webhook(trainer, namespace, accepted=False)
        in_pod = _preflight_in_a_pod(trainer, namespace, "trainjob")
        admin = preflight(None, trainer.api_client, Cluster(
            namespace=namespace, runner_service_account="pipeline-runner", pvc="fmnist-data",
            credentials_secret="", serving_namespace=namespace,
            serving_service_account=KFP_STORE_SERVICE_ACCOUNT, multi_user=False,
            operator="trainjob"), check_backend=False)
    finally:
        trainer.apply_training_runtime()
        _wait_for_webhook(trainer, namespace, accepted=True)
    for rows in (in_pod, admin):
        report = render(rows)
        assert not ready(rows), report
        (missing,) = [row for row in rows if row.ok is False]
        assert missing.check == f"ClusterTrainingRuntime {RUNTIME_NAME}", report
        assert missing.found.startswith("missing") and RUNTIME_APPLY in missing.fix, report
        assert "TrainJob the train step creates" not in _by_check(rows), report
    (claim,) = [row for row in admin if row.check.startswith("PVC ")]
    assert claim.ok is True and claim.found == "ReadWriteMany, Bound", render(admin)
    # In the pod it is Trainer's own refusal that says so.
    runtime_row = _by_check(in_pod)[f"ClusterTrainingRuntime {RUNTIME_NAME}"]
    assert "specified clusterTrainingRuntime must be created" in runtime_row.found
    assert f'"{RUNTIME_NAME}" not found' in runtime_row.found


def test_with_the_training_operator_preflight_is_green_on_tfjobs(trainer):
    """The TFJob path: the Training Operator v1.9.2 installed (its validating webhook judges the
    run's TFJob: kubeflow/training-operator v1.9.2 pkg/webhooks/tensorflow/tfjob_webhook.go,
    ``sideEffects=None``, so it runs on dry runs)."""
    trainer.install("TRAINING_OPERATOR_V1")
    namespace = _namespace(trainer)
    rows = _preflight_in_a_pod(trainer, namespace, "tfjob")
    _assert_green(rows, ["TFJob (Training Operator v1)", "TFJob the train step creates"])
    assert "TFJob trials" in _by_check(rows)["Katib Experiment the tune step creates"].found
