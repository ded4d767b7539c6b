"""The ``tfds`` data source (the Kubeflow variant's default) for real, and offline: TensorFlow
Datasets prepares fashion_mnist from the four official files in ``$FASHION_MNIST_DIR`` as its
manually downloaded files (``DownloadConfig(manual_dir=...)``: tensorflow_datasets 4.9.10
core/download/download_manager.py ``_get_manually_downloaded_path``, which checks them against
the registered checksums in url_checksums/fashion_mnist.txt), in a process that has no network
at all, as a user without a writable home directory."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from fmnist.dataset import sources
from fmnist.errors import DataSourceError

REPO = Path(__file__).resolve().parent.parent

_GUARD = """
import socket
def _offline(self, address, *args, **kwargs):
    if self.family != socket.AF_UNIX:
        raise OSError(101, "Network is unreachable (the test forbids the network)")
    return _connect(self, address, *args, **kwargs)
_connect = socket.socket.connect
socket.socket.connect = _offline
socket.socket.connect_ex = _offline
"""


def _offline_prefix(tmp_path: Path, env: dict[str, str]) -> list[str]:
    """A network namespace of our own (no interface but a down loopback) when the kernel lets
    us make one; otherwise every Python socket connection is refused."""
    if shutil.which("unshare") and subprocess.run(["unshare", "-rn", "true"],
                                                  capture_output=True).returncode == 0:
        return ["unshare", "-rn"]
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(_GUARD)
    env["PYTHONPATH"] = f"{guard}{os.pathsep}{env['PYTHONPATH']}"
    return []


def _fingerprint(images: np.ndarray, labels: np.ndarray) -> str:
    """The examples as a multiset: TFDS stores them in its own (hashed) order."""
    rows = sorted(hashlib.sha1(image.tobytes() + bytes([int(label)])).hexdigest()
                  for image, label in zip(images, labels, strict=True))
    return hashlib.sha256("".join(rows).encode()).hexdigest()


@pytest.mark.slow
def test_tfds_prepares_fashion_mnist_offline_from_the_official_files(real_data_dir, tmp_path):
    script = textwrap.dedent("""
        import hashlib, json, sys
        from fmnist.dataset import sources
        from tests.test_tfds_source import _fingerprint
        raw = sources.load("tfds")
        print(json.dumps({"source": raw.source, "kind": raw.source_kind,
                          "verification": raw.verification,
                          **{split: [int(s.images.shape[0]), _fingerprint(s.images, s.labels)]
                             for split, s in raw.splits.items()}}))
    """)
    data_dir = tmp_path / "tfds"
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO),
           "HOME": "/nonexistent", "TMPDIR": str(tmp_path),
           "FASHION_MNIST_DIR": str(real_data_dir), "TFDS_DATA_DIR": str(data_dir),
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = _offline_prefix(tmp_path, env) + [sys.executable, "-c", script]
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["kind"] == "tfds" and found["source"].startswith("tfds:fashion_mnist/")
    official = sources.load(str(real_data_dir))  # the same files, read as IDX
    for split, count in (("train", 60_000), ("test", 10_000)):
        raw = official.splits[split]
        assert found[split] == [count, _fingerprint(raw.images, raw.labels)]
    assert list(data_dir.glob("fashion_mnist/*/dataset_info.json"))  # prepared where we said


def test_tfds_prepares_in_a_writable_directory_without_a_home(monkeypatch, tmp_path):
    monkeypatch.delenv(sources.TFDS_DATA_DIR_ENV, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    assert sources.tfds_data_dir() == str(tmp_path / "fmnist-tensorflow-datasets")
    monkeypatch.setenv(sources.TFDS_DATA_DIR_ENV, "/data/tfds")
    assert sources.tfds_data_dir() == "/data/tfds"


def _failing_prepare(monkeypatch, error: BaseException) -> None:
    import tensorflow_datasets as tfds

    def prepare(self, **kwargs):
        raise error

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", prepare)
    monkeypatch.setattr(sources, "unreachable", lambda url: None)  # the host answers
    monkeypatch.delenv("FASHION_MNIST_DIR", raising=False)


def test_a_bug_in_preparing_is_not_blamed_on_the_network(monkeypatch, tmp_path):
    """What 1cd2394 did: TFDS failing with ModuleNotFoundError ('importlib_resources') was
    reported as "could not provide fashion_mnist ... without network"."""
    monkeypatch.setenv(sources.TFDS_DATA_DIR_ENV, str(tmp_path))
    _failing_prepare(monkeypatch, ModuleNotFoundError("No module named 'importlib_resources'"))
    with pytest.raises(ModuleNotFoundError, match="importlib_resources"):
        sources.load("tfds")


def test_a_failed_download_names_the_offline_fix(monkeypatch, tmp_path):
    import requests

    monkeypatch.setenv(sources.TFDS_DATA_DIR_ENV, str(tmp_path))
    try:
        raise requests.ConnectionError("Max retries exceeded: Network is unreachable")
    except requests.ConnectionError as cause:
        try:
            raise RuntimeError("Failed to download fashion_mnist") from cause
        except RuntimeError as wrapped:
            error = wrapped
    _failing_prepare(monkeypatch, error)
    with pytest.raises(DataSourceError, match="could not download fashion_mnist.*"
                                              "FASHION_MNIST_DIR"):
        sources.load("tfds")


def test_tensorflow_datasets_imports_what_it_needs():
    """tensorflow_datasets 4.9.10 imports importlib_resources unconditionally
    (core/dataset_builder.py line 41) but declares it only for Python < 3.9: the lock must
    carry it."""
    import importlib

    importlib.import_module("importlib_resources")
    from tensorflow_datasets.core import dataset_builder

    assert dataset_builder.importlib_resources.files  # the lazy import resolves
