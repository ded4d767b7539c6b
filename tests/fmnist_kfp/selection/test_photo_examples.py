"""The selection report shows the chosen model on photos (issue 22): test images as sent, as
the model sees them after the server's preprocessing, and its answer with the probability."""

from __future__ import annotations

import base64
import io
import re

import numpy as np
from PIL import Image

from fmnist_kfp.dataset.official import CLASS_NAMES
from fmnist_kfp.images import decode_image
from fmnist_kfp.photos import variant
from fmnist_kfp.selection.photo_examples import EXAMPLE_VARIANTS, photo_examples
from fmnist_kfp.selection.report import html_report, markdown_report
from fmnist_kfp.training.export import load_pixels_predictor

CANDIDATE = {"model_type": "basic", "validation_accuracy": 0.9, "test_accuracy": 0.89,
             "parameters": 97802, "epochs": 1, "train_seconds": 1.0, "history": [],
             "final_metrics": {}, "hyperparameters": {}, "evaluation": [],
             "validation_per_class_accuracy": [0.9] * 10,
             "per_class_accuracy": [0.9] * 10,
             "confusion_matrix": np.eye(10, dtype=int).tolist()}


def test_the_report_shows_photos_as_sent_and_as_the_model_sees_them(exported_model):
    rng = np.random.default_rng(0)
    images = np.zeros((6, 28, 28), np.uint8)
    images[:, 4:24, 8:20] = rng.integers(120, 255, (6, 20, 12))
    labels = np.arange(6)
    examples = photo_examples(load_pixels_predictor(str(exported_model / "1")), images, labels)
    assert [e["variant"] for e in examples] == list(EXAMPLE_VARIANTS)
    for i, example in enumerate(examples):
        sent = variant(images[i], example["variant"], seed=i)
        np.testing.assert_array_equal(example["seen"], decode_image(sent, "x"))
        assert example["true"] == CLASS_NAMES[i]
        assert example["predicted"] in CLASS_NAMES and 0 <= example["probability"] <= 1
    assert examples[2]["size"] == [240, 240] and examples[1]["size"] == [420, 300]
    html = html_report([CANDIDATE], "basic", 5000, 10000, photos=examples)
    grid = re.search(r'alt="photos as sent and as the model sees them" '
                     r'src="data:image/png;base64,([^"]+)"', html)
    assert grid, "no photo grid in the HTML report"
    picture = Image.open(io.BytesIO(base64.b64decode(grid[1])))
    assert picture.width > picture.height > 200
    markdown = markdown_report([CANDIDATE], "basic", 5000, 10000, photos=examples)
    assert "## The chosen model on photos" in markdown
    for example in examples:
        assert (f"| {example['variant']} ({example['format']} {example['size'][0]}×"
                f"{example['size'][1]}) | {example['true']} | {example['predicted']} | "
                f"{100 * example['probability']:.1f}% |") in markdown
