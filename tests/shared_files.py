"""What the tests read beside the checkout, in ``../shared``, pinned; and the fetcher that puts it
there (``make shared-data``, ``python -m tests.shared_files --dest DIR``).

``../shared`` holds the four official Fashion-MNIST files (``data/fashion-mnist/``: conftest's
``real_data_dir`` through ``$FASHION_MNIST_DIR``, which .ci/run sets) and the upstream CRDs and
Katib's swagger (``crds/``: tests/crd_schemas.py, tests/katib_schemas.py). With ``CI=true`` the
tests fail without them; this fetches each from its pinned URL and keeps it only when its sha256
is the pinned one. The dataset's pins are the package's own (fmnist_kfp/dataset/official.py); the
CRDs' are their upstream files at the commits ``../shared/crds/SOURCE.md`` lists
(tests/test_shared_files.py checks both against the SOURCE.md files where those exist).

It is test tooling, so it lives with the tests: they import it, the wheel leaves it out, and
``.ci/`` is no importable package (the Makefile runs ``tests.mutation.score`` the same way).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import httpx

from fmnist_kfp.dataset.official import OFFICIAL_FILES, OFFICIAL_URL

# Serves every pinned file from <URL>/<path> instead (a mirror laid out like ../shared): how the
# tests point the fetcher at a loopback server. Not meant for CI, which fetches from upstream.
MIRROR_ENV = "FMNIST_SHARED_MIRROR"
DATA_DIR = "data/fashion-mnist"
CRDS_DIR = "crds"
ATTEMPTS = 4
BACKOFF_SECONDS = 2.0  # before the 2nd, 3rd and 4th attempts: 2, 4 and 8 seconds
TIMEOUT = httpx.Timeout(60.0, connect=15.0)
# Worth another try: the server or something on the way is busy or failing, not the request.
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class SharedFile:
    """One pinned file: where it goes under the shared directory, its URL, its sha256."""

    path: str  # relative to the shared directory, e.g. "crds/tfjob.kubeflow.org_v1.yaml"
    url: str
    sha256: str


def github_raw(repo: str, commit: str, path: str) -> str:
    """The URL of ``path`` at ``commit`` in GitHub repository ``repo`` (``owner/name``)."""
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


# The upstream commits (../shared/crds/SOURCE.md says which tags they are).
TRAINER = ("kubeflow/trainer", "4445c12aa62e4345b0c2c6ac9b215a70eca46ed7")  # v1.9.4
KATIB = ("kubeflow/katib", "578e60f1ce83dbb5e7151026a3bdc4de233947fc")  # v0.19.0
KSERVE = ("kserve/kserve", "aaac4e294dae2c7b1aa1886447793f3aa1c30912")  # master after v0.20.0


def _crd(name: str, upstream: tuple[str, str], path: str, sha256: str) -> SharedFile:
    return SharedFile(f"{CRDS_DIR}/{name}", github_raw(*upstream, path), sha256)


CRDS: tuple[SharedFile, ...] = (
    _crd("tfjob.kubeflow.org_v1.yaml", TRAINER,
         "manifests/base/crds/kubeflow.org_tfjobs.yaml",
         "6028ab677922ee558d279c9cc2028500372875eec327ed6819fc4dc2796cda9e"),
    _crd("experiment.kubeflow.org_v1beta1.yaml", KATIB,
         "manifests/v1beta1/components/crd/experiment.yaml",
         "c7f8a989368dcc87bcbb2739efa3b3e6f78d31f156857e0284e56c8bd6bf98db"),
    _crd("trial.kubeflow.org_v1beta1.yaml", KATIB,
         "manifests/v1beta1/components/crd/trial.yaml",
         "207d14cdfad2921ccebf4aba97c1e55bd238dd2a16e4e7f49cedcba046b6c3cf"),
    _crd("suggestion.kubeflow.org_v1beta1.yaml", KATIB,
         "manifests/v1beta1/components/crd/suggestion.yaml",
         "779b50ccf5a60da5e79bac8ff37a0f1adbecfb77b366645d1db79709c6eb2922"),
    _crd("katib_v1beta1_swagger.json", KATIB,
         "pkg/apis/v1beta1/swagger.json",
         "fe7228f8735d8e024ee99a1080ca9851b0a8e34c7b49f402e4cb54bfbe13f45a"),
    _crd("inferenceservice.serving.kserve.io_v1beta1.yaml", KSERVE,
         "config/crd/full/serving.kserve.io_inferenceservices.yaml",
         "57c3bf13f77de94678bf2ae3748056ec071ad2b9e88d6a28f44fb4710758fcff"),
    _crd("servingruntime.serving.kserve.io_v1alpha1.yaml", KSERVE,
         "config/crd/full/serving.kserve.io_servingruntimes.yaml",
         "5a262831474e7bd23e7c4f76556d84e1a11fb3ad74a78a6d18cfc71fd8fca7a2"),
    _crd("clusterservingruntime.serving.kserve.io_v1alpha1.yaml", KSERVE,
         "config/crd/full/serving.kserve.io_clusterservingruntimes.yaml",
         "f721d19516670d4a81181e231b1e58cbc32c36435969182ae457fad537151cc8"),
)
# The package's own pins of the official release, from its official location.
DATASET: tuple[SharedFile, ...] = tuple(
    SharedFile(f"{DATA_DIR}/{official.name}", OFFICIAL_URL + official.name, official.sha256)
    for official in OFFICIAL_FILES)
SHARED_FILES: tuple[SharedFile, ...] = DATASET + CRDS


class FetchError(Exception):
    """A file could not be downloaded, or what was downloaded is not the pinned file."""


class _Transient(Exception):
    """An answer worth retrying (see ``TRANSIENT_STATUS``)."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def source_url(item: SharedFile, mirror: str | None = None) -> str:
    """Where ``item`` is downloaded from: its pinned URL, or its path under ``mirror``."""
    return f"{mirror.rstrip('/')}/{item.path}" if mirror else item.url


def _get(client: httpx.Client, url: str, out: BinaryIO, attempts: int, backoff: float,
         sleep: Callable[[float], None], report: Callable[[str], None]) -> str:
    """Streams ``url`` into ``out`` and returns its sha256, retrying transient failures with
    exponential backoff; any other HTTP error fails at once."""
    for attempt in range(1, attempts + 1):
        out.seek(0)
        out.truncate()  # a retry starts over: no range requests, the files are small
        digest = hashlib.sha256()
        try:
            with client.stream("GET", url) as response:
                if response.status_code in TRANSIENT_STATUS:
                    raise _Transient(f"HTTP {response.status_code}")
                if response.status_code != 200:
                    raise FetchError(f"{url}: HTTP {response.status_code}")
                for chunk in response.iter_bytes(1 << 20):
                    out.write(chunk)
                    digest.update(chunk)
            return digest.hexdigest()
        except (_Transient, httpx.TransportError) as error:
            problem = str(error) or type(error).__name__
            if attempt == attempts:
                raise FetchError(f"{url}: {problem} (gave up after {attempts} attempts)") from error
            wait = backoff * 2 ** (attempt - 1)
            report(f"  {url}: {problem}; attempt {attempt + 1} of {attempts} in {wait:g} s")
            sleep(wait)
    raise AssertionError("unreachable")  # the loop returns or raises


def _download(client: httpx.Client, item: SharedFile, url: str, target: Path, *, attempts: int,
              backoff: float, sleep: Callable[[float], None],
              report: Callable[[str], None]) -> None:
    """Downloads to a temporary name beside ``target`` and renames it only once its sha256 is
    the pinned one: an interrupted or failed fetch never leaves a file a test would read."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                     suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            actual = _get(client, url, out, attempts, backoff, sleep, report)
        if actual != item.sha256:
            raise FetchError(f"{item.path}: sha256 mismatch for {url}: expected {item.sha256}, "
                             f"got {actual}; nothing was written")
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide it from other users
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def fetch(dest: Path, files: Iterable[SharedFile] = SHARED_FILES, *, mirror: str | None = None,
          attempts: int = ATTEMPTS, backoff: float = BACKOFF_SECONDS,
          sleep: Callable[[float], None] = time.sleep,
          report: Callable[[str], None] = print) -> list[SharedFile]:
    """Puts each of ``files`` under ``dest`` (at its ``path``) unless it is there with its pinned
    sha256; returns those it downloaded. Raises :class:`FetchError` on the first that fails.

    ``mirror`` (tests only) replaces each pinned URL with ``<mirror>/<path>``; ``sleep`` is
    what waits between attempts (tests record the waits instead)."""
    downloaded = []
    with httpx.Client(follow_redirects=True, timeout=TIMEOUT) as client:
        for item in files:
            target = dest / item.path
            if target.is_file():
                if sha256_of(target) == item.sha256:
                    report(f"{item.path}: present")
                    continue
                report(f"{item.path}: sha256 is not the pinned one; fetching it again")
            url = source_url(item, mirror)
            _download(client, item, url, target, attempts=attempts, backoff=backoff,
                      sleep=sleep, report=report)
            report(f"{item.path}: downloaded from {url}")
            downloaded.append(item)
    return downloaded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.shared_files",
        description="Fetch the real Fashion-MNIST files and upstream CRDs the tests read, "
                    "each checked against its pinned sha256.")
    parser.add_argument("--dest", type=Path, default=Path("../shared"),
                        help="the shared directory (default: ../shared, beside the checkout)")
    parser.add_argument("--mirror", default=os.environ.get(MIRROR_ENV) or None,
                        help=f"fetch <MIRROR>/<path> instead of the pinned URLs (tests; "
                             f"default: ${MIRROR_ENV})")
    args = parser.parse_args(argv)
    try:
        downloaded = fetch(args.dest, mirror=args.mirror)
    except FetchError as error:
        print(f"shared-data: {error}", file=sys.stderr)
        return 1
    print(f"shared-data: {len(SHARED_FILES)} files in {args.dest} "
          f"({len(downloaded)} downloaded)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
