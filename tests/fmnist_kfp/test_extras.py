"""The extras (pyproject.toml) as the installed metadata declares them: a command that needs one
that is missing says which and how to install it (exit 2, no traceback); the base commands and
the Python API import none of their packages. tests/test_install.py checks the same in real
base installs, built with pip; these run in the development environment, in seconds."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from fmnist_kfp import __version__, extras
from fmnist_kfp.cli import main as cli_main
from fmnist_kfp.errors import MissingExtraError, UserInputError

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = ("training", "serving", "tuning", "all")
# A command that needs an extra, and the extra it names.
NEEDS = [
    (["run", "--local"], "all", "fmnist-kfp run --local"),
    (["serve"], "serving", "fmnist-kfp serve"),
    (["deployment", "status"], "serving", "fmnist-kfp deployment"),
    (["tensorboard"], "training", "fmnist-kfp tensorboard"),
    (["ingest", "--output", "dataset"], "training", "fmnist-kfp ingest"),
]


def extra_distributions() -> set[str]:
    """What the extras install beyond the base, by canonical name: the packages the base
    install does without."""
    requires = [Requirement(line) for line in metadata.requires(extras.DISTRIBUTION)]
    base = {canonicalize_name(r.name) for r in requires if r.marker is None}
    return {canonicalize_name(r.name) for r in requires if r.marker is not None} - base


def extra_modules() -> list[str]:
    """The top-level modules of :func:`extra_distributions` installed here."""
    wanted = extra_distributions()
    return sorted(module for module, names in metadata.packages_distributions().items()
                  if wanted & {canonicalize_name(n) for n in names}
                  and not module.startswith("_") and module not in sys.stdlib_module_names)


def test_the_development_install_has_every_extra():
    """``make setup`` syncs ``--extra all``; tuning nests training (pyproject.toml)."""
    assert {e: extras.missing(e) for e in EXTRAS} == {e: [] for e in EXTRAS}
    assert set(EXTRAS) <= set(metadata.metadata(extras.DISTRIBUTION).get_all("Provides-Extra"))


def test_the_extras_hold_what_each_part_imports():
    assert {"tensorflow", "kserve", "optuna", "tensorflow-datasets", "kubeflow-katib-api",
            "kubeflow-training", "numpy"} <= extra_distributions()
    assert {"tensorflow", "tf_keras", "kserve", "optuna", "tensorflow_datasets",
            "kubeflow_katib_api", "numpy", "PIL", "matplotlib"} <= set(extra_modules())


def _without(monkeypatch, *names: str) -> None:
    """As if ``names`` (distributions) were not installed."""
    real = metadata.distribution

    def distribution(name):
        if canonicalize_name(name) in names:
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(extras.metadata, "distribution", distribution)


def test_a_missing_distribution_names_the_extra_and_the_pip_command(monkeypatch):
    _without(monkeypatch, "kserve", "ai-edge-litert")
    assert extras.missing("serving") == ["ai-edge-litert", "kserve"]
    assert extras.missing("training") == []
    with pytest.raises(MissingExtraError) as raised:
        extras.require("serving", "fmnist-kfp serve")
    assert str(raised.value) == ("`fmnist-kfp serve` needs the `serving` extra: pip install "
                                 "'fmnist-kfp[serving]' (not installed: ai-edge-litert, kserve)")
    assert isinstance(raised.value, UserInputError)  # the CLI's exit 2


def test_an_extra_that_installs_nothing_on_this_python_lacks_nothing(monkeypatch):
    """TFDS is in the training extra on Python 3.11+ only: on 3.10 it is not missing."""
    monkeypatch.setattr(extras.metadata, "requires", lambda name: [
        "kfp==2.17.0", "numpy>=1.26; extra == 'training'",
        "tensorflow-datasets==4.9.10; python_version < '3.0' and extra == 'training'"])
    _without(monkeypatch, "tensorflow-datasets")
    assert extras.missing("training") == []


@pytest.mark.parametrize(("argv", "extra", "command"), NEEDS)
def test_a_command_without_its_extra_says_which_to_install(monkeypatch, capsys, tmp_path, argv,
                                                           extra, command):
    monkeypatch.chdir(tmp_path)
    _without(monkeypatch, "tensorflow", "kserve", "optuna")
    assert cli_main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"error: `{command}` needs the `{extra}` extra: pip install "
                                   f"'fmnist-kfp[{extra}]' (not installed: ")
    assert "Traceback" not in captured.err + captured.out
    assert not list(tmp_path.iterdir())  # nothing was started or written


def test_version(capsys):
    with pytest.raises(SystemExit) as exited:
        cli_main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"fmnist-kfp {__version__}\n"


def test_the_base_commands_and_the_python_api_import_no_extras_package(tmp_path):
    """Here every extra is installed, so a child process makes their modules unimportable
    (``sys.modules[name] = None``) and then compiles, validates and builds what the base install
    does: any import of one fails."""
    script = textwrap.dedent(f"""
        import sys
        for name in {extra_modules()!r}:
            sys.modules[name] = None
        from fmnist_kfp.cli import main
        assert main(["compile", "--output-dir", {str(tmp_path)!r}]) == 0
        assert main(["lineage", {str(tmp_path)!r}]) == 2  # no run there: a UserInputError
        from fmnist_kfp import pipelines
        for name in pipelines.__all__:
            getattr(pipelines, name)
        pipelines.make_pipeline()
        for values in ({{"epochs": 3}}, {{"tune": True, "tuning": {{"algorithm": "cmaes"}}}},
                       {{"tune": True, "backend": "local", "tuning": {{"max_trials": 4}}}},
                       {{"serving": {{"min_replicas": 0, "deployment_mode": "Serverless"}}}},
                       {{"strategy": "parameter_server", "num_workers": 2}},
                       {{"kubernetes": {{"namespace": "team-a", "pvc_name": "data"}}}}):
            pipelines.cluster_arguments(**values)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "fashion_mnist_pipeline.yaml").exists()
