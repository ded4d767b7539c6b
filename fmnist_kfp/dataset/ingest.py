"""Ingestion: obtain and verify Fashion-MNIST, then write the sharded TFRecord dataset.

Three splits are written: ``train`` and ``validation`` from the official training files, and
``test``. The validation split is fixed and class-stratified: the last ``n / 10`` images of each
class in file order (:func:`stratified_validation_mask`). Training, tuning and selection choose on
it; the test split is read only to report the chosen model.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from fmnist_kfp.dataset import records, sources
from fmnist_kfp.dataset.official import CLASS_NAMES, NUM_CLASSES
from fmnist_kfp.errors import UserInputError
from fmnist_kfp.settings.data import DataSettings

log = logging.getLogger(__name__)

DEFAULT_SHARDS = {"train": 8, "validation": 1, "test": 2}
SPLITS = ("train", "validation", "test")
VALIDATION_RULE = "the last n/10 images of each class of the training files, in file order"


def stratified_validation_mask(labels: np.ndarray, validation_examples: int) -> np.ndarray:
    """A boolean mask over ``labels`` (file order) marking the validation split: the last
    ``validation_examples // 10`` images of each class (one more for the first
    ``validation_examples % 10`` classes). The same images on every run and every worker, each
    class equally represented; a class too small to give its share and keep some to train on is
    a ``UserInputError``."""
    mask = np.zeros(len(labels), bool)
    per_class, extra = divmod(validation_examples, NUM_CLASSES)
    for label in range(NUM_CLASSES):
        count = per_class + (label < extra)
        indices = np.flatnonzero(labels == label)
        if count and len(indices) <= count:
            raise UserInputError(
                f"validation_examples={validation_examples} takes {count} images of class "
                f"{label} ({CLASS_NAMES[label]}), but the training files hold {len(indices)}: "
                "give a validation split smaller than the training files")
        if count:
            mask[indices[-count:]] = True
    return mask


def ingest(
    source: str | None,
    output_dir: str,
    *,
    expected_sha256: dict[str, str] | None = None,
    shards: dict[str, int] | None = None,
    validation_examples: int = DataSettings().validation_examples,
) -> dict[str, Any]:
    """Reads the dataset from ``source`` (see :mod:`fmnist_kfp.dataset.sources`), verifies it and
    writes it to ``output_dir``, ``validation_examples`` of the training images as the
    ``validation`` split. Returns the metadata also stored in ``metadata.json``."""
    shards = {**DEFAULT_SHARDS, **(shards or {})}
    for split, count in shards.items():
        if count < 1:
            raise UserInputError(f"{split} shard count must be at least 1, got {count}")
    if validation_examples < 1:
        raise UserInputError(
            f"validation_examples must be at least 1, got {validation_examples}: training, "
            "tuning and selection choose on the validation split, never on the test split")
    started = time.time()
    resolved = sources.resolve_source(source)
    log.info("ingesting Fashion-MNIST from %s", sources.describe_source(resolved))
    raw = sources.load(resolved, expected_sha256)
    log.info("verified: %s", raw.verification)

    train = raw.splits["train"]
    in_validation = stratified_validation_mask(train.labels, validation_examples)
    arrays = {
        "train": (train.images[~in_validation], train.labels[~in_validation]),
        "validation": (train.images[in_validation], train.labels[in_validation]),
        "test": (raw.splits["test"].images, raw.splits["test"].labels),
    }

    import tensorflow as tf

    try:
        tf.io.gfile.makedirs(output_dir)
    except tf.errors.OpError as error:  # no filesystem for the scheme, a file in the way
        raise UserInputError(f"cannot write the dataset to {output_dir}: {error.message}; "
                             "give a local directory or a URI TensorFlow writes (gs://, "
                             "s3:// with tensorflow-io)") from None
    split_metadata: dict[str, Any] = {}
    for split, (images, labels) in arrays.items():
        written = records.write_split(
            output_dir, split, images, labels, min(shards[split], len(labels) or 1)
        )
        files = list(written)
        counts = np.bincount(labels, minlength=NUM_CLASSES)
        split_metadata[split] = {
            "num_examples": int(len(labels)),
            "files": files,
            "shards": written,
            "class_counts": {name: int(n) for name, n in zip(CLASS_NAMES, counts, strict=True)},
        }
        log.info("wrote %s: %d examples in %d shards", split, len(labels), len(files))
    split_metadata["validation"]["carved_from"] = "train"
    split_metadata["validation"]["rule"] = VALIDATION_RULE
    metadata = {
        "dataset": "fashion_mnist",
        "source": raw.source,
        "source_kind": raw.source_kind,
        "verification": raw.verification,
        "sha256": raw.checksums,
        "splits": split_metadata,
        "class_names": list(CLASS_NAMES),
        "image_shape": [28, 28],
        "format": "tfrecord(tf.train.Example: image=784 raw uint8 bytes, label=int64)",
        "ingested_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "ingest_seconds": round(time.time() - started, 2),
    }
    records.write_metadata(output_dir, metadata)
    return metadata
