"""Small Fashion-MNIST-shaped IDX fixtures that a CNN can learn in an epoch or two."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from fmnist_kfp.dataset.idx import encode_idx
from fmnist_kfp.dataset.official import OFFICIAL_FILES


def synthetic_split(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Class ``c`` is a bright horizontal band at row ``1 + 2.6c`` (so left-right flips, the
    training augmentation, keep the class), of random width, on noise."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n, dtype=np.uint8) % 10
    rng.shuffle(labels)
    images = rng.integers(0, 60, size=(n, 28, 28), dtype=np.uint8)
    for i, label in enumerate(labels):
        row = 1 + int(2.6 * int(label))
        half = int(rng.integers(5, 13))
        images[i, row : row + 2, 14 - half : 14 + half] = rng.integers(180, 255)
    return images, labels


def write_idx_dir(
    directory: Path, train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray]
) -> dict[str, str]:
    """Writes the four ``.gz`` files under their official names; returns their sha256."""
    directory.mkdir(parents=True, exist_ok=True)
    arrays = {
        ("train", "images"): train[0],
        ("train", "labels"): train[1],
        ("test", "images"): test[0],
        ("test", "labels"): test[1],
    }
    checksums = {}
    for official in OFFICIAL_FILES:
        data = gzip.compress(encode_idx(arrays[(official.split, official.kind)]), mtime=0)
        (directory / official.name).write_bytes(data)
        checksums[official.name] = hashlib.sha256(data).hexdigest()
    return checksums


def make_synthetic_idx_dir(directory: Path, n_train: int = 2000, n_test: int = 500):
    return write_idx_dir(directory, synthetic_split(n_train, 1), synthetic_split(n_test, 2))


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


def offline_prefix(tmp_path: Path, env: dict[str, str]) -> list[str]:
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
