"""TFJob manifests from the kubeflow-training SDK models, validated strictly against the real
TFJob CRD (../shared/crds/tfjob.kubeflow.org_v1.yaml)."""

from __future__ import annotations

import itertools

import jsonschema
import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kubernetes.manifest import to_manifest
from fmnist_kfp.kubernetes.tfjob import build_tfjob
from fmnist_kfp.kubernetes.training_operators import ClusterJob
from fmnist_kfp.settings.jobs import KubernetesSettings, cluster_settings
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.training_job import TrainingJobSpec
from tests.crd_schemas import validate_strict

CRD = "tfjob.kubeflow.org_v1.yaml"


def _spec(**overrides) -> TrainingJobSpec:
    values = dict(
        name="fmnist-batchnorm-run-1", config=TrainingConfig(model_type="batchnorm"),
        data_dir="/mnt/fmnist/dataset", export_dir="/mnt/fmnist/models/bn/1",
        work_dir="/mnt/fmnist/models/bn", num_workers=2,
    )
    values.update(overrides)
    return TrainingJobSpec(**values)


IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0"
GPU_IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0-gpu"


def _settings(**overrides) -> KubernetesSettings:
    return KubernetesSettings(**{"image": IMAGE, "gpu_image": GPU_IMAGE, "namespace": "team-a",
                                 **overrides})


@pytest.mark.parametrize(
    ("gpus", "chief", "storage"),
    list(itertools.product([0, 1], [False, True], ["pvc", "object-store"])),
)
def test_every_tfjob_variant_passes_strict_crd_validation(gpus, chief, storage):
    storage_settings = (
        {"pvc_name": "fmnist-pvc"} if storage == "pvc"
        else {"object_store_secret": "fmnist-s3-credentials"}
    )
    manifest = to_manifest(build_tfjob(_spec(gpus_per_worker=gpus, use_chief=chief),
                                       _settings(active_deadline_seconds=7200,
                                                 **storage_settings)))
    validate_strict(manifest, CRD, "v1")

    replicas = manifest["spec"]["tfReplicaSpecs"]
    assert set(replicas) == ({"Worker", "Chief"} if chief else {"Worker"})
    assert replicas["Worker"]["replicas"] == 2
    assert replicas["Worker"]["restartPolicy"] == "ExitCode"
    run_policy = manifest["spec"]["runPolicy"]  # where the operator reads it
    assert run_policy == {"backoffLimit": 3, "activeDeadlineSeconds": 7200,
                          "cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 3600}
    pod = replicas["Worker"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["name"] == "tensorflow"
    assert container["command"][:3] == ["python", "-m", "fmnist_kfp.training.trainer"]
    assert "--model-type" in container["command"]
    # Every replica that computes gets the GPUs and the GPU image; without GPUs, the CPU image.
    images = {kind: [c["image"] for c in replica["template"]["spec"]["containers"]]
              for kind, replica in replicas.items()}
    assert images == {kind: [GPU_IMAGE if gpus else IMAGE] for kind in replicas}
    if gpus:
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert pod["nodeSelector"] and pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    else:
        assert "nvidia.com/gpu" not in container["resources"]["limits"]
        assert "nodeSelector" not in pod
    if storage == "pvc":
        assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "fmnist-pvc"
        assert container["volumeMounts"][0]["mountPath"] == "/mnt/fmnist"
    else:
        assert container["envFrom"][0]["secretRef"]["name"] == "fmnist-s3-credentials"
        assert "volumes" not in pod


def test_the_strict_validation_catches_a_misplaced_field():
    """runPolicy fields at the spec level are pruned by the API server (the retired KFP
    launcher put them there); strict validation must reject such a manifest."""
    manifest = to_manifest(build_tfjob(_spec(), _settings()))
    manifest["spec"]["backoffLimit"] = 3
    with pytest.raises(jsonschema.ValidationError, match="backoffLimit"):
        validate_strict(manifest, CRD, "v1")


def test_an_image_without_a_tag_is_rejected_before_anything_is_created():
    """The pods' settings are checked where they are made (cluster_settings), once; the
    builder only builds."""
    with pytest.raises(UserInputError, match="image 'ghcr.io/fmnist-kfp/fmnist-kfp' has no tag"):
        cluster_settings({}, image="ghcr.io/fmnist-kfp/fmnist-kfp")
    with pytest.raises(UserInputError, match="gpu_image 'r.example/fmnist' has no tag"):
        cluster_settings({}, image=IMAGE, gpu_image="r.example/fmnist", gpus_per_worker=1)
    build_tfjob(_spec(), cluster_settings(
        {}, image="registry.local:5000/fmnist@sha256:" + "a" * 64))


def test_a_gpu_job_without_a_gpu_image_is_refused_naming_the_input():
    """A CPU image on a GPU node would train on its CPU without a word: refused instead."""
    with pytest.raises(UserInputError, match="asks for 2 GPU.*give the step's gpu_image input"):
        cluster_settings({}, image=IMAGE, gpu_image="", gpus_per_worker=2)
    cluster_settings({}, image=IMAGE, gpu_image="", gpus_per_worker=0)  # no GPUs: not needed


def test_job_names_are_stable_per_task_and_distinct_across_tasks():
    from fmnist_kfp.kfp_components.train.step import job_name
    from fmnist_kfp.settings.names import is_dns_1035_label

    first = job_name("batchnorm", "gs://root/run-1/for-loop-1-iteration-2/train-model/model")
    assert first == job_name("batchnorm", "gs://root/run-1/for-loop-1-iteration-2/train-model/model")
    assert first != job_name("batchnorm", "gs://root/run-2/for-loop-1-iteration-2/train-model/model")
    assert is_dns_1035_label(first)


def test_the_whole_manifest_of_a_gpu_job_with_a_chief():
    """Every field, so that no setting silently stops reaching the TFJob."""
    spec = _spec(name="fmnist-basic-3f2a9c", config=TrainingConfig(model_type="basic"),
                 num_workers=2, use_chief=True, gpus_per_worker=1, max_restarts=2)
    settings = _settings(pvc_name="fmnist-data", cpu="3", memory="6Gi",
                         object_store_secret="s3-keys", service_account="trainer",
                         active_deadline_seconds=7200, ttl_seconds_after_finished=60,
                         clean_pod_policy="All")
    resources = {"cpu": "3", "memory": "6Gi", "nvidia.com/gpu": "1"}
    pod = {
        "metadata": {"labels": {"sidecar.istio.io/inject": "false"},
                     "annotations": {"sidecar.istio.io/inject": "false"}},
        "spec": {
            "containers": [{
                "name": "tensorflow", "image": GPU_IMAGE,
                "command": spec.trainer_command(python="python"),
                "env": [{"name": "TF_USE_LEGACY_KERAS", "value": "1"},
                        {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"}],
                "envFrom": [{"secretRef": {"name": "s3-keys"}}],
                "resources": {"limits": resources, "requests": resources},
                "volumeMounts": [{"mountPath": "/mnt/fmnist", "name": "fmnist-data"}],
            }],
            "nodeSelector": {"nvidia.com/gpu.present": "true"},
            "securityContext": {"runAsUser": 1000, "runAsGroup": 0, "fsGroup": 0,
                                "fsGroupChangePolicy": "OnRootMismatch"},
            "serviceAccountName": "trainer",
            "tolerations": [{"effect": "NoSchedule", "key": "nvidia.com/gpu",
                             "operator": "Exists"}],
            "volumes": [{"name": "fmnist-data",
                         "persistentVolumeClaim": {"claimName": "fmnist-data"}}],
        },
    }
    assert to_manifest(build_tfjob(spec, settings)) == {
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": "fmnist-basic-3f2a9c", "namespace": "team-a",
                     "labels": {"app.kubernetes.io/part-of": "fmnist-kfp",
                                "fmnist.kubeflow.org/model-type": "basic"}},
        "spec": {
            "runPolicy": {"activeDeadlineSeconds": 7200, "backoffLimit": 3,
                          "cleanPodPolicy": "All", "ttlSecondsAfterFinished": 60},
            "tfReplicaSpecs": {
                "Worker": {"replicas": 2, "restartPolicy": "ExitCode", "template": pod},
                "Chief": {"replicas": 1, "restartPolicy": "ExitCode", "template": pod},
            },
        },
    }
    assert spec.trainer_command(python="python")[:3] == ["python", "-m",
                                                         "fmnist_kfp.training.trainer"]


def test_a_cpu_job_without_a_claim_has_no_gpu_fields_and_no_volume():
    manifest = to_manifest(build_tfjob(_spec(num_workers=1), _settings(restart_policy="Never")))
    worker = manifest["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["restartPolicy"] == "Never"
    pod = worker["template"]["spec"]
    # No volumes, node selector, tolerations, account; no fsGroup without a volume.
    assert set(pod) == {"containers", "securityContext"}
    assert pod["securityContext"] == {"runAsUser": 1000, "runAsGroup": 0}
    assert set(pod["containers"][0]) == {"name", "image", "command", "env", "resources"}
    assert manifest["spec"]["runPolicy"] == {"backoffLimit": 3, "cleanPodPolicy": "Running",
                                             "ttlSecondsAfterFinished": 3600}


@pytest.mark.parametrize(("max_restarts", "limit"), [(0, 0), (1, 2), (2, 3), (5, 6)])
def test_backoff_limit_agrees_with_max_restarts(max_restarts, limit):
    """kubeflow/trainer v1.9.2: 0 fails at the first failure (common/job.go lines 193-198),
    otherwise the job fails once the running pods' restart counts reach the limit
    (core/job.go PastBackoffLimit): max_restarts + 1 fails no earlier than the launcher."""
    from fmnist_kfp.kubernetes.tfjob import backoff_limit

    assert backoff_limit(max_restarts) == limit
    manifest = to_manifest(build_tfjob(_spec(max_restarts=max_restarts), _settings()))
    assert manifest["spec"]["runPolicy"]["backoffLimit"] == limit


def test_a_name_whose_pods_would_not_be_dns_labels_is_refused():
    """Our rule from the operator's naming (<job>-worker-<i>, common/util.go GenGeneralName
    v1.9.2 lines 50-53): Service names are DNS-1035 labels of at most 63 characters."""
    name = "a" * 54  # "-worker-0" makes 63
    build_tfjob(_spec(name=name, num_workers=1), _settings())
    with pytest.raises(UserInputError) as refused:  # the job as a TFJob, checked as it is made
        ClusterJob(_spec(name=name, num_workers=11), _settings(), "tfjob")  # "-worker-10": 64
    assert str(refused.value) == (
        f"job name {name!r} is too long: its pod and service '{name}-worker-10' would exceed "
        "63 characters; shorten the name by 1")



def test_every_replica_runs_as_the_image_user_with_fs_group_0_on_the_shared_volume():
    """The pods write the shared volume (checkpoints, exports, TensorBoard logs) next to what
    the pipeline's steps wrote there, so they run as the image's user 1000 in group 0, the
    group the step pods run in (KFP gives a step no fsGroup: kubeflow/pipelines 2.15.0
    backend/src/v2/compiler/argocompiler/argo.go 153-156, 2.16.0 argo.go 163-176 and
    kubernetes_platform/proto/kubernetes_executor_config.proto 277-291), with ``fsGroup: 0``
    where the volume's driver applies it, changed only on a root mismatch. Pod-level, in every
    replica's template: the Training Operator creates each pod from a copy of its replica's
    template (kubeflow/trainer v1.9.2 pkg/controller.v1/common/pod.go 410-455). The fields are
    the TFJob CRD's (../shared/crds/tfjob.kubeflow.org_v1.yaml: podSecurityContext fsGroup,
    fsGroupChangePolicy, runAsGroup, runAsUser), checked strictly."""
    from fmnist_kfp.settings.platform import IMAGE_GID, IMAGE_UID

    spec = _spec(num_workers=2, strategy="parameter_server", num_ps=2, evaluator=True)
    manifest = to_manifest(build_tfjob(spec, _settings(pvc_name="fmnist-data")))
    validate_strict(manifest, CRD, "v1")
    replicas = manifest["spec"]["tfReplicaSpecs"]
    assert set(replicas) == {"Chief", "Worker", "PS", "Evaluator"}
    for replica in replicas.values():
        assert replica["template"]["spec"]["securityContext"] == {
            "runAsUser": IMAGE_UID, "runAsGroup": IMAGE_GID, "fsGroup": IMAGE_GID,
            "fsGroupChangePolicy": "OnRootMismatch"}
    assert (IMAGE_UID, IMAGE_GID) == (1000, 0)  # the Dockerfile's USER (tests/test_image.py)
