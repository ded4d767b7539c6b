"""What the components hand to KFP comes from their steps' dataclasses through one function
(``kfp_components/outputs.py``'s ``publish``): plain JSON values (an action is its string), and
the same output values, metadata, metrics and JSON records the steps have always written."""

from __future__ import annotations

import json

import pytest
from kfp.dsl import Artifact, Dataset, Metrics, Model

from fmnist_kfp.kfp_components.deploy import step as deploy_step
from fmnist_kfp.kfp_components.deploy.component import deploy_model
from fmnist_kfp.kfp_components.outputs import StepOutputs, publish
from fmnist_kfp.kfp_components.predict import step as predict_step
from fmnist_kfp.kfp_components.predict.component import predict_with_served_model
from fmnist_kfp.kfp_components.promote import step as promote_step
from fmnist_kfp.kfp_components.promote.component import promote_early
from fmnist_kfp.serving.deploy.blessing import bless, bless_early
from fmnist_kfp.serving.deploy.local_deployer import LocalDeployment, LocalPromotion
from fmnist_kfp.serving.deploy.rollout_result import (
    Action,
    RolloutResult,
    SupersededResult,
    Verification,
)

REPORT = {"ok": True, "accuracy": 0.91}


def test_publish_writes_plain_values(tmp_path):
    artifact, metrics = Artifact(uri=str(tmp_path / "a")), Metrics(uri=str(tmp_path / "m"))
    returned = publish(StepOutputs(metadata={"action": Action.CREATED, "n": [Action.FAILED]},
                                   record={"action": Action.PROMOTED}, metrics={"x": 0.5},
                                   returns=("u", Action.ROLLED_BACK, True)),
                       artifact=artifact, metrics=metrics)
    assert returned == ("u", "rolled_back", True) and type(returned[1]) is str
    assert artifact.metadata == {"action": "created", "n": ["failed"]}
    assert type(artifact.metadata["action"]) is str
    assert json.loads((tmp_path / "a").read_text()) == {"action": "promoted"}
    assert metrics.metadata == {"x": 0.5}
    assert json.loads((tmp_path / "m").read_text()) == {"x": 0.5}
    # Without a record no file is written at the artifact's path (ingest: a directory).
    publish(StepOutputs(metadata={"k": 1}), artifact=Artifact(uri=str(tmp_path / "b")))
    assert not (tmp_path / "b").exists()


def _kserve_result(action: Action) -> RolloutResult:
    return RolloutResult(
        action=action, blessing=bless(0.91, 0.90, 0.005), url="http://fm.ns.svc.cluster.local",
        external_url="http://fm.example.com", canary_url=None,
        verification=Verification.judged(REPORT, 0.91, 0.005), namespace="ns", name="fm",
        mode="Serverless", runtime="fmnist-predictor", storage_uri="s3://b/m",
        service_account=None, canary_traffic_percent=None, reason="why")


def _local_result(action: Action) -> LocalDeployment:
    return LocalDeployment(name="fm", action=action, url="http://127.0.0.1:8",
                           blessing=bless(0.91, None, 0.005), previous_url="",
                           verification=Verification.judged(REPORT, 0.91, 0.005))


def _inputs(tmp_path):
    model = Model(uri=str(tmp_path / "model"))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "saved_model.pb").write_bytes(b"graph")
    model.metadata.update({"test_accuracy": 0.91, "model_type": "basic"})
    dataset = Dataset(uri=str(tmp_path / "dataset"))
    (tmp_path / "dataset").mkdir()
    return model, dataset


@pytest.mark.parametrize(("result", "serves"), [
    (_local_result(Action.CREATED), True), (_local_result(Action.REJECTED), False),
    (_kserve_result(Action.PROMOTED), True), (_kserve_result(Action.UNCHANGED), True)],
    ids=["local created", "local rejected", "kserve promoted", "kserve unchanged"])
def test_the_deploy_component_outputs_its_deployments_record(result, serves, tmp_path,
                                                            monkeypatch):
    monkeypatch.setattr(deploy_step, "deploy", lambda **kwargs: result)
    model, dataset = _inputs(tmp_path)
    deployment, blessing = Artifact(uri=str(tmp_path / "d")), Metrics(uri=str(tmp_path / "b"))
    outputs = deploy_model.python_func(model=model, dataset=dataset, deployment=deployment,
                                       blessing=blessing, backend=result.BACKEND)
    assert tuple(outputs) == (result.url, result.action.value, serves)
    assert type(outputs.action) is str
    record = json.loads((tmp_path / "d").read_text())
    assert record == result.record() and record["action"] == result.action.value
    assert record["backend"] == result.BACKEND
    assert {k: v for k, v in deployment.metadata.items() if k != "lineage"} == \
        {k: v for k, v in record.items() if v is not None}
    served = deployment.metadata["lineage"]["served"]
    assert served["action"] == result.action.value and served["url"] == result.url
    assert served.get("storage_uri") == (result.storage_uri or None)
    assert (served["model"] == model.uri) == serves
    metrics = json.loads((tmp_path / "b").read_text())
    assert metrics == {"candidate_test_accuracy": 0.91, "blessed": 1,
                       **({"serving_test_accuracy": 0.90}
                          if result.blessing.serving_accuracy is not None else {})}


@pytest.mark.parametrize("result", [
    LocalPromotion(name="fm", action=Action.PROMOTED, url="http://127.0.0.1:8",
                   blessing=bless_early(0.93, 0.92, None, 0.005), previous_url="http://x",
                   verification=Verification.judged(REPORT, 0.93, 0.005), model_type="basic",
                   previous_model_type="batchnorm"),
    _kserve_result(Action.CREATED),
    SupersededResult(reason="a better one", storage_uri="s3://b/m")],
    ids=["local promoted", "kserve created", "kserve superseded"])
def test_the_promote_component_outputs_its_promotions_record(result, tmp_path, monkeypatch):
    promotion = promote_step.Promotion(result, model_type="basic", validation_accuracy=0.93,
                                       serving_since=12.5 if result.action.started_serving
                                       else None)
    monkeypatch.setattr(promote_step, "promote", lambda **kwargs: promotion)
    model, dataset = _inputs(tmp_path)
    artifact = Artifact(uri=str(tmp_path / "p"))
    outputs = promote_early.python_func(model=model, dataset=dataset, promotion=artifact)
    assert tuple(outputs) == (result.url or "", result.action.value)
    record = json.loads((tmp_path / "p").read_text())
    assert record == {**result.record(), "model_type": "basic", "validation_accuracy": 0.93,
                      "serving_since": promotion.serving_since}
    assert artifact.metadata == {k: v for k, v in record.items()
                                 if isinstance(v, str | int | float | bool)}


def test_the_predict_component_logs_the_nine_metrics(tmp_path, monkeypatch):
    measured = predict_step.Prediction(
        served_accuracy=0.9, selection_accuracy=0.91, agreement=0.99, near_ties=1,
        unexplained_disagreements=0, requests=13, failures=0, images=200, seconds=0.5)
    monkeypatch.setattr(predict_step, "predict_step", lambda **kwargs: measured)
    model, dataset = _inputs(tmp_path)
    metrics = Metrics(uri=str(tmp_path / "m"))
    assert predict_with_served_model.python_func(model=model, dataset=dataset, url="http://u",
                                                 metrics=metrics) == 0.9
    expected = {"served_accuracy": 0.9, "selection_accuracy": 0.91, "agreement": 0.99,
                "near_ties": 1, "unexplained_disagreements": 0, "requests": 13, "failures": 0,
                "images": 200, "seconds": 0.5}
    assert json.loads((tmp_path / "m").read_text()) == expected
    assert list(json.loads((tmp_path / "m").read_text())) == list(expected)


def test_the_ingest_component_puts_the_datasets_metadata_on_its_artifact(synthetic_idx,
                                                                         tmp_path):
    from fmnist_kfp.kfp_components.ingest.component import ingest_fashion_mnist

    directory, checksums = synthetic_idx
    dataset = Dataset(uri=str(tmp_path / "dataset"))
    ingest_fashion_mnist.python_func(dataset=dataset, data_source=str(directory),
                                     freshness_window="24h#1", expected_sha256=checksums,
                                     validation_examples=200)
    written = json.loads((tmp_path / "dataset" / "metadata.json").read_text())
    metadata = dataset.metadata
    assert list(metadata) == [
        "source", "verification", "sha256", "freshness_window", "format", "ingested_at",
        "splits", "validation_split", "train_examples", "validation_examples", "test_examples",
        "train_class_counts", "validation_class_counts", "test_class_counts", "lineage"]
    assert metadata["splits"] == ["train", "validation", "test"]
    assert metadata["freshness_window"] == "24h#1"
    assert (metadata["train_examples"], metadata["validation_examples"],
            metadata["test_examples"]) == (1800, 200, 500)
    assert metadata["validation_split"] == written["splits"]["validation"]["rule"]
    assert metadata["test_class_counts"] == written["splits"]["test"]["class_counts"]
    assert {key: metadata[key] for key in ("source", "verification", "sha256", "format",
                                           "ingested_at")} == \
        {key: written[key] for key in ("source", "verification", "sha256", "format",
                                       "ingested_at")}


def test_the_tune_component_with_tuning_off_hands_on_the_given_values(tmp_path):
    from fmnist_kfp.kfp_components.tune.component import tune_hyperparameters

    _, dataset = _inputs(tmp_path)
    search, metrics = Artifact(uri=str(tmp_path / "search")), Metrics(uri=str(tmp_path / "m"))
    report = Artifact(uri=str(tmp_path / "report"))
    outputs = tune_hyperparameters.python_func(
        dataset=dataset, search=search, metrics=metrics, report=report, enabled=False,
        learning_rate=0.01, batch_size=64, filters=16, dropout_rate=0.25)
    best = {"learning_rate": 0.01, "batch_size": 64, "filters": 16, "dropout_rate": 0.25}
    assert outputs.hyperparameters == best
    assert {k: v for k, v in search.metadata.items() if k != "lineage"} == {"tuned": False}
    assert search.metadata["lineage"]["parameters"]["best"] == best
    assert json.loads((tmp_path / "search" / "result.json").read_text()) == {"tuned": False}
    assert json.loads((tmp_path / "m").read_text()) == {}


def test_the_batch_component_records_its_results_metadata_and_metrics(tmp_path, monkeypatch):
    from fmnist_kfp.kfp_components.batch_predict import step as batch_step
    from fmnist_kfp.kfp_components.batch_predict.component import batch_predict

    result = batch_step.BatchPredictionResult(
        source="", rows=10, predicted=9, errors=1, labelled=10, files=1, accuracy=0.8,
        workers=2, backend="local", job_name="j", job_seconds=2.0,
        scoring_images_per_second=40.0)
    monkeypatch.setattr(batch_step, "batch_predict_step", lambda **kwargs: result)
    model, dataset = _inputs(tmp_path)
    predictions, metrics = Dataset(uri=str(tmp_path / "p")), Metrics(uri=str(tmp_path / "m"))
    batch_predict.python_func(model=model, dataset=dataset, predictions=predictions,
                              metrics=metrics, backend="local")
    assert {k: v for k, v in predictions.metadata.items() if k != "lineage"} == \
        result.artifact_metadata()
    assert predictions.metadata["lineage"]["parameters"]["source"] == "the ingested test split"
    assert json.loads((tmp_path / "m").read_text()) == {
        "rows": 10.0, "error_rows": 1.0, "images_per_second": 5.0, "accuracy": 0.8}
