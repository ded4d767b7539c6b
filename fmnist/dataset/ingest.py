"""Ingestion: obtain and verify Fashion-MNIST, then write the sharded TFRecord dataset."""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from fmnist.dataset import records, sources
from fmnist.dataset.official import CLASS_NAMES, NUM_CLASSES
from fmnist.errors import UserInputError

log = logging.getLogger(__name__)

DEFAULT_SHARDS = {"train": 8, "test": 2}


def ingest(
    source: str | None,
    output_dir: str,
    *,
    expected_sha256: dict[str, str] | None = None,
    shards: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Reads the dataset from ``source`` (see :mod:`fmnist.dataset.sources`), verifies it and
    writes it to ``output_dir``. Returns the metadata also stored in ``metadata.json``."""
    shards = {**DEFAULT_SHARDS, **(shards or {})}
    for split, count in shards.items():
        if count < 1:
            raise UserInputError(f"{split} shard count must be at least 1, got {count}")
    started = time.time()
    resolved = sources.resolve_source(source)
    log.info("ingesting Fashion-MNIST from %s", sources.describe_source(resolved))
    raw = sources.load(resolved, expected_sha256)
    log.info("verified: %s", raw.verification)

    import tensorflow as tf

    tf.io.gfile.makedirs(output_dir)
    split_metadata: dict[str, Any] = {}
    for split, data in raw.splits.items():
        written = records.write_split(
            output_dir, split, data.images, data.labels, min(shards[split], len(data.labels) or 1)
        )
        files = list(written)
        counts = np.bincount(data.labels, minlength=NUM_CLASSES)
        split_metadata[split] = {
            "num_examples": int(len(data.labels)),
            "files": files,
            "shards": written,
            "class_counts": {name: int(n) for name, n in zip(CLASS_NAMES, counts, strict=True)},
        }
        log.info("wrote %s: %d examples in %d shards", split, len(data.labels), len(files))
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
