"""The ingested dataset on disk: sharded TFRecord files plus ``metadata.json``.

Layout of a dataset directory (the KFP ``Dataset`` artifact)::

    train-00000-of-00008.tfrecord ... test-00001-of-00002.tfrecord
    metadata.json

Each record is a ``tf.train.Example`` with ``image`` (784 raw uint8 bytes) and ``label`` (int64).
Shards let ``tf.data`` auto-shard by file when workers are many, and by data when they are few.

``metadata.json`` records each shard's size, sha256 and example count, and every reader checks
them before it reads (:func:`verify_shards`): TFRecord's own per-record CRCs catch a garbled
record only when it is read, and a shard cut at a record boundary reads as a shorter, valid one
— training would silently run on less data.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from fmnist_kfp.errors import DataSourceError

METADATA_FILE = "metadata.json"
IMAGE_FEATURE = "image"
LABEL_FEATURE = "label"
_CHUNK = 1 << 20


def shard_names(split: str, num_shards: int) -> list[str]:
    return [f"{split}-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]


def file_digest(path: str) -> tuple[int, str]:
    """(size in bytes, sha256) of a file on any filesystem ``tf.io.gfile`` reads."""
    import tensorflow as tf

    digest, size = hashlib.sha256(), 0
    with tf.io.gfile.GFile(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def write_split(
    out_dir: str, split: str, images: np.ndarray, labels: np.ndarray, num_shards: int
) -> dict[str, dict[str, Any]]:
    """Writes one split as ``num_shards`` contiguous TFRecord shards; returns each shard's
    name → examples, bytes and sha256 (what :func:`verify_shards` checks)."""
    import tensorflow as tf

    names = shard_names(split, num_shards)
    shards: dict[str, dict[str, Any]] = {}
    bounds = np.linspace(0, len(labels), num_shards + 1).astype(int)
    for name, start, stop in zip(names, bounds[:-1], bounds[1:], strict=True):
        with tf.io.TFRecordWriter(f"{out_dir}/{name}") as writer:
            for image, label in zip(images[start:stop], labels[start:stop], strict=True):
                example = tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            IMAGE_FEATURE: tf.train.Feature(
                                bytes_list=tf.train.BytesList(value=[image.tobytes()])
                            ),
                            LABEL_FEATURE: tf.train.Feature(
                                int64_list=tf.train.Int64List(value=[int(label)])
                            ),
                        }
                    )
                )
                writer.write(example.SerializeToString())
        size, sha256 = file_digest(f"{out_dir}/{name}")
        shards[name] = {"examples": int(stop - start), "bytes": size, "sha256": sha256}
    return shards


def verify_shards(data_dir: str, split: str, metadata: dict[str, Any]) -> list[str]:
    """The split's shard paths, each checked against the size and sha256 ingestion recorded;
    a missing, truncated or altered shard raises ``DataSourceError`` naming it.

    Datasets ingested before shards were recorded carry only their file names: those are
    checked for existence."""
    import tensorflow as tf

    entry = metadata["splits"][split]
    recorded = entry.get("shards") or {name: {} for name in entry["files"]}
    paths = []
    for name, expected in recorded.items():
        path = f"{data_dir}/{name}"
        problem = ""
        if not tf.io.gfile.exists(path):
            problem = "is missing"
        elif expected:
            size, sha256 = file_digest(path)
            if size != expected["bytes"]:
                problem = (f"has {size} bytes where ingestion wrote {expected['bytes']} "
                           f"({expected['examples']} examples): it is truncated or overwritten")
            elif sha256 != expected["sha256"]:
                problem = (f"has sha256 {sha256} where ingestion wrote {expected['sha256']}: "
                           "its contents are corrupted")
        if problem:
            raise DataSourceError(
                f"{split} shard {name} of the dataset in {data_dir} {problem}. Training and "
                "evaluation read only what ingestion verified; ingest the data again (a run "
                "with caching off, or in the next freshness window)")
        paths.append(path)
    return paths


def write_metadata(out_dir: str, metadata: dict[str, Any]) -> None:
    import tensorflow as tf

    with tf.io.gfile.GFile(f"{out_dir}/{METADATA_FILE}", "w") as handle:
        json.dump(metadata, handle, indent=2, sort_keys=True)


def read_metadata(data_dir: str) -> dict[str, Any]:
    import tensorflow as tf

    path = f"{data_dir}/{METADATA_FILE}"
    if not tf.io.gfile.exists(path):
        from fmnist_kfp.errors import UserInputError

        raise UserInputError(
            f"{data_dir} is not an ingested Fashion-MNIST dataset ({METADATA_FILE} is missing); "
            "run the ingestion step (fmnist-kfp ingest) first"
        )
    with tf.io.gfile.GFile(path) as handle:
        return json.load(handle)
