"""The wheel as a pip user has it, run from a folder of the user's own: one fresh venv (Python
3.12, else 3.11) with the wheel pip-installed without extras, at the lock's versions (uv.lock's
base, as pip constraints: tests/test_dependency_ranges.py installs the range's two ends).

Every command runs from a temporary folder outside the checkout that holds the user's own
``pipelines``, ``serving`` and ``katib`` packages and is first on ``sys.path`` (the folder of
the user's script; ``PYTHONPATH`` for the console script): the installed package must
import only ``fmnist_kfp.*``. There: ``--version``; ``compile``; ``run --host`` against a port
nobody listens on (it fails reaching the host, compiling in memory: no compiled file is
needed); the Python API compiling for the user's image; the compiled components composed with
a component of the user's, compiled with kfp. Also: the wheel installs one top-level package,
and resolves beside the newest kfp and beside ``kubeflow[pipelines]`` (pip dry runs).

Needs the package index (pip, uv). About a minute, most of it the installs."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from fmnist_kfp import __version__
from tests.test_install import (  # noqa: F401 - wheel: the session's built wheel (a fixture)
    COMPOSE,
    COMPOSED_COMPONENTS,
    PIP_TIMEOUT,
    ROOT,
    _checked,
    a_user_python,
    find_python,
    uv_binary,
    wheel,
)

pytestmark = pytest.mark.install

USER_IMAGE = "registry.example.com/team/fmnist:1.0"
RELEASE_IMAGES = "ghcr.io/fmnist-kfp/fmnist-kfp"
# The packages a user's project may well have, named as this package's subpackages are.
USER_PACKAGES = {"pipelines": 'cluster_arguments = "the user\'s"\n',
                 "serving": 'NAME = "the user\'s serving"\n',
                 "katib": 'NAME = "the user\'s katib"\n'}


class UserVenv:
    def __init__(self, root: Path, home: Path):
        self.root, self.home = root, home
        self.python = root / "bin" / "python"
        self.cli = root / "bin" / "fmnist-kfp"
        # The user's own packages, first on sys.path.
        for name, source in USER_PACKAGES.items():
            (home / name).mkdir(parents=True, exist_ok=True)
            (home / name / "__init__.py").write_text(source)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("FMNIST_COMPONENT_IMAGE", "FMNIST_GPU_IMAGE", "VIRTUAL_ENV")}
        return {**env, "PYTHONPATH": str(self.home), "HOME": str(self.home)}

    def run(self, *args, timeout: float = 180) -> subprocess.CompletedProcess:
        return subprocess.run([str(a) for a in args], capture_output=True, text=True,
                              timeout=timeout, cwd=self.home, env=self.env())

    def ok(self, *args, **kwargs) -> subprocess.CompletedProcess:
        done = self.run(*args, **kwargs)
        assert done.returncode == 0, f"{args}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        return done

    def script(self, code: str, *argv) -> subprocess.CompletedProcess:
        """``code`` as the user's own script in their folder (kfp reads a component's source
        from its file)."""
        path = self.home / "my_script.py"
        path.write_text(textwrap.dedent(code))
        return self.ok(self.python, path, *argv)


@pytest.fixture(scope="module")
def user(wheel, tmp_path_factory) -> UserVenv:  # noqa: F811 - the fixture
    python = a_user_python()
    uv = uv_binary()
    root = tmp_path_factory.mktemp("user-venv")
    # uv makes the venv (with a current pip: --seed); the install is pip's, as a user's is.
    _checked(uv, "venv", "--quiet", "--seed", "--python", python, root, timeout=PIP_TIMEOUT)
    constraints = root / "lock-constraints.txt"
    _checked(uv, "export", "--frozen", "--no-default-groups", "--no-emit-project",
             "--no-hashes", "--no-header", "--no-annotate", "--output-file", constraints,
             cwd=ROOT, timeout=120)
    _checked(root / "bin/python", "-m", "pip", "install", "--quiet", "--no-compile",
             "--constraint", constraints, wheel, timeout=PIP_TIMEOUT)
    return UserVenv(root, tmp_path_factory.mktemp("user-home"))


def test_the_cli_runs_beside_the_users_own_packages(user):
    assert user.ok(user.cli, "--version").stdout == f"fmnist-kfp {__version__}\n"
    out = user.home / "compiled"
    user.ok(user.cli, "compile", "--output-dir", out)
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*.yaml"))
    assert written == sorted(str(p.relative_to(ROOT / "compiled"))
                             for p in (ROOT / "compiled").rglob("*.yaml"))
    # No compiled file anywhere near: the pipeline is compiled in memory, then the host fails.
    done = user.run(user.cli, "run", "--host", "http://127.0.0.1:9", "--epochs", "12")
    assert done.returncode != 0
    assert "cannot reach Kubeflow Pipelines at http://127.0.0.1:9" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "No such file" not in done.stderr


def test_what_a_pip_user_is_told_is_true_of_their_install(user):
    """Issue 40, as a pip user met it (the base install, in a folder of their own): an image
    reference a container runtime would refuse fails compile, writing nothing; `run` given
    both --local and --host names both, not "say where to run"."""
    out = user.home / "refused"
    done = user.run(user.cli, "compile", "--output-dir", out, "--image",
                    "registry.example.com/ml/fmnist-kfp:")
    assert done.returncode == 2 and not out.exists()
    assert "is not an image reference: it ends in ':' with nothing after it" in done.stderr
    done = user.run(user.cli, "run", "--local", "--host", "http://127.0.0.1:9")
    assert done.returncode == 2
    assert "--local and --host: give one" in done.stderr, done.stderr


def test_the_python_api_compiles_for_the_users_image(user):
    found = json.loads(user.script(f"""
        import json, pathlib, sys
        import pipelines  # the user's
        from fmnist_kfp.pipelines import cluster_arguments, compile_pipeline

        assert pipelines.cluster_arguments == "the user's"
        assert cluster_arguments(epochs=1) == {{"epochs": 1}}
        path = compile_pipeline("mine.yaml", image={USER_IMAGE!r})
        text = pathlib.Path(path).read_text()
        print(json.dumps({{"path": path, "image": text.count({USER_IMAGE!r} + "\\n"),
                          "gpu": text.count({USER_IMAGE!r} + "-gpu"),
                          "release": text.count({RELEASE_IMAGES!r}),
                          "heavy": sorted(m for m in sys.modules
                                          if m.split(".")[0] in ("tensorflow", "kserve"))}}))
    """).stdout)
    assert found["path"] == "mine.yaml"
    assert found["image"] > 0 and found["gpu"] > 0, found
    assert found["release"] == 0 and found["heavy"] == [], found


def test_the_compiled_components_compose_with_the_users_own(user):
    done = user.script(COMPOSE, ROOT / "compiled/components", user.home / "composed.yaml")
    composed = json.loads(done.stdout)
    assert len(composed["loaded"]) == len(list((ROOT / "compiled/components").glob("*.yaml")))
    assert composed["components"] == COMPOSED_COMPONENTS
    assert composed["images"] == ["ghcr.io/fmnist-kfp/fmnist-kfp:" + __version__,
                                  "python:3.12-slim"]
    assert composed["pvc"] == "fmnist-data"


def test_the_wheel_installs_one_top_level_package(user):
    shown = user.ok(user.python, "-m", "pip", "show", "--files", "fmnist-kfp").stdout
    files = shown.split("Files:", 1)[1].split()
    top = {f.split("/")[0] for f in files
           if not f.startswith("..") and ".dist-info/" not in f}
    assert top == {"fmnist_kfp"}
    assert "../../../bin/fmnist-kfp" in files


@pytest.mark.parametrize("beside", ["kfp==2.17.3", "kubeflow[pipelines]==0.5.0"])
def test_the_wheel_resolves_beside(user, wheel, beside):  # noqa: F811 - the fixture
    """A user's own kfp (the newest the index serves) or the Kubeflow SDK's pipelines extra
    (kfp[kubernetes] 2.17.x): pip finds one resolution with the wheel."""
    done = user.ok(user.python, "-m", "pip", "install", "--dry-run", "--ignore-installed",
                   "--quiet", "--report", "-", wheel, beside,
                   timeout=PIP_TIMEOUT)
    report = json.loads(done.stdout)
    versions = {i["metadata"]["name"].lower(): i["metadata"]["version"]
                for i in report["install"]}
    assert versions["fmnist-kfp"] == __version__
    assert versions["kfp"].startswith("2.17.")
    assert versions["kfp-kubernetes"].split(".")[:2] == versions["kfp"].split(".")[:2]
