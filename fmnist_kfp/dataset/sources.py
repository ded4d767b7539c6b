"""Where Fashion-MNIST comes from: TensorFlow Datasets, or the four official IDX files.

A *data source* is one of:

* ``"tfds"``: TensorFlow Datasets downloads and verifies the dataset (needs internet, unless
  ``FASHION_MNIST_DIR`` holds the four official files: TFDS then takes them from there as
  manually downloaded files, still checked against its registered checksums). TFDS prepares
  it under ``$TFDS_DATA_DIR``, else a directory in the temporary directory: the image runs as
  a user without a home directory, where TFDS's default ``~/tensorflow_datasets`` is not
  writable;
* a local directory, ``file://`` URI, or any URI ``tf.io.gfile`` reads (``gs://``, ``s3://``
  with tensorflow-io, ``hdfs://``) holding the four official ``.gz`` IDX files;
* an ``http(s)://`` URL of a mirror holding them.

An empty source means: the ``FASHION_MNIST_DIR`` environment variable if set, else ``"tfds"``.
"""

from __future__ import annotations

import hashlib
import os
import socket
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

import numpy as np

from fmnist_kfp.dataset.idx import decode_idx_gz
from fmnist_kfp.dataset.official import IMAGE_SIZE, NUM_CLASSES, OFFICIAL_FILES, OfficialFile
from fmnist_kfp.errors import DataSourceError, connection_problem
from fmnist_kfp.settings.data import DATA_DIR_ENV, TFDS_SOURCE

HTTP_TIMEOUT_SECONDS = 60
# Before TFDS downloads (with 10 retries, backing off for 3.5 minutes in all), its host is asked
# once, twice at most: a machine without network fails in seconds.
PROBE_TIMEOUT_SECONDS = 5.0
PROBE_ATTEMPTS = 2
OFFLINE_FIX = (f"On a machine without network, set {DATA_DIR_ENV} (or the data_source "
               "parameter) to a directory holding the four official IDX .gz files.")
TFDS_DATA_DIR_ENV = "TFDS_DATA_DIR"  # TFDS's own variable (tensorflow_datasets/core/constants.py)


@dataclass
class RawSplit:
    images: np.ndarray  # uint8 [N, 28, 28]
    labels: np.ndarray  # uint8 [N]


@dataclass
class RawDataset:
    splits: dict[str, RawSplit]
    source: str
    source_kind: str  # "idx" or "tfds"
    checksums: dict[str, str] = field(default_factory=dict)
    verification: str = ""


def resolve_source(source: str | None) -> str:
    """Applies the defaults: explicit source, then $FASHION_MNIST_DIR, then TFDS."""
    source = (source or "").strip() or os.environ.get(DATA_DIR_ENV, "").strip()
    return source or TFDS_SOURCE


def describe_source(source: str) -> str:
    """A loggable name for a source: no local machine path, no credentials."""
    if source == TFDS_SOURCE:
        return "tfds:fashion_mnist"
    if "://" in source:
        scheme, rest = source.split("://", 1)
        host_and_path = rest.split("@", 1)[-1]  # drop user:password@ if present
        return f"{scheme}://{host_and_path}" if scheme != "file" else "local IDX directory"
    return "local IDX directory"


def load(source: str, expected_sha256: dict[str, str] | None = None) -> RawDataset:
    """Loads and verifies Fashion-MNIST from a resolved source.

    ``expected_sha256`` replaces the official digests, file by file, for IDX files you derived
    yourself (a subset, a fixture); by default every file must be the official release.
    """
    if source == TFDS_SOURCE:
        return _load_tfds()
    return _load_idx(source, expected_sha256 or {})


def _read_bytes(location: str, name: str) -> bytes:
    path = f"{location.rstrip('/')}/{name}"
    if location.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(path, timeout=HTTP_TIMEOUT_SECONDS) as response:
                return response.read()
        except urllib.error.HTTPError as err:
            raise DataSourceError(
                f"{name} is missing from {describe_source(location)} (HTTP {err.code})"
            ) from err
        except (urllib.error.URLError, OSError) as err:
            raise DataSourceError(
                f"could not download {name} from {describe_source(location)}: {err}. "
                + OFFLINE_FIX
            ) from err
    import tensorflow as tf  # gfile reads local paths and gs://, s3://, hdfs:// URIs

    if location.startswith("file://"):
        path = path[len("file://") :]
    try:
        if not tf.io.gfile.exists(path):
            raise DataSourceError(
                f"{name} is missing from the Fashion-MNIST directory "
                f"{describe_source(location)}: it must hold the four official files "
                f"({', '.join(f.name for f in OFFICIAL_FILES)})."
            )
        with tf.io.gfile.GFile(path, "rb") as handle:
            return handle.read()
    except tf.errors.OpError as err:  # a scheme TensorFlow has no filesystem for, no access
        raise DataSourceError(
            f"cannot read {name} from {describe_source(location)}: {err.message}. Give a local "
            "directory, an http(s):// URL, or a URI TensorFlow reads (gs://, s3:// with "
            "tensorflow-io, hdfs://)."
        ) from None


def _verify(official: OfficialFile, data: bytes, expected: str) -> str:
    digest = hashlib.sha256(data).hexdigest()
    if digest != expected:
        which = "official" if expected == official.sha256 else "expected"
        raise DataSourceError(
            f"{official.name}: sha256 {digest} does not match the {which} {expected}. "
            "The file is corrupted or incomplete; download it again from the Fashion-MNIST "
            "release."
        )
    return digest


def _load_idx(location: str, expected_sha256: dict[str, str]) -> RawDataset:
    unknown = set(expected_sha256) - {f.name for f in OFFICIAL_FILES}
    if unknown:
        raise DataSourceError(
            f"expected_sha256 names unknown files {sorted(unknown)}; the files are "
            f"{[f.name for f in OFFICIAL_FILES]}"
        )
    arrays: dict[tuple[str, str], np.ndarray] = {}
    checksums: dict[str, str] = {}
    for official in OFFICIAL_FILES:
        data = _read_bytes(location, official.name)
        expected = expected_sha256.get(official.name, official.sha256)
        checksums[official.name] = _verify(official, data, expected)
        arrays[(official.split, official.kind)] = decode_idx_gz(data, official.name,
                                                                official.kind)
    splits = {
        split: RawSplit(arrays[(split, "images")], arrays[(split, "labels")])
        for split in ("train", "test")
    }
    for split, raw in splits.items():
        names = {f.kind: f.name for f in OFFICIAL_FILES if f.split == split}
        _check_shapes(split, raw, names["images"], names["labels"])
    return RawDataset(
        splits=splits,
        source=describe_source(location),
        source_kind="idx",
        checksums=checksums,
        verification="sha256 of each file against "
        + ("the caller's digests" if expected_sha256 else "the official release"),
    )


def tfds_data_dir() -> str:
    """Where TFDS prepares the dataset: ``$TFDS_DATA_DIR``, else a directory under the temporary
    directory (any user may write there; the image's user has no home directory)."""
    return os.environ.get(TFDS_DATA_DIR_ENV, "").strip() or os.path.join(
        tempfile.gettempdir(), "fmnist-tensorflow-datasets")


def unreachable(url: str) -> str | None:
    """Why the host of ``url`` cannot be reached, or None when it answered at all.

    A HEAD request, through the proxies the download would use, without retries: a name that
    does not resolve, a refused connection, no route or no answer within
    ``PROBE_TIMEOUT_SECONDS`` is asked once more after a second. Any HTTP answer, even a 5xx,
    and an answer cut off count as reached: the download's own retries are for those."""
    import requests

    problem = None
    for attempt in range(PROBE_ATTEMPTS):
        if attempt:
            time.sleep(1.0)
        try:
            requests.head(url, timeout=PROBE_TIMEOUT_SECONDS, allow_redirects=False).close()
            return None
        except requests.RequestException as error:
            problem = connection_problem(error)
            if problem is None:
                return None
    return problem


def _needs_download(builder, data_dir: str) -> bool:
    """Whether preparing will download: not prepared yet and nothing downloaded before."""
    downloads = os.path.join(data_dir, "downloads")
    return not builder.is_prepared() and not (os.path.isdir(downloads) and os.listdir(downloads))


def _download_failed(error: BaseException | None) -> bool:
    """Whether ``error`` (or one it was raised from) is a failed download, not a bug."""
    import requests
    from tensorflow_datasets.core.download.util import DownloadError

    while error is not None:
        if isinstance(error, DownloadError | requests.RequestException | urllib.error.URLError
                      | socket.gaierror | ConnectionError | TimeoutError):
            return True
        error = error.__cause__ or error.__context__
    return False


def _import_tfds():
    """``tensorflow_datasets``, or a DataSourceError naming the other source when it is not
    installed: the training extra leaves it out on Python 3.10 (see pyproject.toml)."""
    try:
        import tensorflow_datasets
    except ModuleNotFoundError as error:
        if error.name != "tensorflow_datasets":
            raise  # one of its own imports: a packaging bug, never "not installed"
        raise DataSourceError(
            f"the {TFDS_SOURCE} data source needs tensorflow-datasets, which the training extra "
            "installs on Python 3.11 and newer (on 3.10 it cannot be installed next to "
            "kfp-kubernetes 2.17.0): pip install 'fmnist-kfp[training]' on Python 3.11+, or set "
            f"{DATA_DIR_ENV} (or the data_source parameter) to a directory holding the four "
            "official IDX .gz files") from error
    return tensorflow_datasets


def _load_tfds() -> RawDataset:
    # Imported outside any handler: a missing module is a packaging bug, never "no network".
    tfds = _import_tfds()
    from tensorflow_datasets.core.download.download_manager import NonMatchingChecksumError

    manual = os.environ.get(DATA_DIR_ENV, "").strip()
    config = tfds.download.DownloadConfig(manual_dir=manual) if manual else None
    data_dir = tfds_data_dir()
    try:
        builder = tfds.builder("fashion_mnist", data_dir=data_dir)
        url = getattr(builder, "URL", "")  # where TFDS downloads fashion_mnist from
        if not manual and url and _needs_download(builder, data_dir):
            problem = unreachable(url)
            if problem:
                host = urllib.parse.urlsplit(url).hostname
                raise DataSourceError(f"TensorFlow Datasets could not download fashion_mnist: "
                                      f"{host} cannot be reached: {problem}. {OFFLINE_FIX}")
        builder.download_and_prepare(download_config=config)
    except DataSourceError:
        raise
    except NonMatchingChecksumError as err:
        raise DataSourceError(
            f"TensorFlow Datasets downloaded fashion_mnist files that do not match its "
            f"registered checksums: {err}. Remove {data_dir}/downloads and "
            "try again, or point data_source at the four official IDX .gz files."
        ) from err
    except Exception as err:
        if not _download_failed(err):
            raise  # a bug, or a full disk: its own message says what
        raise DataSourceError(
            f"TensorFlow Datasets could not download fashion_mnist: {err}. {OFFLINE_FIX}"
        ) from err
    loaded = [
        next(iter(tfds.as_numpy(builder.as_dataset(split=split).batch(100_000))))
        for split in ("train", "test")
    ]
    splits = {}
    for split, examples in zip(("train", "test"), loaded, strict=True):
        images = np.asarray(examples["image"], dtype=np.uint8).reshape(-1, IMAGE_SIZE, IMAGE_SIZE)
        labels = np.asarray(examples["label"], dtype=np.uint8)
        splits[split] = RawSplit(images, labels)
        _check_shapes(split, splits[split])
    return RawDataset(
        splits=splits,
        source=f"tfds:fashion_mnist/{builder.version}",
        source_kind="tfds",
        checksums={},
        verification="download checksums registered in TensorFlow Datasets",
    )


def _check_shapes(split: str, raw: RawSplit, images: str | None = None,
                  labels: str | None = None) -> None:
    """Images N×28×28, one label per image, labels 0-9; ``images``/``labels`` name the files
    the arrays came from (the TFDS split otherwise)."""
    images = images or f"the {split} images"
    labels = labels or f"the {split} labels"
    if raw.images.ndim != 3 or raw.images.shape[1:] != (IMAGE_SIZE, IMAGE_SIZE):
        raise DataSourceError(f"{images}: images of shape {raw.images.shape[1:]}, expected "
                              f"{IMAGE_SIZE}×{IMAGE_SIZE}")
    if raw.labels.shape != (raw.images.shape[0],):
        raise DataSourceError(
            f"{images} holds {raw.images.shape[0]} images but {labels} holds "
            f"{raw.labels.shape[0]} labels; each image needs exactly one label"
        )
    if raw.labels.size and int(raw.labels.max()) >= NUM_CLASSES:
        bad = int(np.count_nonzero(raw.labels >= NUM_CLASSES))
        raise DataSourceError(
            f"{labels}: {bad} label(s) above {NUM_CLASSES - 1} (up to {int(raw.labels.max())}); "
            f"Fashion-MNIST has classes 0-{NUM_CLASSES - 1}"
        )
