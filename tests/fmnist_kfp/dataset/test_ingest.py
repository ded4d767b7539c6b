"""Ingestion: verification, clear failures, the written dataset and its metadata."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import socket
import struct

import numpy as np
import pytest

from fmnist_kfp.dataset import sources
from fmnist_kfp.dataset.idx import encode_idx
from fmnist_kfp.dataset.ingest import ingest
from fmnist_kfp.dataset.official import CLASS_NAMES, OFFICIAL_FILES
from fmnist_kfp.dataset.pipeline import load_arrays, training_dataset
from fmnist_kfp.errors import DataSourceError
from tests.conftest import needs_tfds
from tests.fixtures import synthetic_split, write_idx_dir


def test_ingested_dataset_has_metadata_and_round_trips_the_pixels(synthetic_idx, synthetic_dataset):
    _, checksums = synthetic_idx
    metadata = json.loads((synthetic_dataset / "metadata.json").read_text())
    assert metadata["sha256"] == checksums
    # conftest sets 200 of the 2,000 training images aside as the validation split.
    assert metadata["splits"]["train"]["num_examples"] == 1800
    assert metadata["splits"]["validation"]["num_examples"] == 200
    assert metadata["splits"]["test"]["num_examples"] == 500
    counts = metadata["splits"]["train"]["class_counts"]
    assert set(counts) == set(CLASS_NAMES) and sum(counts.values()) == 1800
    assert set(metadata["splits"]["validation"]["class_counts"].values()) == {20}
    assert len(metadata["splits"]["train"]["files"]) == 8
    assert "local IDX directory" == metadata["source"]  # no machine path in metadata

    images, labels = load_arrays(str(synthetic_dataset), "test")
    expected_images, expected_labels = synthetic_split(500, 2)
    np.testing.assert_array_equal(images, expected_images)
    np.testing.assert_array_equal(labels, expected_labels)


def test_steps_read_a_local_split_without_tensorflow_exactly_as_tf_data_parses_it(
        synthetic_dataset):
    """Deploy and predict only need test images: they read the shards without importing
    TensorFlow (seconds a step), and get what tf.data's parse gives, every split, ``take``
    included."""
    import subprocess
    import sys

    from fmnist_kfp.dataset.pipeline import examples

    for split, take in (("train", 0), ("validation", 0), ("test", 0), ("test", 37)):
        parsed = list(examples(str(synthetic_dataset), split, take=take).batch(10_000))
        images, labels = load_arrays(str(synthetic_dataset), split, take=take)
        np.testing.assert_array_equal(images, parsed[0][0].numpy())
        np.testing.assert_array_equal(labels, parsed[0][1].numpy())
        assert labels.dtype == parsed[0][1].numpy().dtype and images.dtype == np.uint8
    probe = ("import sys; from fmnist_kfp.dataset.pipeline import load_arrays; "
             f"images, _ = load_arrays({str(synthetic_dataset)!r}, 'test'); "
             "print(len(images), 'tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["500", "False"]


def test_the_validation_split_is_the_last_tenth_of_each_class_in_file_order(synthetic_dataset):
    """Fixed and class-stratified: the same images on every ingestion, each class equally
    represented, none of them in the training split."""
    images, labels = synthetic_split(2000, 1)  # the training files, in file order
    validation = np.zeros(len(labels), bool)
    for label in range(10):
        validation[np.flatnonzero(labels == label)[-20:]] = True
    train_images, train_labels = load_arrays(str(synthetic_dataset), "train")
    val_images, val_labels = load_arrays(str(synthetic_dataset), "validation")
    np.testing.assert_array_equal(val_images, images[validation])
    np.testing.assert_array_equal(val_labels, labels[validation])
    np.testing.assert_array_equal(train_images, images[~validation])
    np.testing.assert_array_equal(train_labels, labels[~validation])


def test_a_validation_split_a_class_cannot_give_is_refused_before_writing(synthetic_idx,
                                                                         tmp_path):
    from fmnist_kfp.errors import UserInputError

    directory, checksums = synthetic_idx
    with pytest.raises(UserInputError, match=r"validation_examples=2000 takes 200 images of "
                                             r"class \d \(.*\), but the training files hold"):
        ingest(str(directory), str(tmp_path / "out"), expected_sha256=checksums,
               validation_examples=2000)
    assert not (tmp_path / "out").exists()
    with pytest.raises(UserInputError, match="validation_examples must be at least 1"):
        ingest(str(directory), str(tmp_path / "out"), validation_examples=0)


def test_an_output_tensorflow_cannot_write_is_an_error_naming_it(synthetic_idx):
    from fmnist_kfp.errors import UserInputError

    directory, checksums = synthetic_idx
    with pytest.raises(UserInputError, match="cannot write the dataset to ftp://x/out: File "
                                             "system scheme 'ftp' not implemented"):
        ingest(str(directory), "ftp://x/out", expected_sha256=checksums,
               validation_examples=200)


def test_training_dataset_yields_global_batches_of_float_pixels(synthetic_dataset):
    dataset = training_dataset(str(synthetic_dataset), "train", 64, shuffle=True, seed=1, take=640)
    batches = list(dataset)
    assert len(batches) == 10
    images, labels = batches[0]
    assert images.shape == (64, 28, 28, 1) and images.dtype.name == "float32"
    assert float(images.numpy().max()) > 1.0  # intensities 0-255; the model rescales
    assert labels.dtype.name == "int32"


def _copy(synthetic_idx, tmp_path):
    directory, checksums = synthetic_idx
    target = tmp_path / "idx"
    shutil.copytree(directory, target)
    return target, checksums


def test_missing_file_names_the_file(synthetic_idx, tmp_path):
    directory, checksums = _copy(synthetic_idx, tmp_path)
    (directory / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataSourceError, match="t10k-labels-idx1-ubyte.gz is missing"):
        ingest(str(directory), str(tmp_path / "out"), expected_sha256=checksums)


def test_corrupted_file_fails_the_checksum(synthetic_idx, tmp_path):
    directory, checksums = _copy(synthetic_idx, tmp_path)
    path = directory / "train-images-idx3-ubyte.gz"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(DataSourceError, match="train-images-idx3-ubyte.gz: sha256 .* not match"):
        ingest(str(directory), str(tmp_path / "out"), expected_sha256=checksums)
    assert not (tmp_path / "out" / "metadata.json").exists()


def test_files_that_are_not_the_official_release_are_rejected_by_default(synthetic_idx, tmp_path):
    directory, _ = synthetic_idx
    with pytest.raises(DataSourceError, match="does not match the official"):
        ingest(str(directory), str(tmp_path / "out"))


def test_truncated_idx_payload_is_reported(tmp_path):
    images, labels = synthetic_split(100, 3)
    checksums = write_idx_dir(tmp_path / "idx", (images, labels), (images, labels))
    path = tmp_path / "idx" / "t10k-images-idx3-ubyte.gz"
    payload = gzip.decompress(path.read_bytes())[:-784]
    path.write_bytes(gzip.compress(payload))
    checksums["t10k-images-idx3-ubyte.gz"] = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(DataSourceError, match="truncated or corrupted"):
        ingest(str(tmp_path / "idx"), str(tmp_path / "out"), expected_sha256=checksums)


def test_unreachable_mirror_says_what_to_do_offline(tmp_path):
    with socket.socket() as sock:  # a loopback port with nothing listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(DataSourceError, match="FASHION_MNIST_DIR"):
        ingest(f"http://127.0.0.1:{port}/fashion", str(tmp_path / "out"))


@needs_tfds
def test_tfds_failure_says_what_to_do_offline(monkeypatch, tmp_path):
    import tensorflow_datasets as tfds

    def offline(*args, **kwargs):
        raise ConnectionError("Failed to resolve 'storage.googleapis.com'")

    monkeypatch.setattr(tfds, "builder", offline)
    with pytest.raises(DataSourceError, match="TensorFlow Datasets could not .*FASHION_MNIST_DIR"):
        ingest("tfds", str(tmp_path / "out"))


@needs_tfds
def test_tfds_source_is_ingested_through_the_tfds_api(tmp_path):
    import tensorflow_datasets as tfds

    # mock_data stands in for the download; the probe of the download host must not go out.
    with tfds.testing.mock_data(num_examples=100), pytest.MonkeyPatch.context() as patch:
        patch.setattr(sources, "unreachable", lambda url: None)
        metadata = ingest("tfds", str(tmp_path / "out"), validation_examples=1)
    assert metadata["source_kind"] == "tfds"
    assert metadata["source"].startswith("tfds:fashion_mnist/")
    assert metadata["splits"]["train"]["num_examples"] == 99  # one set aside for validation
    assert metadata["splits"]["validation"]["num_examples"] == 1
    images, _ = load_arrays(str(tmp_path / "out"), "train")
    assert images.shape == (99, 28, 28)


def test_source_defaults_to_the_environment_then_tfds(monkeypatch):
    monkeypatch.delenv(sources.DATA_DIR_ENV, raising=False)
    assert sources.resolve_source("") == "tfds"
    monkeypatch.setenv(sources.DATA_DIR_ENV, "/data/fmnist")
    assert sources.resolve_source("") == "/data/fmnist"
    assert sources.resolve_source("gs://bucket/fmnist") == "gs://bucket/fmnist"


def test_logged_source_names_hide_paths_and_credentials():
    assert sources.describe_source("/home/me/data") == "local IDX directory"
    assert sources.describe_source("https://user:secret@mirror.example/fm") == (
        "https://mirror.example/fm"
    )


def test_real_files_match_the_official_checksums(real_data_dir):
    for official in OFFICIAL_FILES:
        digest = hashlib.sha256((real_data_dir / official.name).read_bytes()).hexdigest()
        assert digest == official.sha256, official.name


# --- Damaged IDX files: each fails ingestion naming the file, before anything is written ----


def _with_file(tmp_path, name: str, compressed: bytes, train=None, test=None):
    """The four IDX files (small synthetic splits) with ``name`` replaced by ``compressed``;
    the digests the caller passes accept the replacement, so only the decoding can object."""
    train = train or synthetic_split(100, 3)
    test = test or synthetic_split(50, 4)
    directory = tmp_path / "idx"
    checksums = write_idx_dir(directory, train, test)
    if compressed:
        (directory / name).write_bytes(compressed)
        checksums[name] = hashlib.sha256(compressed).hexdigest()
    return directory, checksums


def _ingest_fails(tmp_path, directory, checksums, message: str) -> None:
    with pytest.raises(DataSourceError, match=message):
        ingest(str(directory), str(tmp_path / "out"), expected_sha256=checksums)
    assert not (tmp_path / "out" / "metadata.json").exists()


def test_a_file_that_is_not_gzip_is_named(tmp_path):
    directory, checksums = _with_file(tmp_path, "t10k-labels-idx1-ubyte.gz",
                                      b"<html>404 Not Found</html>")
    _ingest_fails(tmp_path, directory, checksums,
                  "t10k-labels-idx1-ubyte.gz: not a valid gzip file")


def test_an_idx_file_with_a_foreign_magic_number_is_named(tmp_path):
    floats = struct.pack(">IIII", 0x0D03, 1, 28, 28) + bytes(28 * 28 * 4)  # float32 images
    directory, checksums = _with_file(tmp_path, "train-images-idx3-ubyte.gz",
                                      gzip.compress(floats))
    _ingest_fails(tmp_path, directory, checksums,
                  r"train-images-idx3-ubyte.gz: not an IDX file of unsigned bytes \(magic 3331")


def test_swapped_images_and_labels_are_named(tmp_path):
    images, labels = synthetic_split(50, 4)
    directory, checksums = _with_file(tmp_path, "t10k-labels-idx1-ubyte.gz",
                                      gzip.compress(encode_idx(images)))
    _ingest_fails(tmp_path, directory, checksums,
                  r"t10k-labels-idx1-ubyte.gz: holds images \(IDX magic 2051\) where labels")


def test_more_images_than_labels_names_both_files(tmp_path):
    images, labels = synthetic_split(100, 3)
    directory, checksums = _with_file(tmp_path, "", b"", train=(images, labels[:99]))
    _ingest_fails(tmp_path, directory, checksums,
                  "train-images-idx3-ubyte.gz holds 100 images but train-labels-idx1-ubyte.gz "
                  "holds 99 labels")


def test_labels_above_nine_are_named(tmp_path):
    images, labels = synthetic_split(50, 4)
    labels = labels.copy()
    labels[7] = 12
    directory, checksums = _with_file(tmp_path, "", b"", test=(images, labels))
    _ingest_fails(tmp_path, directory, checksums,
                  r"t10k-labels-idx1-ubyte.gz: 1 label\(s\) above 9 \(up to 12\)")


# --- Damaged TFRecord shards: training and evaluation refuse them, naming the shard ---------


@pytest.fixture
def damaged(synthetic_dataset, tmp_path):
    """A copy of the ingested synthetic dataset, to damage."""
    target = tmp_path / "dataset"
    shutil.copytree(synthetic_dataset, target)
    return target


def _drop_last_record(path) -> int:
    """Rewrites a shard without its last record: cut at a record boundary, so the file is a
    valid, shorter TFRecord file. Returns the records left."""
    import tensorflow as tf

    kept = [record.numpy() for record in tf.data.TFRecordDataset(str(path))][:-1]
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in kept:
            writer.write(record)
    return len(kept)


def test_a_shard_cut_at_a_record_boundary_fails_training_instead_of_shrinking_it(damaged):
    import tensorflow as tf

    shard = damaged / "train-00003-of-00008.tfrecord"
    left = _drop_last_record(shard)
    # TFRecord alone reads the shorter shard without complaint: the check is ours.
    assert sum(1 for _ in tf.data.TFRecordDataset(str(shard))) == left == 224  # 1,800 / 8 - 1
    with pytest.raises(DataSourceError,
                       match="train shard train-00003-of-00008.tfrecord .* is truncated"):
        training_dataset(str(damaged), "train", 64, shuffle=True)


def test_a_garbled_shard_fails_evaluation_naming_it(damaged):
    from fmnist_kfp.selection.select import select_best

    shard = damaged / "test-00001-of-00002.tfrecord"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2: len(data) // 2 + 16] = b"\xff" * 16
    shard.write_bytes(bytes(data))
    with pytest.raises(DataSourceError,
                       match="test shard test-00001-of-00002.tfrecord .* contents are corrupted"):
        load_arrays(str(damaged), "test")
    validation = damaged / "validation-00000-of-00001.tfrecord"
    data = bytearray(validation.read_bytes())
    data[len(data) // 2: len(data) // 2 + 16] = b"\xff" * 16
    validation.write_bytes(bytes(data))
    with pytest.raises(DataSourceError, match="validation-00000-of-00001.tfrecord"):
        select_best(str(damaged), [str(damaged / "no-model")], str(damaged / "best"))


def test_a_missing_shard_is_named(damaged):
    (damaged / "train-00000-of-00008.tfrecord").unlink()
    with pytest.raises(DataSourceError, match="train-00000-of-00008.tfrecord .* is missing"):
        load_arrays(str(damaged), "train")


@pytest.mark.timeout(180)
def test_a_training_job_on_a_damaged_shard_fails_naming_it(damaged, tmp_path):
    """Through the real trainer process: the job fails at once (an error, not a retry) and its
    error carries the trainer's message naming the shard."""
    from fmnist_kfp.errors import TrainingJobError
    from fmnist_kfp.kfp_components.train.step import training_backend
    from fmnist_kfp.settings.training import TrainingConfig
    from fmnist_kfp.training.training_job import TrainingJobSpec

    _drop_last_record(damaged / "train-00005-of-00008.tfrecord")
    spec = TrainingJobSpec(name="damaged", config=TrainingConfig(epochs=1),
                           data_dir=str(damaged), export_dir=str(tmp_path / "model" / "1"),
                           work_dir=str(tmp_path / "model"))
    with pytest.raises(TrainingJobError) as failure:
        training_backend("local", {}).run(spec)
    message = str(failure.value)
    assert "exit code 1 after 0 restart(s)" in message
    assert "train shard train-00005-of-00008.tfrecord" in message and "truncated" in message
    assert not (tmp_path / "model" / "1").exists()


def test_ingestion_records_every_shards_size_digest_and_examples(synthetic_dataset):
    metadata = json.loads((synthetic_dataset / "metadata.json").read_text())
    for split, total in (("train", 1800), ("validation", 200), ("test", 500)):
        shards = metadata["splits"][split]["shards"]
        assert list(shards) == metadata["splits"][split]["files"]
        assert sum(s["examples"] for s in shards.values()) == total
        for name, shard in shards.items():
            data = (synthetic_dataset / name).read_bytes()
            assert shard["bytes"] == len(data)
            assert shard["sha256"] == hashlib.sha256(data).hexdigest()
