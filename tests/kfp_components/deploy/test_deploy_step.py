"""The deploy step's own rules, before any rollout: where KServe fetches the model (the
override, else the artifact's URI with KFP's ``minio://`` as ``s3://``), when it needs the
credentials of KFP's store and which ServiceAccount carries them, and every bad serving
parameter found before any work (the rollouts: tests/serving/deploy/)."""

from __future__ import annotations

import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kfp_components.deploy.step import (
    deploy,
    from_kfp_store,
    service_account_for,
    serving_problems,
    storage_uri_for,
)
from fmnist_kfp.settings.serving import KFP_STORE_SERVICE_ACCOUNT, ServingSettings

KFP_MODEL = "minio://mlpipeline/v2/artifacts/run/model"


def test_kserve_fetches_the_override_else_the_artifact_as_s3():
    assert storage_uri_for(KFP_MODEL) == "s3://mlpipeline/v2/artifacts/run/model"
    assert storage_uri_for(KFP_MODEL, "pvc://fmnist-data/best") == "pvc://fmnist-data/best"
    assert storage_uri_for("gs://bucket/model") == "gs://bucket/model"
    with pytest.raises(UserInputError, match="which KServe cannot fetch; set serving.storage_uri"):
        storage_uri_for("/mnt/fmnist/best")


def test_only_a_model_in_kfps_store_needs_its_credentials_and_service_account():
    assert from_kfp_store(KFP_MODEL) and not from_kfp_store(KFP_MODEL, "pvc://fmnist-data/m")
    assert not from_kfp_store("s3://bucket/model")
    default = ServingSettings()
    assert service_account_for(KFP_MODEL, default) == KFP_STORE_SERVICE_ACCOUNT
    assert service_account_for("s3://bucket/model", default) == ""
    own = ServingSettings.from_dict({"service_account": "mine"})
    assert service_account_for(KFP_MODEL, own) == "mine"


def test_every_bad_serving_parameter_is_reported_at_once():
    problems = serving_problems({}, "cloud", "fashion-mnist", 0.01, 50)
    assert problems == ["unknown backend 'cloud'; choose one of local, kubernetes"]
    assert serving_problems({}, "local", "fashion-mnist", 0.01, 50) == []
    # On the cluster our predictor needs an image: the step's input or serving.image.
    assert any("no predictor image" in p
               for p in serving_problems({}, "kubernetes", "fashion-mnist", 0.01, 50))
    assert not any("no predictor image" in p for p in serving_problems(
        {}, "kubernetes", "fashion-mnist", 0.01, 50, image="registry/fmnist:1"))


def test_bad_parameters_are_refused_before_the_data_is_read(tmp_path):
    with pytest.raises(UserInputError, match="invalid serving parameters"):
        deploy(model_dir=str(tmp_path / "none"), model_uri="", test_accuracy=0.9,
               data_dir=str(tmp_path / "no-data"), backend="cloud", model_name="fashion-mnist",
               tolerance=0.01, verification_images=50, serving={})
