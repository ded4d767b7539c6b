"""The dependency ranges pyproject.toml declares, held at both ends: uv.lock pins one resolution
(the development venv, tests/test_installed_wheel.py), a user's resolver may pick any other.

For each end, a fresh venv (Python 3.12, else 3.11) with the wheel's base (no extras) installed
by uv at ``--resolution lowest-direct`` (the base's own requirements given as direct ones:
kfp 2.15.0, kfp-kubernetes 2.15.0, the lowest kubernetes, httpx, packaging and PyYAML) and at
``--resolution highest`` (the newest the index serves). In it: ``fmnist-kfp --version``;
``fmnist-kfp compile``, which must write what the lock's kfp writes but for ``sdkVersion``;
the Python API (``cluster_arguments``, ``compile_pipeline`` for an explicit image); and the
release's compiled components (``compiled/``, compiled by the lock's kfp) composed with a
component of a user's, compiled by that end's kfp. And ``[all]`` resolves at both ends on the
oldest and newest supported Python (``uv pip compile``, nothing installed).

Needs the package index (uv). About a minute, most of it the two installs and three resolutions
(uv's cache makes reruns faster)."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

from fmnist_kfp import __version__
from tests.test_install import (  # noqa: F401 - wheel, compiled_here: fixtures
    COMPOSE,
    COMPOSED_COMPONENTS,
    PIP_TIMEOUT,
    ROOT,
    _checked,
    a_user_python,
    compiled_here,
    declared_ranges,
    find_python,
    same_but_sdk_version,
    uv_binary,
    wheel,
)

pytestmark = pytest.mark.install

ENDS = ["lowest-direct", "highest"]
IMAGE = "registry.example.com/team/fmnist:1.0"
BASE = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]

# The Python API in the end's venv, away from the checkout; argv: the package to write.
API = f"""
import importlib.metadata as md, json, pathlib, sys
from fmnist_kfp.pipelines import cluster_arguments, compile_pipeline

assert cluster_arguments(epochs=1) == {{"epochs": 1}}
text = pathlib.Path(compile_pipeline(sys.argv[1], image={IMAGE!r})).read_text()
print(json.dumps({{
    "versions": {{d: md.version(d) for d in {sorted(Requirement(r).name for r in BASE)!r}}},
    "image": {IMAGE!r} + "-gpu" in text and {IMAGE!r} + "\\n" in text,
    "release_image": "ghcr.io/fmnist-kfp/fmnist-kfp" in text,
}}))
"""


@pytest.fixture(scope="module", params=ENDS)
def end(request, wheel, tmp_path_factory) -> tuple[str, Path]:  # noqa: F811
    """(the resolution, the venv) with the wheel's base installed at that end."""
    resolution = request.param
    uv = uv_binary()
    root = tmp_path_factory.mktemp(f"venv-{resolution}")
    _checked(uv, "venv", "--quiet", "--python", a_user_python(), root, timeout=PIP_TIMEOUT)
    _checked(uv, "pip", "install", "--quiet", "--python", root / "bin/python",
             "--resolution", resolution, wheel, *BASE, timeout=PIP_TIMEOUT)
    return resolution, root


def _ok(*args, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "FMNIST_COMPONENT_IMAGE", "FMNIST_GPU_IMAGE")}
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)
    assert done.returncode == 0, f"{args}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


def test_the_base_compiles_runs_the_api_and_composes_at_each_end(
        end, compiled_here, tmp_path):  # noqa: F811 - compiled_here: the fixture
    resolution, venv = end
    python, cli = venv / "bin/python", venv / "bin/fmnist-kfp"
    assert _ok(cli, "--version", cwd=tmp_path).stdout == f"fmnist-kfp {__version__}\n"
    _ok(cli, "compile", "--output-dir", tmp_path / "compiled", cwd=tmp_path)
    assert same_but_sdk_version(tmp_path / "compiled") == same_but_sdk_version(compiled_here)

    (tmp_path / "api.py").write_text(textwrap.dedent(API))
    found = json.loads(_ok(python, "api.py", "mine.yaml", cwd=tmp_path).stdout)
    print(f"{resolution}: {found['versions']}")
    assert found["image"] and not found["release_image"], found
    ranges = declared_ranges()
    kfp = found["versions"]["kfp"]
    assert kfp in ranges["kfp"]
    if resolution == "lowest-direct":  # every base requirement at its declared floor
        floors = {Requirement(r).name: min(Version(s.version) for s in Requirement(r).specifier
                                           if s.operator == ">=")
                  for r in BASE}
        assert {name: Version(found["versions"][name]) for name in floors} == floors
    else:
        assert Version(kfp) >= Version("2.17.0")  # at least the lock's

    (tmp_path / "my_pipeline.py").write_text(COMPOSE)
    composed = json.loads(_ok(python, "my_pipeline.py", ROOT / "compiled/components",
                              tmp_path / "composed.yaml", cwd=tmp_path).stdout)
    assert composed["components"] == COMPOSED_COMPONENTS
    assert composed["pvc"] == "fmnist-data"
    spec = (tmp_path / "composed.yaml").read_text()
    assert f"sdkVersion: kfp-{kfp}\n" in spec  # compiled by this end's kfp


def test_everything_resolves_at_both_ends():
    """``[all]`` at the lowest direct versions on Python 3.10 (no TFDS: its marker) and 3.13
    (where old floors lack wheels), and at the newest on 3.13 (tests/test_install.py has pip
    resolve the newest on every Python); a resolution only (``uv pip compile``), at once."""
    uv = uv_binary()

    def compile_all(resolution: str, python: str) -> dict[str, str]:
        done = _checked(uv, "pip", "compile", "--quiet", "--no-header", "--no-annotate",
                        "--extra", "all", "--resolution", resolution, "--python-version",
                        python, ROOT / "pyproject.toml", cwd=ROOT, timeout=PIP_TIMEOUT)
        return dict(line.split(" ;")[0].split("==", 1) for line in done.stdout.splitlines()
                    if "==" in line)

    cases = [("lowest-direct", "3.10"), ("lowest-direct", "3.13"), ("highest", "3.13")]
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        resolved = dict(zip(cases, pool.map(lambda case: compile_all(*case), cases), strict=True))
    ranges = declared_ranges()
    for (resolution, python), versions in resolved.items():
        outside = {name: versions[name] for name in ranges
                   if name in versions and versions[name] not in ranges[name]}
        assert outside == {}, (resolution, python)
        assert ("tensorflow-datasets" in versions) == (python != "3.10")
        if resolution == "lowest-direct":
            assert Version(versions["kfp"]) == min(Version(s.version) for s in ranges["kfp"]
                                                   if s.operator == ">=")
        else:
            assert Version(versions["kfp"]) >= Version("2.17.0")  # at least the lock's
