"""The ``tf.data`` input pipeline over an ingested dataset directory.

read shards → parse in vectorized batches → cache → shuffle → batch (global) → cast → prefetch,
with ``AutoShardPolicy.DATA`` so each worker of a ``MultiWorkerMirroredStrategy`` job reads its
share of every global batch.
"""

from __future__ import annotations

import json
import os
import sys
from types import FrameType

from fmnist_kfp.dataset.official import IMAGE_SIZE
from fmnist_kfp.dataset.records import (
    IMAGE_FEATURE,
    LABEL_FEATURE,
    is_local,
    read_local_split,
    read_metadata,
    verify_shards,
)

_PARSE_BATCH = 1024
# tf.data's autotuning is off (see _without_autotune): maps run this many calls at once, and
# two batches are prefetched.
_PARALLEL_CALLS = max(2, min(8, os.cpu_count() or 2))
_PREFETCH_BATCHES = 2


def _without_autotune(dataset):
    """``dataset`` with tf.data's autotuning off. Its optimisation thread sleeps out a period
    that grows to a minute, and destroying an iterator waits for it (a native stack shows the
    main thread in ``RootDataset::Iterator::~Iterator`` joining ``Model::OptimizeLoop``): with
    TensorFlow 2.21 on 2 cores, ``Model.fit`` returned 7-55 s after its last epoch in about a
    third of the runs. Fixed parallelism costs nothing measurable on these small maps."""
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)
# An audit trail of which splits were read: when set, every read of a split appends one JSON
# line (split, process, the reading function) to this file, in every process that inherits it
# (training jobs, trials). Tests use it to prove the test split is read only to report the
# chosen model.
SPLIT_READ_LOG_ENV = "FMNIST_SPLIT_READ_LOG"


def _record_read(split: str) -> None:
    path = os.environ.get(SPLIT_READ_LOG_ENV)
    if not path:
        return
    frame: FrameType | None = sys._getframe(2)  # noqa: SLF001 - who asked for the split
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    reader = "?" if frame is None else f"{frame.f_globals.get('__name__')}.{frame.f_code.co_name}"
    entry = {"split": split, "pid": os.getpid(), "reader": reader, "argv": sys.argv[:3]}
    with open(path, "a") as handle:
        handle.write(json.dumps(entry) + "\n")


def split_files(data_dir: str, split: str) -> list[str]:
    """The split's shards, verified against what ingestion recorded before anything reads them
    (a damaged shard is a ``DataSourceError`` naming it, never a shorter dataset)."""
    _record_read(split)
    return verify_shards(data_dir, split, read_metadata(data_dir))


def examples(data_dir: str, split: str, *, take: int = 0):
    """Yields decoded ``(image uint8 [28,28], label int32)`` pairs in file order.

    ``take`` keeps the first N (a smaller training set for quick runs); ``take=0`` means all.
    """
    return _parsed(split_files(data_dir, split), take)


def _parsed(files: list[str], take: int):
    import tensorflow as tf

    def parse(serialized):
        features = tf.io.parse_example(
            serialized,
            {
                IMAGE_FEATURE: tf.io.FixedLenFeature([], tf.string),
                LABEL_FEATURE: tf.io.FixedLenFeature([], tf.int64),
            },
        )
        images = tf.io.decode_raw(features[IMAGE_FEATURE], tf.uint8)
        images = tf.reshape(images, [-1, IMAGE_SIZE, IMAGE_SIZE])
        return images, tf.cast(features[LABEL_FEATURE], tf.int32)

    dataset = tf.data.TFRecordDataset(files)
    if take:
        dataset = dataset.take(take)
    return (
        dataset.batch(_PARSE_BATCH)
        .map(parse, num_parallel_calls=_PARALLEL_CALLS)
        .unbatch()
        .apply(_without_autotune)
    )


def to_model_inputs(images, labels):
    """uint8 [B,28,28] → float32 [B,28,28,1] pixel intensities 0–255 (the model rescales)."""
    import tensorflow as tf

    return tf.cast(images, tf.float32)[..., tf.newaxis], labels


def random_flip(images, labels):
    """Mirrors each image left-right with probability ½ (garments are symmetric)."""
    import tensorflow as tf

    return tf.image.random_flip_left_right(images), labels


def training_dataset(
    data_dir: str,
    split: str,
    global_batch_size: int,
    *,
    shuffle: bool,
    take: int = 0,
    seed: int | None = None,
    cache: bool = True,
    augment: bool = False,
    repeat: bool = False,
):
    """The dataset ``Model.fit``/``evaluate`` consume: global batches, sharded by DATA."""
    import tensorflow as tf

    dataset = examples(data_dir, split, take=take)
    if cache:
        dataset = dataset.cache()  # decoded uint8 in memory: later epochs skip file I/O
    if shuffle:
        dataset = dataset.shuffle(60_000, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        # One endless iterator: under MultiWorkerMirroredStrategy a new iterator per epoch
        # (and the workers agreeing where each one ends) costs seconds at every epoch boundary.
        dataset = dataset.repeat()
    dataset = dataset.batch(global_batch_size).map(
        to_model_inputs, num_parallel_calls=_PARALLEL_CALLS
    )
    if augment:
        dataset = dataset.map(random_flip, num_parallel_calls=_PARALLEL_CALLS)
    dataset = dataset.prefetch(_PREFETCH_BATCHES)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    options.deterministic = seed is not None
    return dataset.with_options(options)


def load_arrays(data_dir: str, split: str, *, take: int = 0):
    """The whole split as numpy arrays (for evaluation and in-memory benchmarks)."""
    import numpy as np

    files = split_files(data_dir, split)
    if all(is_local(path) for path in files):
        return read_local_split(files, take)
    images, labels = [], []
    for image_batch, label_batch in _parsed(files, take).batch(8192):
        images.append(image_batch.numpy())
        labels.append(label_batch.numpy())
    if not images:
        return np.zeros((0, IMAGE_SIZE, IMAGE_SIZE), np.uint8), np.zeros((0,), np.int32)
    return np.concatenate(images), np.concatenate(labels)


def validation_size(data_dir: str) -> int:
    """How many images the validation split holds (ingestion set them aside)."""
    return read_metadata(data_dir)["splits"]["validation"]["num_examples"]


def validation_dataset(data_dir: str, global_batch_size: int):
    """The ingested validation split, batched: what the evaluator replica scores."""
    return training_dataset(data_dir, "validation", global_batch_size, shuffle=False)
