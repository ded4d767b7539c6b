"""Selection's stored test-split probabilities are read only for the very model and the very
images they were computed for; anything else is scored again."""

from __future__ import annotations

import numpy as np
import pytest

from fmnist_kfp.selection.held_out_scores import (
    SCORES_DIR,
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


def test_without_the_file_or_for_a_remote_model_nothing_is_stored(stored):
    model_dir, images, _ = stored
    assert stored_probabilities("gs://bucket/model", images) is None
    import shutil

    shutil.rmtree(model_dir / SCORES_DIR)
    assert stored_probabilities(str(model_dir), images) is None


def test_the_stored_answers_leave_the_models_digest_as_training_made_it(stored,
                                                                       tmp_path_factory):
    """Lineage proves the selected model is the trained one by their content digests: the
    copy that holds selection's answers has the digest of the model without them."""
    import shutil

    from fmnist_kfp.lineage import content_digest

    model_dir, images, probabilities = stored
    trained = tmp_path_factory.mktemp("trained")
    shutil.copytree(model_dir / "1", trained / "1")
    assert content_digest(str(model_dir)) == content_digest(str(trained))
    store_probabilities(str(model_dir), images, probabilities[::-1].copy())
    assert content_digest(str(model_dir)) == content_digest(str(trained))


def test_only_uint8_images_with_one_row_each_are_stored(tmp_path):
    with pytest.raises(ValueError, match="uint8"):
        store_probabilities(str(tmp_path), np.zeros((2, 28, 28), np.float32), np.zeros((2, 10)))
    with pytest.raises(ValueError, match="one row per image"):
        store_probabilities(str(tmp_path), np.zeros((2, 28, 28), np.uint8), np.zeros((3, 10)))
