"""The chosen model's probabilities on the held-out test split, kept beside it by selection.

Selection runs the chosen model on the whole test split once. The steps after it (deploy's
verification, predict) compare a server's answers with the model's own on test images; they
read them from here instead of loading TensorFlow and the model again. A stored row is used only
for the model it was computed with (the content digest of its SavedModel) and for the very image
it was computed on (the sha256 of the image's pixels): anything else, a model served early or
images from elsewhere, is scored in process as before (:func:`stored_probabilities` returns None).
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from fmnist_kfp.lineage import DERIVED_DIR, content_digest
from fmnist_kfp.training.export import SAVED_MODEL_VERSION

# Beside the SavedModel's version directory, among what the model artifact carries about the
# model rather than as part of it: its content digest (its lineage) is the model's alone.
SCORES_DIR = f"{DERIVED_DIR}/selection-test-probabilities"
_PROBABILITIES = "probabilities.npy"  # float32 [N, 10]
_IMAGE_DIGESTS = "image-sha256.npy"  # uint8 [N, 32]: each image's sha256
_MODEL_DIGEST = "model-digest.txt"  # lineage.content_digest of the SavedModel


def image_digests(images: np.ndarray) -> np.ndarray:
    """The sha256 of each image's uint8 pixels, ``[N, 32]`` bytes."""
    rows = np.ascontiguousarray(images).reshape(len(images), -1)
    return np.frombuffer(b"".join(hashlib.sha256(row.tobytes()).digest() for row in rows),
                         np.uint8).reshape(len(images), 32)


def _model_digest(model_dir: str) -> str:
    return content_digest(os.path.join(model_dir, SAVED_MODEL_VERSION))


def store_probabilities(model_dir: str, images: np.ndarray, probabilities: np.ndarray) -> str:
    """Writes ``probabilities`` (``[N, 10]``, the model's answers for uint8 ``images``) beside
    the SavedModel in ``model_dir``; returns the directory written (plain ``.npy`` files: the
    same model and images give the same bytes)."""
    if images.dtype != np.uint8 or len(images) != len(probabilities):
        raise ValueError("store the probabilities of uint8 images, one row per image")
    path = os.path.join(model_dir, SCORES_DIR)
    os.makedirs(path, exist_ok=True)
    np.save(os.path.join(path, _PROBABILITIES), probabilities.astype(np.float32))
    np.save(os.path.join(path, _IMAGE_DIGESTS), image_digests(images))
    with open(os.path.join(path, _MODEL_DIGEST), "w") as handle:
        handle.write(_model_digest(model_dir))
    return path


def stored_probabilities(model_dir: str, images: np.ndarray) -> np.ndarray | None:
    """The stored probabilities of ``images``, in their order, when every one of them was
    scored by this very model; else None (nothing stored, another model, another image)."""
    path = os.path.join(model_dir, SCORES_DIR)
    if "://" in model_dir or not os.path.isdir(path) or images.dtype != np.uint8:
        return None
    try:
        with open(os.path.join(path, _MODEL_DIGEST)) as handle:
            if handle.read().strip() != _model_digest(model_dir):
                return None
        digests = np.load(os.path.join(path, _IMAGE_DIGESTS))
        probabilities = np.load(os.path.join(path, _PROBABILITIES))
    except (OSError, ValueError):
        return None
    rows = {digest.tobytes(): index for index, digest in enumerate(digests)}
    wanted = [rows.get(digest.tobytes()) for digest in image_digests(images)]
    if any(index is None for index in wanted) or len(probabilities) != len(digests):
        return None
    return probabilities[np.array(wanted, dtype=np.int64)]
