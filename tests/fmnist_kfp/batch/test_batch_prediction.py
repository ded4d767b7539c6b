"""Batch prediction: reading inputs as the predictor does, shards, error rows, the local
backend's worker processes and the step's counts."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.images import decode_image
from fmnist_kfp.kfp_components.batch_predict.step import batch_predict_step
from fmnist_kfp.scoring.image_reader import BadInput, read_image
from fmnist_kfp.scoring.inputs import label_of, list_source, shard_items
from fmnist_kfp.scoring.scoring_job import BatchPredictionError, ScoringJobSpec
from fmnist_kfp.scoring.worker import score_shard
from tests import ROOT
from tests.fixtures import synthetic_split


def _png(array: np.ndarray, mode: str = "L", size: int = 28, fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).convert(mode).resize((size, size)).save(buffer, format=fmt)
    return buffer.getvalue()


def test_images_are_read_as_the_predictor_reads_them():
    """The model server's decoding path (fmnist_kfp/images.py): the dataset's own
    28×28 grayscale PNG gives its pixels back exactly, any other image the pixels the predictor
    computes for it; a file the predictor refuses is an error row with the same reason."""
    images, _ = synthetic_split(2, seed=3)
    assert np.array_equal(read_image(_png(images[0])), images[0].astype(np.float32))
    for fmt, mode in (("JPEG", "RGB"), ("WEBP", "RGB"), ("JPEG", "CMYK")):
        encoded = _png(images[1], mode=mode, size=64, fmt=fmt)
        assert np.array_equal(read_image(encoded), decode_image(encoded, "x"))
    with pytest.raises(BadInput, match="not a PNG, JPEG, GIF, BMP or WebP"):
        read_image(b"hello")
    with pytest.raises(BadInput, match="cannot be"):
        read_image(_png(images[0], size=200)[:300])


def test_class_folders_label_images():
    assert label_of("9/shoe.png") == 9
    assert label_of("Ankle boot/a.png") == label_of("ankle_boot/a.png") == 9
    assert label_of("t-shirt_top/a.png") == label_of("T-shirt-top/b.png") == 0
    assert label_of("a.png") is None and label_of("misc/a.png") is None


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory) -> Path:
    """12 images in class folders, a JPEG at another size, a truncated PNG, a text file and a
    hidden file."""
    root = tmp_path_factory.mktemp("images")
    images, labels = synthetic_split(12, seed=4)
    for i, (image, label) in enumerate(zip(images, labels, strict=True)):
        folder = root / str(int(label))
        folder.mkdir(exist_ok=True)
        (folder / f"{i:02d}.png").write_bytes(_png(image))
    (root / "unlabelled").mkdir()
    (root / "unlabelled" / "big.jpg").write_bytes(_png(images[0], "RGB", 90, "JPEG"))
    (root / "unlabelled" / "cut.png").write_bytes(_png(images[1], size=200)[:300])
    (root / "unlabelled" / "notes.txt").write_text("not an image")
    (root / ".DS_Store").write_bytes(b"\0")
    return root


def test_shards_split_the_inputs_exactly_once(image_dir, synthetic_dataset):
    for source, data_dir, count in ((str(image_dir), "", 15), ("", str(synthetic_dataset), 500)):
        listed = list_source(source, data_dir)
        everything = [item.id for item in shard_items(listed, 0, 1)]
        assert len(everything) == len(set(everything)) == count
        for shards in (2, 3):
            parts = [[item.id for item in shard_items(listed, s, shards)] for s in range(shards)]
            assert sorted(sum(parts, [])) == sorted(everything)
            assert all(parts)


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


def _rows(output: Path) -> list[dict]:
    return [json.loads(line) for part in sorted(output.glob("predictions-*.jsonl"))
            for line in part.read_text().splitlines()]


def test_bad_inputs_become_error_rows_and_good_ones_match_the_model(image_dir, exported_model,
                                                                    tmp_path):
    from fmnist_kfp.training.export import load_pixels_predictor

    summary = score_shard(model_dir=str(exported_model), source=str(image_dir), data_dir="",
                          output_dir=str(tmp_path), shard=0, num_shards=1, batch_size=5)
    assert summary["rows"] == 15 and summary["errors"] == 2 and summary["predicted"] == 13
    assert summary["labelled"] == 12
    rows = {row["id"]: row for row in _rows(tmp_path)}
    assert "not a PNG, JPEG, GIF, BMP or WebP" in rows["unlabelled/notes.txt"]["error"]
    assert "cannot be" in rows["unlabelled/cut.png"]["error"]  # read, or decoded
    assert "label" not in rows["unlabelled/big.jpg"] and "error" not in rows["unlabelled/big.jpg"]
    # The 28×28 PNGs are the model's own answers to their pixels.
    predict = load_pixels_predictor(str(exported_model / "1"))
    for name, row in rows.items():
        if name.startswith("unlabelled"):
            continue
        pixels = np.asarray(Image.open(image_dir / name), dtype=np.float32)[np.newaxis]
        expected = predict(pixels)["probabilities"].numpy()[0]
        assert row["class"] == int(np.argmax(expected)) and row["label"] == int(name[0])
        assert np.allclose(row["probabilities"], expected, atol=1e-6)
        assert abs(sum(row["probabilities"]) - 1) < 1e-4


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
    ids = [row["id"] for row in _rows(tmp_path / "out")]
    assert len(set(ids)) == len(labels)


@pytest.mark.slow
def test_a_worker_that_fails_fails_the_job_naming_its_shard(synthetic_dataset, tmp_path):
    from fmnist_kfp.batch.local_scorer import LocalBatchScorer

    spec = ScoringJobSpec(name="fmnist-batch-test", model_dir=str(tmp_path / "no-model"),
                          data_dir=str(synthetic_dataset), output_dir=str(tmp_path / "out"),
                          num_shards=1)
    with pytest.raises(BatchPredictionError, match="shard 0 failed with exit code 1") as caught:
        LocalBatchScorer(timeout_seconds=300).run(spec)
    assert "no SavedModel" in str(caught.value)


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
