"""TFJob manifests from the kubeflow-training SDK models, validated strictly against the real
TFJob CRD (../shared/crds/tfjob.kubeflow.org_v1.yaml)."""

from __future__ import annotations

import itertools

import jsonschema
import pytest

from fmnist.errors import UserInputError
from fmnist.kubernetes.tfjob import build_tfjob, to_manifest
from fmnist.settings.jobs import KubernetesSettings
from fmnist.settings.training import TrainingConfig
from fmnist.training.job import TrainingJobSpec
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


def _settings(**overrides) -> KubernetesSettings:
    return KubernetesSettings(image="ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0", namespace="team-a",
                              **overrides)


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
    assert container["command"][:3] == ["python", "-m", "fmnist.training.trainer"]
    assert "--model-type" in container["command"]
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
    with pytest.raises(UserInputError, match="has no tag"):
        build_tfjob(_spec(), KubernetesSettings(image="ghcr.io/fmnist-kfp/fmnist-kfp"))
    build_tfjob(_spec(), KubernetesSettings(image="registry.local:5000/fmnist@sha256:" + "a" * 64))


def test_job_names_are_stable_per_task_and_distinct_across_tasks():
    from fmnist.settings.names import is_dns_1035_label
    from kfp_components.train.step import job_name

    first = job_name("batchnorm", "gs://root/run-1/for-loop-1-iteration-2/train-model/model")
    assert first == job_name("batchnorm", "gs://root/run-1/for-loop-1-iteration-2/train-model/model")
    assert first != job_name("batchnorm", "gs://root/run-2/for-loop-1-iteration-2/train-model/model")
    assert is_dns_1035_label(first)
