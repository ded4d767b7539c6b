"""``make shared-data`` (tests/shared_files.py): the pinned files fetched from a loopback mirror of
the real ``../shared`` (found as the tests find it: ``$FASHION_MNIST_DIR``, else
``../shared/data/fashion-mnist``; tests/crd_schemas.py's ``CRDS``), byte for byte, once; a corrupted
file, a failing and a missing one; and the pins against the SOURCE.md files beside them and
against the checksums TensorFlow Datasets registers for the official release.

No internet: every download here is from 127.0.0.1, through the fetcher's mirror override.
"""

from __future__ import annotations

import filecmp
import hashlib
import importlib.util
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler
from pathlib import Path

import pytest

from tests.conftest import IN_CI, needs_tfds
from tests.crd_schemas import CRDS as CRDS_SOURCE
from tests.shared_files import (
    CRDS,
    DATA_DIR,
    DATASET,
    MIRROR_ENV,
    SHARED_FILES,
    FetchError,
    SharedFile,
    fetch,
    github_raw,
    main,
    sha256_of,
)
from tests.standins.loopback import LoopbackServer

ROOT = Path(__file__).resolve().parents[1]
DATA_SOURCE = Path(os.environ.get("FASHION_MNIST_DIR") or ROOT.parent / "shared" / DATA_DIR)
LABELS = next(f for f in DATASET if f.path.endswith("t10k-labels-idx1-ubyte.gz"))  # 5 kB
EXPERIMENT_CRD = next(f for f in CRDS if f.path.endswith("experiment.kubeflow.org_v1beta1.yaml"))


def _quiet(_line: str) -> None:
    pass


def _missing(message: str) -> None:
    """Like conftest's real data: missing skips here, fails in CI."""
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def _files_under(directory: Path) -> list[str]:
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())


class _Mirror(LoopbackServer):
    def __init__(self, handler: type[SimpleHTTPRequestHandler]) -> None:
        self._serve(handler)
        # Polling every 50 ms: shutting down waits for one poll (half a second by default).
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)


@contextmanager
def serving(root: Path, fail: dict[str, list[int]] | None = None
            ) -> Iterator[tuple[str, list[str]]]:
    """Serves ``root`` on 127.0.0.1; yields its URL and the paths asked for. ``fail`` maps a path
    to the statuses its first requests get, one each, before the file is served."""
    requests: list[str] = []
    planned = {path: list(codes) for path, codes in (fail or {}).items()}

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args):
            pass

        def do_GET(self):
            requests.append(self.path)
            if planned.get(self.path):
                self.send_error(planned[self.path].pop(0))
                return
            super().do_GET()

    with _Mirror(Handler) as server:
        yield server.url, requests


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> Path:
    """A mirror laid out like ``../shared``: links to the real files, wherever they are."""
    root = tmp_path_factory.mktemp("mirror")
    for item in SHARED_FILES:
        source = (DATA_SOURCE if item in DATASET else CRDS_SOURCE) / Path(item.path).name
        if not source.is_file():
            _missing(f"{source} is missing: the real shared files are needed to mirror them")
        (root / item.path).parent.mkdir(parents=True, exist_ok=True)
        (root / item.path).symlink_to(source)
    return root


@pytest.fixture(scope="module")
def fetched(mirror, tmp_path_factory) -> tuple[Path, list[SharedFile], list[str]]:
    """Everything fetched from the mirror into an empty directory, once for the module."""
    dest = tmp_path_factory.mktemp("shared")
    with serving(mirror) as (url, requests):
        downloaded = fetch_all(dest, url)
    return dest, downloaded, requests


def fetch_all(dest: Path, url: str, files=SHARED_FILES, **kwargs) -> list[SharedFile]:
    """``fetch`` from the mirror at ``url``, quietly."""
    return fetch(dest, files, mirror=url, report=_quiet, **kwargs)


def test_every_file_is_fetched_byte_identical_and_nothing_else(fetched, mirror):
    dest, downloaded, requests = fetched
    assert downloaded == list(SHARED_FILES)
    assert sorted(requests) == sorted(f"/{f.path}" for f in SHARED_FILES)
    for item in SHARED_FILES:
        assert filecmp.cmp(dest / item.path, mirror / item.path, shallow=False), item.path
    assert _files_under(dest) == sorted(f.path for f in SHARED_FILES)  # no temporary left


def test_a_second_run_downloads_nothing(fetched, mirror):
    dest = fetched[0]
    with serving(mirror) as (url, requests):
        assert fetch_all(dest, url) == []
    assert requests == []


def test_a_file_with_another_sha256_is_fetched_again(mirror, tmp_path):
    stale = tmp_path / EXPERIMENT_CRD.path
    stale.parent.mkdir(parents=True)
    stale.write_text("kind: Stale\n")
    with serving(mirror) as (url, _):
        assert fetch_all(tmp_path, url, [EXPERIMENT_CRD]) == [EXPERIMENT_CRD]
    assert sha256_of(stale) == EXPERIMENT_CRD.sha256


def test_a_corrupted_file_fails_naming_both_sha256_and_leaves_no_file(mirror, tmp_path):
    corrupted = bytearray((mirror / LABELS.path).read_bytes())
    corrupted[100] ^= 0xFF
    bad_mirror = tmp_path / "mirror"
    (bad_mirror / LABELS.path).parent.mkdir(parents=True)
    (bad_mirror / LABELS.path).write_bytes(corrupted)
    dest = tmp_path / "shared"
    with serving(bad_mirror) as (url, _), pytest.raises(FetchError) as raised:
        fetch_all(dest, url, [LABELS])
    message = str(raised.value)
    assert LABELS.path in message and "sha256 mismatch" in message
    assert f"expected {LABELS.sha256}" in message
    assert f"got {hashlib.sha256(corrupted).hexdigest()}" in message
    assert _files_under(dest) == []


def test_two_503s_then_200_succeeds_after_backing_off(mirror, tmp_path):
    waits: list[float] = []
    with serving(mirror, fail={f"/{LABELS.path}": [503, 503]}) as (url, requests):
        assert fetch_all(tmp_path, url, [LABELS], sleep=waits.append) == [LABELS]
    assert requests == [f"/{LABELS.path}"] * 3
    assert waits == [2.0, 4.0]  # the default backoff, doubling; recorded, not slept
    assert filecmp.cmp(tmp_path / LABELS.path, mirror / LABELS.path, shallow=False)


def test_a_server_that_keeps_failing_is_given_up_after_the_attempts(mirror, tmp_path):
    waits: list[float] = []
    with serving(mirror, fail={f"/{LABELS.path}": [500] * 9}) as (url, requests), \
            pytest.raises(FetchError, match=r"HTTP 500 \(gave up after 3 attempts\)"):
        fetch_all(tmp_path, url, [LABELS], attempts=3, backoff=0.5, sleep=waits.append)
    assert len(requests) == 3 and waits == [0.5, 1.0]
    assert _files_under(tmp_path) == []


def test_a_404_fails_at_once_naming_the_url(mirror, tmp_path):
    absent = SharedFile("crds/absent.yaml", "https://example.invalid/absent.yaml", "0" * 64)
    waits: list[float] = []
    with serving(mirror) as (url, requests), \
            pytest.raises(FetchError, match=re.escape(f"{url}/crds/absent.yaml: HTTP 404")):
        fetch_all(tmp_path, url, [absent], sleep=waits.append)
    assert requests == ["/crds/absent.yaml"] and waits == []
    assert _files_under(tmp_path) == []


def test_the_command_fails_with_the_reason_and_exit_1(tmp_path, capsys):
    empty = tmp_path / "empty-mirror"
    empty.mkdir()
    with serving(empty) as (url, _):
        assert main(["--dest", str(tmp_path / "shared"), "--mirror", url]) == 1
    assert f"shared-data: {url}/{SHARED_FILES[0].path}: HTTP 404" in capsys.readouterr().err


def test_make_shared_data_fetches_into_SHARED(mirror, tmp_path):
    dest = tmp_path / "shared"
    with serving(mirror) as (url, requests):
        done = subprocess.run(["make", "--no-print-directory", "shared-data", f"SHARED={dest}"],
                              cwd=ROOT, env={**os.environ, MIRROR_ENV: url},
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(requests) == len(SHARED_FILES)
    assert all(sha256_of(dest / f.path) == f.sha256 for f in SHARED_FILES)


def _source_md(directory: Path) -> str:
    """The SOURCE.md the project's CI keeps beside the shared files. GitHub's runner has none:
    its ../shared is what `make shared-data` fetched by these very pins, so there the check
    skips, even with CI=true."""
    path = directory / "SOURCE.md"
    if not path.is_file():
        message = f"{path} is missing: nothing to check the pins against"
        if os.environ.get("GITHUB_ACTIONS") == "true":
            pytest.skip(message)
        _missing(message)
    return path.read_text()


def test_the_dataset_pins_agree_with_its_source_md():
    # Its first table: | file | bytes | sha256 | md5 |
    listed = dict(re.findall(r"^\| ([\w-]+\.gz) \| [\d,]+ \| ([0-9a-f]{64}) \|",
                             _source_md(DATA_SOURCE), re.MULTILINE))
    assert listed == {Path(f.path).name: f.sha256 for f in DATASET}


def test_the_crd_pins_agree_with_their_source_md():
    # | `file` | kind | versions | github.com/<repo> | `path` | `commit` ... | date | `sha256` |
    listed = {}
    for line in _source_md(CRDS_SOURCE).splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 8 or not cells[0].startswith("`"):
            continue
        name = re.match(r"`([^`]+)`", cells[0])[1]
        repo = re.search(r"github\.com/([\w.-]+/[\w.-]+)", cells[3])[1]
        path = re.match(r"`([^`]+)`", cells[4])[1]
        commit = re.match(r"`([0-9a-f]{40})`", cells[5])[1]
        listed[name] = (github_raw(repo, commit, path), re.fullmatch(r"`([0-9a-f]{64})`",
                                                                     cells[7])[1])
    assert listed == {Path(f.path).name: (f.url, f.sha256) for f in CRDS}


@needs_tfds
def test_the_official_urls_and_pins_are_the_ones_tfds_registers():
    # TFDS's own record of where fashion_mnist comes from (read without importing TensorFlow).
    spec = importlib.util.find_spec("tensorflow_datasets")
    assert spec is not None, "the training extra installs tensorflow-datasets on 3.11+"
    registry = (Path(next(iter(spec.submodule_search_locations)))
                / "url_checksums" / "fashion_mnist.txt")
    rows = [line.split("\t") for line in registry.read_text().splitlines() if line.strip()]
    assert {url: sha256 for url, _size, sha256, _name in rows} == {f.url: f.sha256
                                                                   for f in DATASET}
