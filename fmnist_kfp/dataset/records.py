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
import os
import struct
from typing import Any

import numpy as np

from fmnist_kfp.dataset.official import IMAGE_SIZE
from fmnist_kfp.errors import DataSourceError

METADATA_FILE = "metadata.json"
IMAGE_FEATURE = "image"
LABEL_FEATURE = "label"
_CHUNK = 1 << 20


def shard_names(split: str, num_shards: int) -> list[str]:
    return [f"{split}-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]


def is_local(path: str) -> bool:
    """A path on this machine's filesystem (a KFP artifact's mount included), not a URI."""
    return "://" not in path


def _open(path: str):
    if is_local(path):
        return open(path, "rb")
    import tensorflow as tf

    return tf.io.gfile.GFile(path, "rb")


def _exists(path: str) -> bool:
    if is_local(path):
        return os.path.exists(path)
    import tensorflow as tf

    return tf.io.gfile.exists(path)


def file_digest(path: str) -> tuple[int, str]:
    """(size in bytes, sha256) of a local file, or of one on any filesystem ``tf.io.gfile``
    reads."""
    digest, size = hashlib.sha256(), 0
    with _open(path) as handle:
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
    entry = metadata["splits"][split]
    recorded = entry.get("shards") or {name: {} for name in entry["files"]}
    paths = []
    for name, expected in recorded.items():
        path = f"{data_dir}/{name}"
        problem = ""
        if not _exists(path):
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
    path = f"{data_dir}/{METADATA_FILE}"
    if not _exists(path):
        from fmnist_kfp.errors import UserInputError

        raise UserInputError(
            f"{data_dir} is not an ingested Fashion-MNIST dataset ({METADATA_FILE} is missing); "
            "run the ingestion step (fmnist-kfp ingest) first"
        )
    with _open(path) as handle:
        return json.load(handle)


# Reading a local split without TensorFlow (whose import alone costs seconds in a step that
# only needs the images): TFRecord framing and the protobuf wire format of the one Example
# layout :func:`write_split` writes. Shards are read only after :func:`verify_shards` matched
# their sha256, so the per-record CRCs are not checked again.
def _varint(buffer: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buffer[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _fields(buffer: bytes):
    """``(field number, value)`` of a protobuf message: an int for varints, bytes for the
    length-delimited fields (the only wire types an Example of ours holds)."""
    at = 0
    value: int | bytes
    while at < len(buffer):
        key, at = _varint(buffer, at)
        if key & 7 == 0:
            value, at = _varint(buffer, at)
        elif key & 7 == 2:
            size, at = _varint(buffer, at)
            value, at = buffer[at:at + size], at + size
        else:
            raise DataSourceError(f"unexpected protobuf wire type {key & 7} in a record")
        yield key >> 3, value


def _example(record: bytes) -> tuple[bytes, int]:
    """``(image bytes, label)`` of a serialized Example {features {feature: map}}."""
    features = {}
    for _, entries in _fields(record):  # Example.features
        for _, entry in _fields(entries):  # Features.feature (a map entry)
            parts = dict(_fields(entry))  # key (1), Feature (2)
            features[parts[1].decode()] = dict(_fields(parts.get(2, b"")))
    image = dict(_fields(features[IMAGE_FEATURE][1]))[1]  # bytes_list (1) → value (1)
    values = features[LABEL_FEATURE][3]  # int64_list (3) → value (1), packed or not
    label = next(value for _, value in _fields(values))
    if isinstance(label, bytes):  # packed: the varints of the list
        label = _varint(label, 0)[0]
    return image, label


def read_local_split(paths: list[str], take: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(images uint8 [N, 28, 28], labels int32 [N])`` of local TFRecord shards, in file
    order (the first ``take`` when not 0), as ``tf.data`` would parse them."""
    images: list[bytes] = []
    labels: list[int] = []
    for path in paths:
        with open(path, "rb") as handle:
            data = handle.read()
        at = 0
        while at < len(data) and not (take and len(labels) >= take):
            (length,) = struct.unpack_from("<Q", data, at)
            image, label = _example(data[at + 12:at + 12 + length])
            images.append(image)
            labels.append(label)
            at += 12 + length + 4  # length, its CRC, the record, its CRC
    pixels = np.frombuffer(b"".join(images), np.uint8).reshape(len(images), IMAGE_SIZE, IMAGE_SIZE)
    return pixels, np.array(labels, np.int64).astype(np.int32)
