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
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fmnist_kfp.dataset import sources
from fmnist_kfp.errors import DataSourceError
from fmnist_kfp.settings.platform import TENSORFLOW_ENV
from tests import ROOT
from tests.conftest import needs_tfds

REPO = ROOT

def _fingerprint(images: np.ndarray, labels: np.ndarray) -> str:
    """The examples as a multiset: TFDS stores them in its own (hashed) order."""
    rows = sorted(hashlib.sha1(image.tobytes() + bytes([int(label)])).hexdigest()
                  for image, label in zip(images, labels, strict=True))
    return hashlib.sha256("".join(rows).encode()).hexdigest()


@pytest.mark.slow
@needs_tfds
def test_tfds_prepares_fashion_mnist_offline_from_the_official_files(real_data_dir, tmp_path):
    script = textwrap.dedent("""
        import hashlib, json, sys
        from fmnist_kfp.dataset import sources
        from tests.fmnist_kfp.dataset.test_tfds_source import _fingerprint
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
           **TENSORFLOW_ENV}
    from tests.fixtures import offline_prefix

    command = offline_prefix(tmp_path, env) + [sys.executable, "-c", script]
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


def test_an_offline_machine_fails_in_seconds_naming_the_data_directory(tmp_path):
    """Without $FASHION_MNIST_DIR and without network, TFDS used to retry its downloads for
    3 min 25 s (10 retries, backing off) before the error; the download host is now asked
    once first, so the error comes in seconds, and still names the fix."""
    script = textwrap.dedent("""
        import json, time
        import tensorflow_datasets  # not timed: imports are not the network
        from fmnist_kfp.dataset import sources
        started = time.monotonic()
        try:
            sources.load("tfds")
            outcome = "loaded"
        except Exception as error:
            outcome = f"{type(error).__name__}: {error}"
        print(json.dumps({"seconds": time.monotonic() - started, "outcome": outcome}))
    """)
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO), "HOME": str(tmp_path),
           "TMPDIR": str(tmp_path), "TFDS_DATA_DIR": str(tmp_path / "tfds"),
           **TENSORFLOW_ENV}
    from tests.fixtures import offline_prefix

    command = offline_prefix(tmp_path, env) + [sys.executable, "-c", script]
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=150)  # what it took before, 205 s, ends the test
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["outcome"].startswith("DataSourceError: TensorFlow Datasets could not "
                                       "download fashion_mnist"), found
    assert "cannot be reached" in found["outcome"] and "FASHION_MNIST_DIR" in found["outcome"]
    assert found["seconds"] < 15, found  # two probes, a second apart, each failing at once


def test_the_probe_tells_an_unreachable_host_from_a_failing_server():
    """Only a host that cannot be reached fails fast; a server that answers, even with a 5xx,
    is left to the download's own retries."""
    import socket

    from tests.standins.loopback import JsonRequestHandler, LoopbackServer

    class Failing(LoopbackServer):
        def __init__(self):
            class Handler(JsonRequestHandler):
                def do_HEAD(self):
                    self.send_response(503)
                    self.end_headers()

            self._serve(Handler)

    with Failing() as server:
        assert sources.unreachable(server.url + "/t10k-images-idx3-ubyte.gz") is None
    with socket.socket() as closed:  # bound, not listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/"
        assert "refused" in sources.unreachable(url)
    assert "does not resolve" in sources.unreachable("http://nonexistent.invalid/")


def _failing_prepare(monkeypatch, error: BaseException) -> None:
    import tensorflow_datasets as tfds

    def prepare(self, **kwargs):
        raise error

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", prepare)
    monkeypatch.setattr(sources, "unreachable", lambda url: None)  # the host answers
    monkeypatch.delenv("FASHION_MNIST_DIR", raising=False)


@needs_tfds
def test_a_bug_in_preparing_is_not_blamed_on_the_network(monkeypatch, tmp_path):
    """What 1cd2394 did: TFDS failing with ModuleNotFoundError ('importlib_resources') was
    reported as "could not provide fashion_mnist ... without network"."""
    monkeypatch.setenv(sources.TFDS_DATA_DIR_ENV, str(tmp_path))
    _failing_prepare(monkeypatch, ModuleNotFoundError("No module named 'importlib_resources'"))
    with pytest.raises(ModuleNotFoundError, match="importlib_resources"):
        sources.load("tfds")


@needs_tfds
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


def test_without_tensorflow_datasets_the_source_names_the_fix(monkeypatch):
    """The training extra leaves TFDS out on Python 3.10 (its tensorflow-metadata caps protobuf
    below what kfp-kubernetes 2.17.0 needs): the tfds source says what to do instead."""
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # import raises
    with pytest.raises(DataSourceError, match=r"needs tensorflow-datasets.*Python 3\.11.*"
                                              "FASHION_MNIST_DIR"):
        sources.load("tfds")


@needs_tfds
def test_tensorflow_datasets_imports_what_it_needs():
    """tensorflow_datasets 4.9.10 imports importlib_resources unconditionally
    (core/dataset_builder.py line 41) but declares it only for Python < 3.9: the lock must
    carry it."""
    import importlib

    importlib.import_module("importlib_resources")
    from tensorflow_datasets.core import dataset_builder

    assert dataset_builder.importlib_resources.files  # the lazy import resolves
