"""Selection's stored test-split probabilities are read only for the very model and the very
images they were computed for; anything else is scored again."""

from __future__ import annotations

import numpy as np
import pytest

from fmnist_kfp.selection.test_scores import (
    SCORES_FILE,
    store_probabilities,
    stored_probabilities,
)


@pytest.fixture
def stored(tmp_path):
    """A model directory (a SavedModel's files: their bytes are all the digest reads) with the
    probabilities of 20 distinct images stored beside it."""
    (tmp_path / "1" / "variables").mkdir(parents=True)
    (tmp_path / "1" / "saved_model.pb").write_bytes(b"graph")
    (tmp_path / "1" / "variables" / "variables.data-00000-of-00001").write_bytes(b"weights")
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (20, 28, 28), dtype=np.uint8)
    probabilities = rng.dirichlet(np.ones(10), 20).astype(np.float32)
    store_probabilities(str(tmp_path), images, probabilities)
    return tmp_path, images, probabilities


def test_the_rows_of_the_images_asked_for_come_back_in_their_order(stored):
    model_dir, images, probabilities = stored
    order = [7, 0, 19, 3]
    found = stored_probabilities(str(model_dir), images[order])
    np.testing.assert_array_equal(found, probabilities[order])
    np.testing.assert_array_equal(stored_probabilities(str(model_dir), images), probabilities)


def test_another_model_in_the_same_directory_is_scored_again(stored):
    model_dir, images, _ = stored
    (model_dir / "1" / "variables" / "variables.data-00000-of-00001").write_bytes(b"retrained")
    assert stored_probabilities(str(model_dir), images) is None


def test_an_image_selection_did_not_score_is_scored_again(stored):
    model_dir, images, _ = stored
    changed = images[:5].copy()
    changed[2, 14, 14] ^= 1  # one pixel
    assert stored_probabilities(str(model_dir), changed) is None
    assert stored_probabilities(str(model_dir), images[:5].astype(np.float32)) is None


def test_without_the_file_or_for_a_remote_model_nothing_is_stored(stored, tmp_path):
    model_dir, images, _ = stored
    assert stored_probabilities("gs://bucket/model", images) is None
    (model_dir / SCORES_FILE).unlink()
    assert stored_probabilities(str(model_dir), images) is None


def test_only_uint8_images_with_one_row_each_are_stored(tmp_path):
    with pytest.raises(ValueError, match="uint8"):
        store_probabilities(str(tmp_path), np.zeros((2, 28, 28), np.float32), np.zeros((2, 10)))
    with pytest.raises(ValueError, match="one row per image"):
        store_probabilities(str(tmp_path), np.zeros((2, 28, 28), np.uint8), np.zeros((3, 10)))
