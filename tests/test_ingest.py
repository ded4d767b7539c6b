"""Ingestion: verification, clear failures, the written dataset and its metadata."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import socket

import numpy as np
import pytest

from fmnist.dataset import sources
from fmnist.dataset.ingest import ingest
from fmnist.dataset.official import CLASS_NAMES, OFFICIAL_FILES
from fmnist.dataset.pipeline import load_arrays, training_dataset
from fmnist.errors import DataSourceError
from tests.fixtures import synthetic_split, write_idx_dir


def test_ingested_dataset_has_metadata_and_round_trips_the_pixels(synthetic_idx, synthetic_dataset):
    _, checksums = synthetic_idx
    metadata = json.loads((synthetic_dataset / "metadata.json").read_text())
    assert metadata["sha256"] == checksums
    assert metadata["splits"]["train"]["num_examples"] == 2000
    assert metadata["splits"]["test"]["num_examples"] == 500
    counts = metadata["splits"]["train"]["class_counts"]
    assert set(counts) == set(CLASS_NAMES) and sum(counts.values()) == 2000
    assert len(metadata["splits"]["train"]["files"]) == 8
    assert "local IDX directory" == metadata["source"]  # no machine path in metadata

    images, labels = load_arrays(str(synthetic_dataset), "test")
    expected_images, expected_labels = synthetic_split(500, 2)
    np.testing.assert_array_equal(images, expected_images)
    np.testing.assert_array_equal(labels, expected_labels)


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


def test_tfds_failure_says_what_to_do_offline(monkeypatch, tmp_path):
    import tensorflow_datasets as tfds

    def offline(*args, **kwargs):
        raise ConnectionError("Failed to resolve 'storage.googleapis.com'")

    monkeypatch.setattr(tfds, "builder", offline)
    with pytest.raises(DataSourceError, match="TensorFlow Datasets could not .*FASHION_MNIST_DIR"):
        ingest("tfds", str(tmp_path / "out"))


def test_tfds_source_is_ingested_through_the_tfds_api(tmp_path):
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=30):
        metadata = ingest("tfds", str(tmp_path / "out"))
    assert metadata["source_kind"] == "tfds"
    assert metadata["source"].startswith("tfds:fashion_mnist/")
    assert metadata["splits"]["train"]["num_examples"] == 30
    images, _ = load_arrays(str(tmp_path / "out"), "train")
    assert images.shape == (30, 28, 28)


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
