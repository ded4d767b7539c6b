"""The batch prediction step: refused before any work when its source or workers are wrong, its
local backend's worker processes scoring the test split as selection does (the counts it
records), and its task in the compiled pipeline."""

from __future__ import annotations

import json

import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kfp_components.batch_predict.step import batch_predict_step
from fmnist_kfp.scoring.inputs import list_source
from tests import ROOT
from tests.fmnist_kfp.scoring.test_scoring import prediction_rows


def test_a_source_that_is_not_there_fails_before_any_work(tmp_path, synthetic_dataset):
    with pytest.raises(UserInputError, match="does not exist"):
        batch_predict_step(model_dir="m", data_dir=str(synthetic_dataset),
                           output_dir=str(tmp_path / "out"), source=str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserInputError, match="holds no files"):
        list_source(str(tmp_path / "empty"), "")
    with pytest.raises(UserInputError, match="batch_prediction_workers must be in"):
        batch_predict_step(model_dir="m", data_dir=str(synthetic_dataset),
                           output_dir=str(tmp_path / "out"), workers=0)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_two_worker_processes_score_the_test_split_as_the_selection_does(
        exported_model, synthetic_dataset, tmp_path):
    from fmnist_kfp.dataset.pipeline import load_arrays
    from fmnist_kfp.selection.evaluate import evaluate_predictions, predict_classes

    result = batch_predict_step(
        model_dir=str(exported_model), data_dir=str(synthetic_dataset),
        output_dir=str(tmp_path / "out"), workers=2)
    metadata, metrics = result.artifact_metadata(), result.metrics()
    images, labels = load_arrays(str(synthetic_dataset), "test")
    selection = evaluate_predictions(labels, predict_classes(str(exported_model / "1"), images))
    assert metadata["rows"] == metadata["labelled"] == len(labels) and metadata["errors"] == 0
    assert metadata["accuracy"] == round(selection.accuracy, 6) == metrics["accuracy"]
    assert metadata["files"] == ["predictions-00000-of-00002.jsonl",
                                 "predictions-00001-of-00002.jsonl"]
    assert metadata["images_per_second"] > 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["rows"] == len(labels) and summary["shards"] == 2
    ids = [row["id"] for row in prediction_rows(tmp_path / "out")]
    assert len(set(ids)) == len(labels)


def test_the_compiled_pipeline_scores_the_selected_model_after_select_and_caches_it():
    import yaml

    root = ROOT
    spec, platform = yaml.safe_load_all(
        (root / "compiled" / "fashion_mnist_pipeline.yaml").read_text())
    task = spec["root"]["dag"]["tasks"]["batch-predict"]
    assert task["cachingOptions"]["enableCache"] is True  # cached by its inputs
    assert task["inputs"]["artifacts"]["model"]["taskOutputArtifact"] == {
        "outputArtifactKey": "best_model", "producerTask": "select-best-model"}
    parameters = task["inputs"]["parameters"]
    assert parameters["batch_prediction_source"]["componentInputParameter"] == \
        "batch_prediction_source"
    assert parameters["batch_prediction_workers"]["componentInputParameter"] == \
        "batch_prediction_workers"
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert executors["exec-batch-predict"]["pvcMount"][0]["mountPath"] == "/mnt/fmnist"
    assert spec["root"]["outputDefinitions"]["artifacts"]["batch_predictions"]
