"""The trainer learns, exports both serving signatures, and rejects bad hyperparameters."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from PIL import Image

from fmnist_kfp.dataset.pipeline import load_arrays
from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kfp_components.train.step import training_backend
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.training_job import TrainingJobSpec
from tests.launcher_harness import job_spec

# The launcher waits on worker processes: a regression that hangs fails in bounded time. The
# bound covers the module's training fixture, so the tests that use it have a larger one.
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def trained(synthetic_dataset, tmp_path_factory):
    """One single-worker job: batchnorm CNN, 2 epochs on the synthetic data."""
    root = tmp_path_factory.mktemp("trained")
    spec = job_spec(root, synthetic_dataset, name="test-single",
                    config=TrainingConfig(model_type="batchnorm", epochs=2, batch_size=32))
    outcome = training_backend("local", {}).run(spec)
    return root / "model", outcome


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_training_learns_and_reports_each_epoch(trained):
    model_dir, outcome = trained
    result = outcome.result
    assert [entry["epoch"] for entry in result["history"]] == [1, 2]
    assert result["history"][-1]["loss"] < result["history"][0]["loss"]
    assert result["final_metrics"]["accuracy"] > 0.9
    assert 90_000 < result["parameters"] < 100_000
    assert result["replicas"] == 1 and result["global_batch_size"] == 32
    assert outcome.restarts == 0
    lines = (model_dir / "history.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2]
    # The checkpoint goes once training is done: nothing for a later job to resume from.
    assert not [p for p in (model_dir / "backup").rglob("*") if p.is_file()]


def _encode(array: np.ndarray, fmt: str, size: int, mode: str = "L") -> bytes:
    image = Image.fromarray(array).resize((size, size)).convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_exported_model_serves_pixels_and_encoded_images_alike(trained, synthetic_dataset):
    import tensorflow as tf

    model_dir, _ = trained
    images, labels = load_arrays(str(synthetic_dataset), "test", take=64)
    loaded = tf.saved_model.load(str(model_dir / "1"))
    by_pixels = loaded.signatures["serving_pixels"](pixels=tf.constant(images, tf.float32))
    assert (by_pixels["class_index"].numpy() == labels).mean() > 0.9
    np.testing.assert_allclose(by_pixels["probabilities"].numpy().sum(axis=1), 1.0, atol=1e-4)

    # serving_default takes encoded bytes of any size and colour: PNG 28×28 gives the same
    # answer as the pixels; JPEG at 112×112 RGB is decoded, greyed and resized in the graph.
    png = [_encode(image, "PNG", 28) for image in images]
    by_png = loaded.signatures["serving_default"](image_bytes=tf.constant(png))
    np.testing.assert_array_equal(by_png["class_index"].numpy(), by_pixels["class_index"].numpy())
    jpeg = [_encode(image, "JPEG", 112, "RGB") for image in images[:16]]
    by_jpeg = loaded.signatures["serving_default"](image_bytes=tf.constant(jpeg))
    assert (by_jpeg["class_index"].numpy() == labels[:16]).mean() >= 0.75
    names = by_png["class_name"].numpy()
    assert names[0].decode() in ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
                                 "Shirt", "Sneaker", "Bag", "Ankle boot")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model_type": "resnet"}, "unknown model type 'resnet'"),
        ({"epochs": 0}, "epochs must be a positive integer"),
        ({"batch_size": -8}, "batch_size must be a positive integer"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"dropout_rate": 1.0}, "dropout_rate"),
        ({"precision": "fp8"}, "unknown precision"),
    ],
)
def test_bad_hyperparameters_fail_before_any_work(changes, message, tmp_path):
    """A job spec is checked as it is made: a bad one never exists to be run."""
    with pytest.raises(UserInputError, match=message):
        TrainingJobSpec(
            name="bad", config=TrainingConfig(**changes), data_dir=str(tmp_path),
            export_dir=str(tmp_path / "m"), work_dir=str(tmp_path / "w"),
        )
    assert not (tmp_path / "w").exists()


def test_unknown_backend_is_rejected():
    with pytest.raises(UserInputError, match="unknown training backend 'slurm'"):
        training_backend("slurm", {})


def test_the_trainer_runs_several_steps_per_call_unless_profiling():
    """Several steps per call amortize Keras' Python work between steps; a profile counts
    steps by the batch hooks, which then run once per call, so profiling runs one."""
    from fmnist_kfp.training.trainer import STEPS_PER_EXECUTION, steps_per_execution

    assert steps_per_execution(TrainingConfig()) == STEPS_PER_EXECUTION > 1
    assert steps_per_execution(TrainingConfig(profile_steps=3)) == 1
