"""The ingested shards as the steps read them: each checked against the size and sha256
ingestion recorded (a truncated or altered one named, with the fix), the metadata's absence
named, and a verified local split read without TensorFlow, in file order."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from fmnist_kfp.dataset.records import (
    read_local_split,
    read_metadata,
    shard_names,
    verify_shards,
)
from fmnist_kfp.errors import DataSourceError, UserInputError


def test_a_verified_split_is_every_shard_in_order(synthetic_dataset):
    metadata = read_metadata(str(synthetic_dataset))
    paths = verify_shards(str(synthetic_dataset), "test", metadata)
    assert [path.rsplit("/", 1)[-1] for path in paths] == shard_names("test", len(paths))
    images, labels = read_local_split(paths)
    assert images.shape == (500, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (500,) and labels.dtype == np.int32
    first, _ = read_local_split(paths, take=7)
    assert np.array_equal(first, images[:7])


def test_a_truncated_or_altered_shard_is_named(synthetic_dataset, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(synthetic_dataset, copy)
    metadata = read_metadata(str(copy))
    name = shard_names("test", 2)[1]
    data = (copy / name).read_bytes()
    (copy / name).write_bytes(data[:-10])
    with pytest.raises(DataSourceError, match=f"test shard {name} .*truncated or overwritten"):
        verify_shards(str(copy), "test", metadata)
    (copy / name).write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(DataSourceError, match="its contents are corrupted"):
        verify_shards(str(copy), "test", metadata)


def test_a_folder_ingestion_never_wrote_is_named(tmp_path):
    with pytest.raises(UserInputError, match="is not an ingested Fashion-MNIST dataset"):
        read_metadata(str(tmp_path))
