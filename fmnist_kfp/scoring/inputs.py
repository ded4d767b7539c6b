"""What a batch prediction scores, split into shards every worker computes alike.

A source is the ingested dataset's test split (``""``, or a dataset directory holding
``metadata.json``), a TFRecord file or an image file, or a directory (or ``gs://``/``s3://``
prefix) read recursively: ``*.tfrecord``/``*.tfrecords``/``*.tfr`` files are record files,
every other file (hidden ones aside) an image — a file that is not one becomes an error row.

Records are ``tf.train.Example`` with ``image`` (784 raw uint8 bytes, the ingested format, or an
encoded image) and an optional ``label`` (int64). Images are labelled when they sit in a folder
named after a class: its index (``0``–``9``) or its name (``Ankle boot``, ``ankle_boot``; the
``/`` of ``T-shirt/top`` as ``_`` or ``-``).

Sharding is by listing order, identical in every worker: images ``i`` go to shard
``i mod n``; record files go whole to shards when there are at least as many files as shards,
else each worker reads all of them and keeps records ``i mod n``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from fmnist_kfp.dataset.official import CLASS_NAMES
from fmnist_kfp.errors import UserInputError

RECORD_SUFFIXES = (".tfrecord", ".tfrecords", ".tfr")
DATASET_METADATA = "metadata.json"


@dataclass(frozen=True)
class Item:
    """One input: its id in the output, what to read, and its label when known."""

    id: str
    data: bytes | None = None  # an image file's bytes, or a record's image feature
    raw: bool = False  # ``data`` is 784 raw uint8 bytes (the ingested format)
    label: int | None = None
    error: str = ""  # why it cannot be read at all


@dataclass(frozen=True)
class Source:
    """A listed source: record files and image files, relative ids beside full paths."""

    root: str
    record_files: tuple[str, ...] = ()
    image_files: tuple[str, ...] = ()
    labelled_split: bool = False  # the ingested test split: every record has its label

    def describe(self) -> str:
        parts = []
        if self.record_files:
            parts.append(f"{len(self.record_files)} TFRecord file(s)")
        if self.image_files:
            parts.append(f"{len(self.image_files)} image file(s)")
        return f"{self.root}: " + (", ".join(parts) or "nothing")


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", name.lower())


_CLASS_FOLDERS = {_slug(name): index for index, name in enumerate(CLASS_NAMES)}
_CLASS_FOLDERS.update({str(index): index for index in range(len(CLASS_NAMES))})


def label_of(relative_path: str) -> int | None:
    """The class an image's folder names, if it names one."""
    parts = relative_path.split("/")
    return _CLASS_FOLDERS.get(_slug(parts[-2])) if len(parts) > 1 else None


def _join(root: str, name: str) -> str:
    return root.rstrip("/") + "/" + name


def list_source(source: str, data_dir: str) -> Source:
    """The files of ``source`` (``""``: the test split of the dataset at ``data_dir``); a
    source that does not exist or holds nothing is a ``UserInputError``."""
    import tensorflow as tf

    from fmnist_kfp.dataset.pipeline import split_files

    if not source or tf.io.gfile.exists(_join(source, DATASET_METADATA)):
        dataset = source or data_dir
        return Source(dataset, record_files=tuple(split_files(dataset, "test")),
                      labelled_split=True)
    if not tf.io.gfile.exists(source):
        raise UserInputError(
            f"batch prediction source {source!r} does not exist; give a directory or URI of "
            "images or TFRecord files, or leave it empty for the ingested test split")
    if not tf.io.gfile.isdir(source):
        root, _, name = source.rstrip("/").rpartition("/")
        files = [source]
    else:
        root = source.rstrip("/")
        files = []
        for directory, _, names in tf.io.gfile.walk(root):
            files += [_join(directory, name) for name in names if not name.startswith(".")]
    files.sort()
    records = tuple(f for f in files if f.lower().endswith(RECORD_SUFFIXES))
    images = tuple(f for f in files if not f.lower().endswith(RECORD_SUFFIXES))
    if not records and not images:
        raise UserInputError(f"batch prediction source {source!r} holds no files")
    return Source(root or ".", record_files=records, image_files=images)


def _relative(source: Source, path: str) -> str:
    prefix = source.root.rstrip("/") + "/"
    return path[len(prefix):] if path.startswith(prefix) else path.rsplit("/", 1)[-1]


def _record_item(item_id: str, serialized: bytes, labelled: bool) -> Item:
    import tensorflow as tf

    try:
        example = tf.train.Example.FromString(serialized)
    except Exception as error:  # a corrupt record is an error row, not a failed run
        return Item(item_id, error=f"not a tf.train.Example ({type(error).__name__})")
    features = example.features.feature
    if "image" not in features or not features["image"].bytes_list.value:
        return Item(item_id, error="the record has no 'image' bytes feature")
    data = features["image"].bytes_list.value[0]
    label = None
    if "label" in features and features["label"].int64_list.value:
        label = int(features["label"].int64_list.value[0])
    elif labelled:
        return Item(item_id, error="the record has no 'label'")
    raw = not data.startswith((b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"BM"))
    return Item(item_id, data=data, raw=raw, label=label)


def shard_items(source: Source, shard: int, num_shards: int) -> Iterator[Item]:
    """The items of shard ``shard`` of ``num_shards``, in listing order."""
    import tensorflow as tf

    if not 0 <= shard < num_shards:
        raise UserInputError(f"shard {shard} is not one of 0..{num_shards - 1}")
    whole_files = len(source.record_files) >= num_shards
    for position, path in enumerate(source.record_files):
        if whole_files and position % num_shards != shard:
            continue
        relative = _relative(source, path)
        try:
            for index, serialized in enumerate(tf.data.TFRecordDataset(path).as_numpy_iterator()):
                if whole_files or index % num_shards == shard:
                    yield _record_item(f"{relative}:{index}", serialized, source.labelled_split)
        except tf.errors.DataLossError as error:  # a truncated file: its rest is one error row
            yield Item(f"{relative}:rest", error=f"corrupt TFRecord file ({error.message})")
    for position, path in enumerate(source.image_files):
        if position % num_shards != shard:
            continue
        relative = _relative(source, path)
        try:
            with tf.io.gfile.GFile(path, "rb") as handle:
                data = handle.read()
        except (OSError, tf.errors.OpError) as error:
            yield Item(relative, error=f"cannot be read ({error})")
            continue
        yield Item(relative, data=data, label=label_of(relative))
