"""TrainJob manifests from the kubeflow-trainer-api models, validated strictly against the real
TrainJob CRDs: Trainer v2.1.0's (../shared/crds/trainer-v2, ``podTemplateOverrides``) and
v2.2.0's (tests/crds/trainer-v2.2.0, ``runtimePatches``); what a TrainJob cannot express is
refused before anything is built; and choosing the operator from API discovery."""

from __future__ import annotations

import itertools
from pathlib import Path

import jsonschema
import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kubernetes.training_operators import (
    ClusterDiscovery,
    ClusterJob,
    choose_operator,
    spec_fields,
    trainjob_api,
)
from fmnist_kfp.kubernetes.trainjob import (
    OVERRIDES,
    PATCHES,
    build_trainjob,
    pod_name,
    trainjob_problems,
)
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.training_job import TrainingJobSpec
from tests.crd_schemas import validate_strict

IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0"
GPU_IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0-gpu"
# Each release's TrainJob CRD (../shared/crds/SOURCE.md, tests/crds/SOURCE.md).
CRD_OF = {OVERRIDES: "trainer-v2/trainjob.trainer.kubeflow.org_v1alpha1.yaml",
          PATCHES: "trainer-v2.2.0/trainjob.trainer.kubeflow.org_v1alpha1.yaml"}


def _spec(**overrides) -> TrainingJobSpec:
    values = dict(name="fmnist-batchnorm-run-1", config=TrainingConfig(model_type="batchnorm"),
                  data_dir="/mnt/fmnist/dataset", export_dir="/mnt/fmnist/models/bn/1",
                  work_dir="/mnt/fmnist/models/bn", num_workers=2)
    values.update(overrides)
    return TrainingJobSpec(**values)


def _settings(**overrides) -> KubernetesSettings:
    return KubernetesSettings(**{"image": IMAGE, "gpu_image": GPU_IMAGE, "namespace": "team-a",
                                 "pvc_name": "fmnist-pvc", **overrides})


def _pod_settings(manifest: dict, shape: str) -> dict:
    """The pod template settings, from either shape."""
    if shape == OVERRIDES:
        [override] = manifest["spec"]["podTemplateOverrides"]
        assert override["targetJobs"] == [{"name": "node"}]
        return override
    [patch] = manifest["spec"]["runtimePatches"]
    assert patch["manager"] == "fmnist-kfp.io/train-step"
    [rjob] = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert rjob["name"] == "node"
    return rjob["template"]["spec"]["template"]


@pytest.mark.parametrize(("shape", "gpus", "account"),
                         list(itertools.product((OVERRIDES, PATCHES), (0, 1), ("", "trainer"))))
def test_every_trainjob_variant_passes_strict_crd_validation(shape, gpus, account):
    manifest = build_trainjob(_spec(gpus_per_worker=gpus),
                              _settings(service_account=account, active_deadline_seconds=7200),
                              shape)
    validate_strict(manifest, CRD_OF[shape], "v1alpha1")
    assert (manifest["apiVersion"], manifest["kind"]) == ("trainer.kubeflow.org/v1alpha1",
                                                          "TrainJob")
    assert manifest["metadata"]["namespace"] == "team-a"
    assert manifest["spec"]["runtimeRef"] == {"name": "fmnist-tensorflow", "kind":
                                              "ClusterTrainingRuntime",
                                              "apiGroup": "trainer.kubeflow.org"}
    trainer = manifest["spec"]["trainer"]
    assert trainer["numNodes"] == 2
    assert trainer["image"] == (GPU_IMAGE if gpus else IMAGE)
    assert trainer["command"][:3] == ["python", "-m", "fmnist_kfp.training.trainer"]
    assert {e["name"]: e["value"] for e in trainer["env"]} == {
        "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "FMNIST_NUM_NODES": "2"}
    limits = {"cpu": "2", "memory": "4Gi", **({"nvidia.com/gpu": "1"} if gpus else {})}
    assert trainer["resourcesPerNode"] == {"limits": limits, "requests": limits}
    pod = _pod_settings(manifest, shape)
    assert pod["metadata"]["labels"] == {"sidecar.istio.io/inject": "false"}
    spec = pod["spec"]
    assert spec["volumes"] == [{"name": "fmnist-data",
                                "persistentVolumeClaim": {"claimName": "fmnist-pvc"}}]
    assert spec["containers"] == [{"name": "node", "volumeMounts": [
        {"name": "fmnist-data", "mountPath": "/mnt/fmnist"}]}]
    assert spec.get("serviceAccountName") == (account or None)
    if gpus:
        assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"
    else:
        assert "nodeSelector" not in spec and "tolerations" not in spec
    if shape == PATCHES:  # 2.2 takes the security context and the deadline
        assert spec["securityContext"]["runAsUser"] == 1000
        assert manifest["spec"]["activeDeadlineSeconds"] == 7200
        assert "podTemplateOverrides" not in manifest["spec"]
    else:  # 2.1 has neither: the runtime and the launcher keep them
        assert "securityContext" not in spec
        assert "activeDeadlineSeconds" not in manifest["spec"]
        assert "runtimePatches" not in manifest["spec"]


@pytest.mark.parametrize("shape", [OVERRIDES, PATCHES])
def test_each_shape_is_unknown_to_the_other_release(shape):
    """Why the shape is chosen by what the cluster serves: each release's CRD lacks the
    other's field (an API server prunes it, silently)."""
    manifest = build_trainjob(_spec(), _settings(), shape)
    other = CRD_OF[PATCHES if shape == OVERRIDES else OVERRIDES]
    with pytest.raises(jsonschema.ValidationError, match=shape):
        validate_strict(manifest, other, "v1alpha1")


def test_kueues_labels_reach_the_trainjob():
    manifest = build_trainjob(_spec(), _settings(scheduling={"queue": "team-a",
                                                             "priority_class": "high"}), PATCHES)
    labels = manifest["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "team-a"
    assert labels["kueue.x-k8s.io/priority-class"] == "high"
    assert "suspend" not in manifest["spec"]  # Kueue's webhook suspends it, not us


@pytest.mark.parametrize(("spec", "settings", "shape", "problem"), [
    ({"strategy": "parameter_server", "num_ps": 1}, {}, OVERRIDES, "parameter_server"),
    ({"evaluator": True}, {}, OVERRIDES, "evaluator"),
    ({"use_chief": True}, {}, OVERRIDES, "use_chief"),
    ({}, {"scheduling": {"gang": "volcano"}}, PATCHES, "gang"),
    ({}, {"scheduling": {"priority_class": "high"}}, PATCHES, "priorityClassName"),
    ({}, {"scheduling": {"queue": "team-a"}}, OVERRIDES, "spec.runtimePatches"),
    ({}, {"object_store_secret": "s3"}, PATCHES, "envFrom"),
    ({}, {"restart_policy": "OnFailure"}, PATCHES, "restart_policy OnFailure"),
    ({}, {"clean_pod_policy": "All"}, PATCHES, "clean_pod_policy All"),
    ({}, {"ttl_seconds_after_finished": 60}, PATCHES, "ttl_seconds_after_finished 60"),
    ({"name": "f" + "x" * 50, "num_workers": 10}, {}, PATCHES, "too long"),
    ({"max_restarts": 6}, {}, OVERRIDES, "at most 5 times"),
])
def test_what_a_trainjob_cannot_express_is_refused_with_its_reason(spec, settings, shape,
                                                                   problem):
    job, pods = _spec(**spec), _settings(**settings)
    problems = trainjob_problems(job, pods, shape)
    assert len(problems) == 1 and problem in problems[0], problems
    with pytest.raises(UserInputError, match="cannot run as a TrainJob"):
        ClusterJob(job, pods, "trainjob", shape)  # checked as it is made, before any build


def test_the_restart_ceiling_is_the_runtimes_and_its_own_value_passes():
    """JobSet fails the TrainJob with ReachedMaxRestarts once its restarts reach the runtime's
    failurePolicy.maxRestarts (jobset v0.10.1 pkg/controllers/failure_policy.go 219-227), so a
    job asking for more restarts is refused before any work; the ceiling itself passes."""
    import yaml

    from fmnist_kfp.kubernetes.trainjob import RUNTIME_MAX_RESTARTS

    root = Path(__file__).resolve().parents[3]
    runtime = yaml.safe_load((root / "manifests/trainer-runtime/cluster-training-runtime.yaml")
                             .read_text())
    jobset = runtime["spec"]["template"]["spec"]
    assert jobset["failurePolicy"]["maxRestarts"] == RUNTIME_MAX_RESTARTS
    assert trainjob_problems(_spec(max_restarts=RUNTIME_MAX_RESTARTS), _settings()) == []


def test_the_name_rule_is_jobsets_pod_name_with_its_suffix():
    """jobset v0.10.1 pkg/webhooks/jobset_webhook.go lines 230-243: <js>-node-0-<last>-abcde
    must fit 63 characters."""
    fits = "f" + "x" * (63 - len("-node-0-9-abcde") - 1)
    assert pod_name(fits, 9) == f"{fits}-node-0-9"
    assert trainjob_problems(_spec(name=fits, num_workers=10), _settings()) == []
    assert trainjob_problems(_spec(name=fits + "y", num_workers=10), _settings())


# ---------------------------------------------------------------------------------------------
# The operator, from what the API server serves


class Static:
    """A :class:`~fmnist_kfp.kubernetes.training_operators.Discovery` with fixed answers."""

    def __init__(self, tfjobs=False, trainjobs=False, runtime=True, fields=None):
        self.answers = {("kubeflow.org/v1", "tfjobs"): tfjobs,
                        ("trainer.kubeflow.org/v1alpha1", "trainjobs"): trainjobs}
        self.runtime, self.fields = runtime, fields

    def serves(self, group_version, plural):
        return self.answers[(group_version, plural)]

    def runtime_exists(self, name):
        assert name == "fmnist-tensorflow"
        return self.runtime

    def trainjob_fields(self):
        return self.fields


@pytest.mark.parametrize(("setting", "cluster", "chosen"), [
    ("auto", Static(tfjobs=True, trainjobs=True), "tfjob"),
    ("auto", Static(tfjobs=True), "tfjob"),
    ("auto", Static(trainjobs=True), "trainjob"),
    ("auto", Static(trainjobs=True, runtime=None), "trainjob"),  # unreadable: the webhook says
    ("tfjob", Static(tfjobs=True, trainjobs=True), "tfjob"),
    ("trainjob", Static(tfjobs=True, trainjobs=True), "trainjob"),
])
def test_the_operator_is_chosen_by_what_the_cluster_serves(setting, cluster, chosen):
    assert choose_operator(setting, cluster) == chosen


@pytest.mark.parametrize(("setting", "cluster", "message"), [
    ("auto", Static(), "serves neither kubeflow.org/v1 tfjobs .* nor trainer.kubeflow.org/"
                       "v1alpha1 trainjobs.*kubectl apply -k manifests/trainer-runtime.*"
                       "Training Operator v1"),
    ("auto", Static(trainjobs=True, runtime=False), "ClusterTrainingRuntime fmnist-tensorflow "
                                                    "is not.*kubectl apply -k manifests/"
                                                    "trainer-runtime"),
    ("tfjob", Static(trainjobs=True), "does not serve kubeflow.org/v1 tfjobs"),
    ("trainjob", Static(tfjobs=True), "serves neither trainer.kubeflow.org"),
    ("trainjob", Static(trainjobs=True, runtime=False), "kubectl apply -k manifests/"),
    ("legacy", Static(tfjobs=True), "must be one of auto, tfjob, trainjob"),
])
def test_no_usable_operator_is_an_error_naming_the_install(setting, cluster, message):
    with pytest.raises(UserInputError, match=message):
        choose_operator(setting, cluster)


def test_spec_fields_follow_a_reference():
    document = {"components": {"schemas": {
        "Spec": {"properties": {"runtimePatches": {}}},
        "TrainJob": {"x-kubernetes-group-version-kind": [
            {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"}],
            "properties": {"spec": {"allOf": [{"$ref": "#/components/schemas/Spec"}]}}}}}}
    assert spec_fields(document, "trainer.kubeflow.org", "v1alpha1", "TrainJob") == {
        "runtimePatches"}
    assert spec_fields({}, "trainer.kubeflow.org", "v1alpha1", "TrainJob") is None


def test_the_operator_and_trainjob_api_follow_what_the_api_server_serves(kubeflow):
    """On a real API server (tests/fmnist_kfp/preflight/on_the_api_server.py), from Kubeflow
    1.11 (TFJobs only) to 26.03 as it ships (Trainer v2.1.0, no Training Operator v1), the
    runtime applied or not, then Trainer v2.2.0's TrainJob CRD, then no operator: the choice
    and the TrainJob API read from API discovery and the TrainJob schema kube-apiserver
    publishes at /openapi/v3."""
    import time

    import yaml

    from tests.fmnist_kfp.preflight.on_the_api_server import (
        TFJOB_CRD,
        TRAINJOB_CRD,
        apply_runtime,
    )

    cluster, _ = kubeflow
    discovery = ClusterDiscovery(cluster.api_client)
    assert choose_operator("auto", discovery) == "tfjob"
    assert discovery.trainjob_fields() is None  # no Trainer: nothing published
    cluster.uninstall_crd(TFJOB_CRD)
    cluster.install_trainer()
    with pytest.raises(UserInputError, match="kubectl apply -k manifests/trainer-runtime"):
        choose_operator("auto", ClusterDiscovery(cluster.api_client))
    apply_runtime(cluster)
    discovery = ClusterDiscovery(cluster.api_client)
    assert choose_operator("auto", discovery) == "trainjob"
    assert trainjob_api(discovery) == OVERRIDES
    newer = yaml.safe_load((Path(__file__).parents[2] / "crds" / "trainer-v2.2.0" /
                            "trainjob.trainer.kubeflow.org_v1alpha1.yaml").read_text())
    cluster.edit("apiextensions.k8s.io/v1", "CustomResourceDefinition", TRAINJOB_CRD, "",
                 lambda crd: crd.update(spec=newer["spec"]))
    deadline = time.monotonic() + 60  # the published schema follows the CRD a moment later
    while trainjob_api(ClusterDiscovery(cluster.api_client)) != PATCHES:
        assert time.monotonic() < deadline, "Trainer v2.2.0's TrainJob schema not published"
        time.sleep(0.5)
    for name in cluster.trainer_crds:
        cluster.uninstall_crd(name)
    with pytest.raises(UserInputError, match="serves neither"):
        choose_operator("auto", ClusterDiscovery(cluster.api_client))
