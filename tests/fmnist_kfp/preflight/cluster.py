"""The stand-in cluster of the first-run pages' flows (tests/fmnist_kfp/test_first_run.py,
tests/test_install.py: the pages cannot run whole here, docs/cluster.md), and reading what
preflight prints: the API server and KServe stand-in with RBAC evaluated from the stored Roles,
plus the KFP API stand-in, set up with the repository's own manifests as standalone KFP in
``kubeflow`` (:func:`ready_cluster`); Kubeflow Trainer v2 added on it
(:func:`install_trainer_v2`). Preflight's own tests run on the real API server
(on_the_api_server.py)."""

from __future__ import annotations

from fmnist_kfp.cli import main as cli_main
from tests.setup_manifests import build
from tests.standins.kserve import KServeStandIn

NS = "kubeflow"
TFJOB_CRD = ("CustomResourceDefinition", "", "tfjobs.kubeflow.org")
KATIB_POD = ("Pod", NS, "katib-controller-6c8d9f7b5-x2k4p")
RESTART = "kubectl rollout restart deployment/katib-controller -n kubeflow"
# katib-config as Kubeflow installs it: kubeflow/manifests v1.11.0 applications/katib/upstream/
# installs/katib-cert-manager/katib-config.yaml lines 1-13 (= kubeflow/katib v0.19.0
# manifests/v1beta1/installs/katib-cert-manager/katib-config.yaml).
KATIB_CONFIG = """apiVersion: config.kubeflow.org/v1beta1
kind: KatibConfig
init:
  controller:
    webhookPort: 8443
    trialResources:
      - TrainJob.v1alpha1.trainer.kubeflow.org
      - Job.v1.batch
      - TFJob.v1.kubeflow.org
      - PyTorchJob.v1.kubeflow.org
      - MPIJob.v1.kubeflow.org
      - XGBoostJob.v1.kubeflow.org
"""


def katib_controller_pod(started: str, container_started: str | None = None) -> dict:
    """A running katib-controller pod as its Deployment makes it (kubeflow/katib v0.19.0
    manifests/v1beta1/components/controller/controller.yaml lines 14-25: the label
    katib.kubeflow.org/component=controller, container katib-controller)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": KATIB_POD[2], "namespace": NS,
                         "labels": {"katib.kubeflow.org/component": "controller",
                                    "sidecar.istio.io/inject": "false",
                                    "pod-template-hash": "6c8d9f7b5"}},
            "spec": {"containers": [{"name": "katib-controller",
                                     "image": "ghcr.io/kubeflow/katib/katib-controller:v0.19.0"}]},
            "status": {"phase": "Running", "startTime": started, "containerStatuses": [{
                "name": "katib-controller", "ready": True, "restartCount": 0,
                "image": "ghcr.io/kubeflow/katib/katib-controller:v0.19.0", "imageID": "",
                "state": {"running": {"startedAt": container_started or started}}}]}}


def ready_cluster(standin: KServeStandIn) -> None:
    """Standalone KFP in ``kubeflow`` after the README's setup steps: Training Operator v1
    installed before Katib (its CRD older than katib-controller's start)."""
    for base in ("pvc", "standalone-rbac", "serving-credentials", "serving-access"):
        for obj in build(base, namespace=NS):
            standin.put(obj)
    claim = standin.objects[("PersistentVolumeClaim", NS, "fmnist-data")]
    claim["status"] = {"phase": "Bound", "accessModes": ["ReadWriteMany"]}
    standin.put({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                 "metadata": {"name": "tfjobs.kubeflow.org"}})
    standin.objects[TFJOB_CRD]["metadata"]["creationTimestamp"] = "2026-01-01T09:00:00Z"
    standin.put(katib_controller_pod("2026-01-01T09:10:00Z"))
    standin.put({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "katib-config", "namespace": NS},
                 "data": {"katib-config.yaml": KATIB_CONFIG}})


def _crd_created(at: str):
    return lambda s, k: s.objects[TFJOB_CRD]["metadata"].update(creationTimestamp=at)


def preflight(standin, kfp, *extra) -> int:
    return cli_main(["preflight", "--host", kfp.url, "--kubeconfig",
                     str(standin.kubeconfig(NS)), *extra])


def missing_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("MISSING")]


def rules_without(rules: list[dict], verb: str, group: str, resource: str) -> list[dict]:
    """``rules`` one resource a rule, without ``verb`` on ``resource`` of ``group`` (a rule left
    with no verb dropped: the API server refuses one)."""
    split = []
    for rule in rules:
        for name in rule["resources"]:
            single = {**rule, "resources": [name]}
            if group in rule["apiGroups"] and name == resource:
                single["verbs"] = [v for v in rule["verbs"] if v != verb]
            split.append(single)
    return [rule for rule in split if rule["verbs"]]


def _drop_permission(standin, verb, group, resource):
    role = standin.objects[("Role", NS, "fmnist-pipeline-runner")]
    role["rules"] = rules_without(role["rules"], verb, group, resource)


def _rows(output: str, check: str) -> list[str]:
    lines = output.splitlines()
    return [line + "\n" + (lines[i + 1] if i + 1 < len(lines) else "")
            for i, line in enumerate(lines) if check in line]


# -- the training operator: Training Operator v1 (TFJob), Kubeflow Trainer v2 (TrainJob) --------
# Kubeflow 26.03's example install ships Trainer v2.1.0 (with JobSet v0.10.1) and leaves the
# Training Operator v1 commented out (kubeflow/manifests 26.03 example/kustomization.yaml lines
# 90-93); it installs Trainer together with Katib, so the TrainJob CRD is older than
# katib-controller's start.

TRAINER_V2 = {("trainer.kubeflow.org", "v1alpha1", "trainjobs"): "TrainJob",
              ("jobset.x-k8s.io", "v1alpha2", "jobsets"): "JobSet"}
TRAINER_V2_CLUSTER_SCOPED = {
    ("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes"): "ClusterTrainingRuntime"}
TRAINJOB_CRD = ("CustomResourceDefinition", "", "trainjobs.trainer.kubeflow.org")
RUNTIME_FIX = "kubectl apply -k manifests/trainer-runtime"


def install_trainer_v2(standin, monkeypatch, crd_created: str = "2026-01-01T09:00:00Z") -> None:
    """Serves Trainer v2's and JobSet's APIs on the API server stand-in (its ``trainer``
    add-on where it has one, else registered here for this test) and stores the TrainJob CRD."""
    from tests.standins import apiserver

    if "trainer" in apiserver.ADD_ONS:
        standin.install("trainer")
    else:
        for key, kind in TRAINER_V2.items():
            monkeypatch.setitem(apiserver.CORE, key, kind)
        for key, kind in TRAINER_V2_CLUSTER_SCOPED.items():
            monkeypatch.setitem(apiserver.CLUSTER_SCOPED, key, kind)
        standin.served |= set(TRAINER_V2) | set(TRAINER_V2_CLUSTER_SCOPED)
    standin.put({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                 "metadata": {"name": TRAINJOB_CRD[2]}})
    standin.objects[TRAINJOB_CRD]["metadata"]["creationTimestamp"] = crd_created


def without_training_operator_v1(standin) -> None:
    standin.served.discard(("kubeflow.org", "v1", "tfjobs"))
    standin.objects.pop(TFJOB_CRD)


def apply_runtime(standin) -> None:
    """``kubectl apply -k manifests/trainer-runtime``."""
    for obj in build("trainer-runtime"):
        standin.put(obj)
