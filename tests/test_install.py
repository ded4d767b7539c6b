"""The wheel as users get it, installed with plain pip on the supported Pythons (3.10-3.13).

The base install (no extras) holds none of the extras' packages and passes ``pip check``; it
prints its version, compiles what the full install compiles, runs the Python API, submits a run,
uploads, schedules and checks a cluster (against the KFP API and API server stand-ins, running in
this process), and refuses each command that needs an extra, naming it (exit 2, no traceback).
``pip install --dry-run '<wheel>[all]'`` resolves on each Python.

One wheel per session (``uv build``, the uv ``make`` uses); a fresh venv per Python with a
current pip (it reads PEP 658 metadata where the index serves it, as pypi.org does, so the dry
run then downloads no big wheel), two Pythons at a time; pip's cache makes reruns fast. Needs the
package index. An interpreter is looked for where ``make`` runs (the one under these tests),
under pyenv and on the PATH; a missing one fails the test where ``CI=true`` and skips it
elsewhere (as tests/conftest.py does for the real data). ``make test`` installs on the
oldest and the newest; ``make install-check PYTHON_VERSION=3.12`` on the one it names (GitHub
CI's matrix runs every supported Python)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from fmnist_kfp import __version__
from tests.conftest import IN_CI
from tests.fmnist_kfp.test_extras import NEEDS, extra_distributions
from tests.standins.kfp import API, KfpStandIn

pytestmark = pytest.mark.install

ROOT = Path(__file__).resolve().parents[1]
# Every Python the classifiers name. `make test` installs on the ends of that range (where old
# floors and new releases break first); `make install-check PYTHON_VERSION=3.X` on the one it
# names (GitHub CI's matrix runs it on each), through $FMNIST_INSTALL_PYTHONS.
SUPPORTED = [c.rsplit(" :: ", 1)[1]
             for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["classifiers"]
             if c.startswith("Programming Language :: Python :: 3.")]
CHOSEN = os.environ.get("FMNIST_INSTALL_PYTHONS", "").split() or [SUPPORTED[0], SUPPORTED[-1]]
if not set(CHOSEN) <= set(SUPPORTED):
    raise pytest.UsageError(f"FMNIST_INSTALL_PYTHONS={' '.join(CHOSEN)}: the package supports "
                            f"{', '.join(SUPPORTED)} (pyproject.toml's classifiers)")
PYTHONS = [pytest.param(v, id=f"py{v}") for v in CHOSEN]
# The heaviest, by module; tests/fmnist_kfp/test_extras.py derives every extra's distributions.
HEAVY = ("tensorflow", "kserve", "optuna", "tensorflow_datasets")
# Seconds. The [all] dry run downloads ~810 MB of wheels from an index that serves no PEP 658
# metadata (pip then reads each wheel), only the metadata from pypi.org.
PIP_TIMEOUT = 600


def _run(*args, timeout: float = 120, env: dict | None = None,
         **kwargs) -> subprocess.CompletedProcess:
    """``args`` as a child process; never with PYTHONPATH (the source tree is not installed)."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if k != "PYTHONPATH"}
    return subprocess.run([str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, env=env, **kwargs)


def _checked(*args, **kwargs) -> subprocess.CompletedProcess:
    done = _run(*args, **kwargs)
    assert done.returncode == 0, f"{args}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


def _version_of(python: str) -> str:
    done = _run(python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])", timeout=30)
    return done.stdout.strip() if done.returncode == 0 else ""


def find_python(version: str) -> str | None:
    """A ``python{version}``: the one under these tests, pyenv's (newest patch first), or
    the PATH's."""
    candidates = []
    if _version_of(sys.executable) == version:
        candidates.append(getattr(sys, "_base_executable", sys.executable))
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    candidates += sorted(pyenv.glob(f"{version}.*/bin/python"), reverse=True,
                         key=lambda p: [int(n) if n.isdigit() else -1
                                        for n in p.parts[-3].split(".")])
    candidates.append(shutil.which(f"python{version}"))
    return next((str(c) for c in candidates if c and _version_of(str(c)) == version), None)


def a_user_python() -> str:
    """The interpreter a new user's venv is made with: Python 3.12, else 3.11; without
    either the test is skipped (failed in CI)."""
    python = find_python("3.12") or find_python("3.11")
    if python is None:
        message = "no Python 3.12 or 3.11: looked under pyenv and on the PATH"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return python


def uv_binary() -> str:
    uv = shutil.which("uv") or str(ROOT / ".tools/bin/uv")  # as tools/release.py finds it
    if not Path(uv).exists() and shutil.which(uv) is None:
        pytest.fail("no uv to build the wheel: run `make setup` (it installs uv into .tools)")
    return uv


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    uv = uv_binary()
    out = tmp_path_factory.mktemp("wheel")
    _checked(uv, "build", "--wheel", "--out-dir", out, ROOT, timeout=300)
    [built] = out.glob("fmnist_kfp-*.whl")
    return built


class BaseInstall:
    """A fresh venv with the wheel installed, without extras; and, when asked for, what
    ``pip install --dry-run '<wheel>[all]'`` reported there and how long it took."""

    def __init__(self, root: Path, wheel: Path):
        self.root = root
        self.wheel = wheel
        self.python = root / "bin" / "python"
        self.cli = root / "bin" / "fmnist-kfp"
        self.resolved: dict[str, str] = {}  # [all]'s distributions: name -> version
        self.resolve_seconds = 0.0

    @classmethod
    def make(cls, python: str, root: Path, wheel: Path) -> BaseInstall:
        # A current pip (a venv's bundled one may not read PEP 658/714 metadata); no
        # bytecode: faster.
        _checked(python, "-m", "venv", root, timeout=PIP_TIMEOUT)
        _checked(root / "bin/python", "-m", "pip", "install", "--quiet", "--upgrade", "pip",
                 timeout=PIP_TIMEOUT)
        _checked(root / "bin/python", "-m", "pip", "install", "--quiet", "--no-compile", wheel,
                 timeout=PIP_TIMEOUT)
        return cls(root, wheel)

    def resolve_all(self) -> BaseInstall:
        report = self.root / "all-report.json"
        started = time.monotonic()
        _checked(self.python, "-m", "pip", "install", "--dry-run", "--ignore-installed",
                 "--quiet", "--report", report, f"{self.wheel}[all]", timeout=PIP_TIMEOUT)
        self.resolve_seconds = time.monotonic() - started
        self.resolved = {item["metadata"]["name"].lower().replace("_", "-"):
                         item["metadata"]["version"]
                         for item in json.loads(report.read_text())["install"]}
        return self

    def run(self, *args, **kwargs) -> subprocess.CompletedProcess:
        return _run(self.cli, *args, **kwargs)

    def script(self, code: str, **kwargs) -> subprocess.CompletedProcess:
        """Runs ``code`` in the venv, away from the source tree (the installed package only)."""
        return _checked(self.python, "-c", textwrap.dedent(code), cwd=self.root, **kwargs)


class Installs:
    """The base install of each Python these tests were selected for, and then its [all] dry
    run where test_everything_resolves_with_pip is selected: made in the background, two at a
    time (mostly waiting on the index), every install queued before any dry run."""

    def __init__(self, request, wheel: Path, tmp_path_factory, pool: ThreadPoolExecutor):
        selected: dict[str, bool] = {}  # version -> its dry run is wanted
        for item in request.session.items:
            version = getattr(item, "callspec", None) and item.callspec.params.get("version")
            if item.module.__name__ == __name__ and version:
                wanted = item.originalname == "test_everything_resolves_with_pip"
                selected[version] = selected.get(version, False) or wanted
        self.pythons = {version: find_python(version) for version in selected}
        self.installs = {version: pool.submit(BaseInstall.make, python,
                                              tmp_path_factory.mktemp(f"base-py{version}"),
                                              wheel)
                         for version, python in self.pythons.items() if python}
        self.resolutions = {version: pool.submit(lambda made: made.result().resolve_all(), made)
                            for version, made in self.installs.items() if selected[version]}

    def _python(self, version: str) -> None:
        if self.pythons.get(version) is None:
            message = (f"no Python {version}: looked under these tests, in "
                       "$PYENV_ROOT/versions (~/.pyenv) and on the PATH")
            if IN_CI:
                pytest.fail(message)
            pytest.skip(message)

    def base(self, version: str) -> BaseInstall:
        self._python(version)
        return self.installs[version].result()

    def resolved(self, version: str) -> BaseInstall:
        self._python(version)
        return self.resolutions[version].result()


@pytest.fixture(scope="session")
def installs(request, wheel, tmp_path_factory):
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield Installs(request, wheel, tmp_path_factory, pool)


@pytest.fixture(scope="session")
def compiled_here(tmp_path_factory) -> Path:
    """What ``fmnist-kfp compile`` writes from the development install (every extra)."""
    from fmnist_kfp.pipelines.compile import compile_all

    out = tmp_path_factory.mktemp("compiled-here")
    compile_all(str(out))
    return out


def _files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file()}


def same_but_sdk_version(directory: Path) -> dict[str, bytes]:
    """:func:`_files`, each without its ``sdkVersion:`` line: it names the SDK that compiled
    the file (``kfp-2.17.3``), which the dependency range lets differ from the lock's."""
    return {name: b"".join(line for line in text.splitlines(keepends=True)
                           if not line.startswith(b"sdkVersion: "))
            for name, text in _files(directory).items()}


# A user's pipeline of this package's compiled components (docs/python-api.md, "One component
# in your pipeline") and a component of their own, compiled with kfp; argv: the components'
# folder, the package to write. Prints the loaded components' names, and the compiled
# pipeline's components and the images its executors run.
COMPOSE = """
import json, pathlib, sys
import yaml
from kfp import compiler, components, dsl, kubernetes

folder, package = pathlib.Path(sys.argv[1]), sys.argv[2]
loaded = {p.stem: components.load_component_from_file(str(p))
          for p in sorted(folder.glob("*.yaml"))}
ingest, train = loaded["ingest-fashion-mnist"], loaded["train-model"]

@dsl.component(base_image="python:3.12-slim")
def describe(model: dsl.Input[dsl.Model], note: str) -> str:
    return f"{note}: {model.uri}"

@dsl.pipeline(name="my-training")
def my_training(model_type: str = "batchnorm"):
    data = ingest()
    task = train(dataset=data.outputs["dataset"], model_type=model_type, epochs=1)
    kubernetes.mount_pvc(task, pvc_name="fmnist-data", mount_path="/mnt/fmnist")
    task.set_env_variable("FMNIST_PVC_NAME", "fmnist-data")
    describe(model=task.outputs["model"], note="mine")

compiler.Compiler().compile(my_training, package)
spec, platform = yaml.safe_load_all(pathlib.Path(package).read_text())
print(json.dumps({
    "loaded": sorted(c.name for c in loaded.values()),
    "components": sorted(spec["components"]),
    "images": sorted({e["container"]["image"]
                      for e in spec["deploymentSpec"]["executors"].values()}),
    "pvc": platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"][
        "exec-train-model"]["pvcMount"][0]["constant"],
}))
"""
COMPOSED_COMPONENTS = ["comp-describe", "comp-ingest-fashion-mnist", "comp-train-model"]


@pytest.mark.parametrize("version", PYTHONS)
def test_the_base_install_holds_no_extras_package(installs, version):
    base = installs.base(version)
    assert base.run("--version").stdout == f"fmnist-kfp {__version__}\n"
    found = json.loads(base.script(f"""
        import importlib.metadata, importlib.util, json, sys
        assert sys.version_info[:2] == {tuple(map(int, version.split(".")))}
        installed = []
        for name in {sorted(extra_distributions())!r}:
            try:
                importlib.metadata.distribution(name)
                installed.append(name)
            except importlib.metadata.PackageNotFoundError:
                pass
        print(json.dumps({{"importable": [m for m in {HEAVY!r}
                                          if importlib.util.find_spec(m)],
                          "installed": installed}}))
    """).stdout)
    assert found == {"importable": [], "installed": []}
    _checked(base.python, "-m", "pip", "check")  # the base's own requirements all agree


@pytest.mark.parametrize("version", PYTHONS)
def test_the_base_install_compiles_and_runs_the_python_api(installs, compiled_here, version,
                                                           tmp_path):
    base = installs.base(version)
    out = tmp_path / "compiled"
    done = base.run("compile", "--output-dir", out, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # The same YAML as with every extra (pip may pick a newer kfp than the lock: sdkVersion).
    assert same_but_sdk_version(out) == same_but_sdk_version(compiled_here)
    loaded = json.loads(base.script(f"""
        import json, pathlib, sys
        import kfp, yaml
        from kfp import components
        from fmnist_kfp.pipelines import cluster_arguments, fashion_mnist_pipeline

        assert cluster_arguments(epochs=3) == {{"epochs": 3}}
        assert cluster_arguments(tune=True, tuning={{"algorithm": "cmaes"}},
                                 serving={{"min_replicas": 0}}) == {{
            "tune": True, "tuning": {{"algorithm": "cmaes"}}, "serving": {{"min_replicas": 0}}}}
        out = pathlib.Path({str(out)!r})
        kfp.compiler.Compiler().compile(fashion_mnist_pipeline, str(out / "api.yaml"))
        spec = next(yaml.safe_load_all((out / "api.yaml").read_text()))
        names = [components.load_component_from_file(str(p)).name
                 for p in sorted((out / "components").glob("*.yaml"))]
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
        print(json.dumps({{"pipeline": spec["pipelineInfo"]["name"], "components": names,
                          "heavy": heavy}}))
    """).stdout)
    assert loaded["pipeline"] == "fashion-mnist-training"
    assert len(loaded["components"]) == len(list((compiled_here / "components").iterdir()))
    assert loaded["heavy"] == []


def declared_ranges() -> dict[str, SpecifierSet]:
    """Each distribution pyproject.toml names (base and extras) -> its range (all of a name's
    ranges intersected)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    ranges: dict[str, SpecifierSet] = {}
    for line in [*project["dependencies"],
                 *(r for extra in project["optional-dependencies"].values() for r in extra)]:
        req = Requirement(line)
        name = req.name.lower().replace("_", "-")
        ranges[name] = ranges.get(name, SpecifierSet()) & req.specifier
    return ranges


def _no_traceback(done: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in done.stdout + done.stderr, done.stderr


@pytest.mark.parametrize("version", PYTHONS)
def test_the_base_install_submits_uploads_schedules_and_checks_a_cluster(
        installs, compiled_here, version, tmp_path):
    """Against the stand-ins of the KFP API (tests/standins/kfp.py) and of the API server with
    KServe (tests/standins/kserve.py, set up as tests/fmnist_kfp/preflight/cluster.py's ready
    cluster)."""
    from tests.fmnist_kfp.preflight.cluster import NS, ready_cluster
    from tests.standins.kserve import KServeStandIn

    base = installs.base(version)
    package = compiled_here / "fashion_mnist_pipeline.yaml"
    env = {**os.environ, "HOME": str(tmp_path), "KF_PIPELINES_TOKEN": "token-123"}
    for name in ("FMNIST_CREDENTIALS_SECRET", "FMNIST_PVC_NAME"):
        env.pop(name, None)
    with KfpStandIn() as kfp, KServeStandIn(rbac=True) as cluster:
        ready_cluster(cluster)
        host = ["--host", kfp.url]
        commands = [
            ["run", *host, "--package", package, "--epochs", "3", "--wait"],
            ["upload", *host, "--package", package, "--name", "fmnist"],
            ["schedule", "create", *host, "--package", package, "--cron", "0 3 * * *"],
            ["schedule", "list", *host],
            ["schedule", "disable", *host, "--id", "recurring-1"],
            ["preflight", *host, "--kubeconfig", cluster.kubeconfig(NS)],
        ]
        for command in commands:
            done = base.run(*command, env=env, cwd=tmp_path)
            assert done.returncode == 0, (command, done.stderr[-3000:], done.stdout[-3000:])
            _no_traceback(done)
        assert "ready for a first run" in done.stdout
        [run] = kfp.find("POST", f"{API}/runs")
        assert run["body"]["runtime_config"]["parameters"] == {"epochs": 3,
                                                                "backend": "kubernetes"}
        assert run["authorization"] == "Bearer token-123"
        assert kfp.find("POST", f"{API}/pipelines/upload")
        assert kfp.find("POST", f"{API}/recurringruns/recurring-1:disable")
    refused = base.run("lineage", tmp_path, env=env, cwd=tmp_path)  # no run there: exit 2
    assert refused.returncode == 2 and "not inside a local pipeline run" in refused.stderr
    _no_traceback(refused)


@pytest.mark.parametrize("version", PYTHONS)
def test_a_command_that_needs_an_extra_names_it(installs, version, tmp_path):
    base = installs.base(version)
    for argv, extra, command in NEEDS:
        done = base.run(*argv, cwd=tmp_path)
        assert done.returncode == 2, (argv, done.stderr)
        assert done.stderr.startswith(f"error: `{command}` needs the `{extra}` extra: pip "
                                      f"install 'fmnist-kfp[{extra}]' (not installed: "), argv
        _no_traceback(done)


@pytest.mark.parametrize("version", PYTHONS)
def test_everything_resolves_with_pip(installs, version):
    """``[all]`` (what the image installs) resolves with pip's own resolver; TFDS is left out
    on Python 3.10, where its tensorflow-metadata caps protobuf below kfp-kubernetes' floor.
    (The dry run runs in the background: see :class:`Installs`.)"""
    base = installs.resolved(version)
    versions = base.resolved
    print(f"pip resolved {len(versions)} distributions for [all] on Python {version} in "
          f"{base.resolve_seconds:.1f} s")
    declared = declared_ranges()
    outside = {name: versions.get(name) for name in (
        "tensorflow", "kfp", "kfp-kubernetes", "kserve", "kubeflow-katib-api", "tf-keras")
        if not declared[name].contains(versions.get(name, "0"), prereleases=False)}
    assert outside == {}, declared
    assert versions["protobuf"].startswith("6.")
    assert ("tensorflow-datasets" in versions) == (version != "3.10")
