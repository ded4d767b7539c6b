"""Katib's images that are not Go programs, as the node agent runs them.

* **Katib's Python services** (the suggestion services our algorithms use and the median
  stopping service) run from the Katib module's own source, as their Dockerfiles run them:
  ``python main.py`` in the service's ``cmd`` folder with the Dockerfile's ``PYTHONPATH``, on
  Python 3.11 (their base image), in a virtual environment of the dependencies their
  ``requirements.txt`` names, resolved once into the locks beside this module's go.mod
  (``katib-v0.19.0/python/<service>.txt``: ``uv pip compile --python-version 3.11`` of the
  module's file with ``setuptools<81``, whose ``pkg_resources`` hyperopt 0.2.5 imports and the
  base image has).
* **``katib-mysql``** runs MariaDB from Debian's ``mariadb-server-core`` and
  ``mariadb-client-core`` (``make test`` installs them) through
  ``katib-v0.19.0/mysql-entrypoint.sh``, which does what the ``mysql`` image's entrypoint does
  on a first start.

The environments are built into the cluster cache (:func:`localcluster.build.cache_root`),
named by a digest of the locks and the module's version, so a second build is a look-up.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from localcluster.build import HERE, BuildFailed, cache_root
from localcluster.programs import KATIB

UPSTREAM = "github.com/kubeflow/katib"
PINS = HERE / KATIB.folder
PYTHON_VERSION = "3.11"  # the services' Dockerfiles: FROM python:3.11-slim
# The Dockerfiles' PYTHONPATH, relative to the module's root.
PYTHON_PATH = (".", "pkg/apis/manager/v1beta1/python", "pkg/apis/manager/health/python")
UV = HERE.parent / ".tools" / "bin" / "uv"


@dataclass(frozen=True)
class PythonService:
    """One of Katib's Python images: its repository name, its ``cmd`` folder, its lock."""

    image: str
    cmd: str
    lock: str


PYTHON_SERVICES = (
    # random and tpe (katib-config.yaml of v0.19.0: suggestion-hyperopt)
    PythonService("suggestion-hyperopt", "cmd/suggestion/hyperopt/v1beta1", "hyperopt.txt"),
    # grid and multivariate-tpe (suggestion-optuna)
    PythonService("suggestion-optuna", "cmd/suggestion/optuna/v1beta1", "optuna.txt"),
    # early stopping (earlystopping-medianstop)
    PythonService("earlystopping-medianstop", "cmd/earlystopping/medianstop/v1beta1",
                  "medianstop.txt"),
)
MYSQL_ENTRYPOINT = PINS / "mysql-entrypoint.sh"
MARIADB_PROGRAMS = ("mariadbd", "mariadb-install-db", "my_print_defaults")


def _uv() -> str:
    found = shutil.which("uv") or (str(UV) if UV.exists() else None)
    if found is None:
        raise BuildFailed("no uv to build Katib's Python services: run `make setup`")
    return found


def _digest(module_dir: Path) -> str:
    h = hashlib.sha256(str(module_dir).encode())
    for service in PYTHON_SERVICES:
        h.update(json.dumps([service.image, service.cmd]).encode())
        h.update((PINS / "python" / service.lock).read_bytes())
    return h.hexdigest()[:16]


def build_python_services(module_dir: Path, *, log=None) -> dict[str, Path]:
    """Each Python service's program (a script running its ``main.py``), built now where the
    cache has none for these locks."""
    out = cache_root() / f"katib-python-{_digest(module_dir)}"
    bin_dir = out / "bin"
    done = out / "build.json"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            started = time.monotonic()
            (log or print)(f"building Katib's Python services ({len(PYTHON_SERVICES)}) on "
                           f"Python {PYTHON_VERSION}: a minute the first time, then cached in "
                           f"{out}")
            bin_dir.mkdir(exist_ok=True)
            for service in PYTHON_SERVICES:
                _build_one(service, module_dir, out)
            done.write_text(json.dumps({"seconds": round(time.monotonic() - started, 1),
                                        "services": [s.image for s in PYTHON_SERVICES]}))
    return {s.image: bin_dir / s.image for s in PYTHON_SERVICES}


def _build_one(service: PythonService, module_dir: Path, out: Path) -> None:
    venv = out / service.image
    shutil.rmtree(venv, ignore_errors=True)
    log_file = out / f"{service.image}.log"
    with open(log_file, "w") as handle:
        for argv in ([_uv(), "venv", "--quiet", "--python", PYTHON_VERSION, str(venv)],
                     [_uv(), "pip", "sync", "--quiet", "--python", str(venv / "bin" / "python"),
                      str(PINS / "python" / service.lock)]):
            if subprocess.run(argv, stdout=handle, stderr=subprocess.STDOUT).returncode:
                raise BuildFailed(f"{' '.join(argv[:3])} for Katib's {service.image} failed; "
                                  f"its output: {log_file}")
    path = ":".join(str(module_dir / part) for part in PYTHON_PATH)
    script = out / "bin" / service.image
    # The module cache is read-only: no .pyc files beside the sources.
    script.write_text(
        "#!/bin/sh\n"
        f"# Katib's {service.image} image: python main.py in {service.cmd}.\n"
        f"export PYTHONPATH={path} PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1\n"
        f"cd {module_dir / service.cmd} && exec {venv / 'bin' / 'python'} main.py \"$@\"\n")
    script.chmod(0o755)


def mysql_program() -> Path:
    """The program for ``katib-mysql``'s image; MariaDB must be installed: the server, and
    the ``my_print_defaults`` that ``mariadb-install-db`` runs first (Debian packages it in
    ``mariadb-client-core``; without it the first start fails before making any table)."""
    path = os.environ.get("PATH", "") + ":/usr/sbin"
    missing = [p for p in MARIADB_PROGRAMS if shutil.which(p, path=path) is None]
    if missing:
        raise BuildFailed(f"no {', '.join(missing)} for Katib's database: `apt-get install "
                          "mariadb-server-core mariadb-client-core` (`make cluster-build` does)")
    return MYSQL_ENTRYPOINT
