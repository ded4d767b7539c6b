"""The ingested dataset on disk: sharded TFRecord files plus ``metadata.json``.

Layout of a dataset directory (the KFP ``Dataset`` artifact)::

    train-00000-of-00008.tfrecord ... test-00001-of-00002.tfrecord
    metadata.json

Each record is a ``tf.train.Example`` with ``image`` (784 raw uint8 bytes) and ``label`` (int64).
Shards let ``tf.data`` auto-shard by file when workers are many, and by data when they are few.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

METADATA_FILE = "metadata.json"
IMAGE_FEATURE = "image"
LABEL_FEATURE = "label"


def shard_names(split: str, num_shards: int) -> list[str]:
    return [f"{split}-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]


def write_split(
    out_dir: str, split: str, images: np.ndarray, labels: np.ndarray, num_shards: int
) -> list[str]:
    """Writes one split as ``num_shards`` contiguous TFRecord shards; returns their names."""
    import tensorflow as tf

    names = shard_names(split, num_shards)
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
    return names


def write_metadata(out_dir: str, metadata: dict[str, Any]) -> None:
    import tensorflow as tf

    with tf.io.gfile.GFile(f"{out_dir}/{METADATA_FILE}", "w") as handle:
        json.dump(metadata, handle, indent=2, sort_keys=True)


def read_metadata(data_dir: str) -> dict[str, Any]:
    import tensorflow as tf

    path = f"{data_dir}/{METADATA_FILE}"
    if not tf.io.gfile.exists(path):
        from fmnist.errors import UserInputError

        raise UserInputError(
            f"{data_dir} is not an ingested Fashion-MNIST dataset ({METADATA_FILE} is missing); "
            "run the ingestion step (fmnist-kfp ingest) first"
        )
    with tf.io.gfile.GFile(path) as handle:
        return json.load(handle)
