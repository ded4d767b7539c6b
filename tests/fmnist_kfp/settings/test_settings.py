"""Every setting is defined once: the CLI, the pipeline's signature and docs, the components'
docs, the trainer's flags and the README's tables all come from :mod:`fmnist_kfp.settings`."""

from __future__ import annotations

import dataclasses
import inspect
import shutil
import subprocess
import sys

import pytest
import yaml

from fmnist_kfp.cli import build_parser
from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kfp_components.base import setting_specs
from fmnist_kfp.kfp_components.registry import COMPONENTS
from fmnist_kfp.pipelines.fashion_mnist import make_pipeline
from fmnist_kfp.settings.pipeline import NESTED, PipelineParameters
from fmnist_kfp.settings.schema import coerce
from fmnist_kfp.settings.training import Hyperparameters, TrainingConfig
from tests import ROOT

_ANNOTATIONS = {int: int, float: float, str: str, bool: bool, list: list, dict: dict}


def test_the_pipeline_signature_is_the_parameters_with_their_types_and_defaults():
    signature = inspect.signature(make_pipeline().pipeline_func)
    specs = PipelineParameters.specs()
    assert list(signature.parameters) == [name for name in signature.parameters]
    assert set(signature.parameters) == set(specs), "the pipeline and PipelineParameters differ"
    for name, parameter in signature.parameters.items():
        spec = specs[name]
        assert parameter.annotation is _ANNOTATIONS[spec.kind], name
        assert parameter.default == spec.default, name


def test_the_compiled_pipeline_describes_each_parameter_with_its_setting_help():
    spec = yaml.safe_load_all((ROOT / "compiled" / "fashion_mnist_pipeline.yaml").read_text())
    parameters = next(spec)["root"]["inputDefinitions"]["parameters"]
    for name, setting in PipelineParameters.specs().items():
        assert parameters[name]["description"] == setting.setting.help, name


def test_component_docs_of_settings_are_the_settings_help():
    specs = setting_specs()
    documented = 0
    for folder, component in COMPONENTS.items():
        inputs = component.component_spec.inputs
        for name in (n for n in inputs if n in specs):
            assert inputs[name].description == specs[name].setting.help_in(folder), (
                component.name, name)
            documented += 1
    assert documented >= 20, "components should document their settings from the settings"


def test_every_cli_flag_is_a_setting_with_its_help_and_default():
    run = build_parser()._subparsers._group_actions[0].choices["run"]  # noqa: SLF001
    flags = {action.dest: action for action in run._actions}  # noqa: SLF001
    for name, spec in PipelineParameters.specs().items():
        assert name in flags, f"--{name.replace('_', '-')} is missing"
        assert flags[name].help.startswith(spec.setting.help.replace("%", "%%")), name
        assert f"default {spec.default_text}" in flags[name].help, name


def _flags(*command: str) -> dict:
    """The flags of a (sub)command: ``_flags("schedule", "create")``."""
    parser = build_parser()
    for name in command:
        parser = parser._subparsers._group_actions[0].choices[name]  # noqa: SLF001
    return {action.dest: action for action in parser._actions}  # noqa: SLF001


def test_run_help_shows_the_local_and_the_compiled_defaults():
    """`run` serves --local (PipelineParameters' defaults) and --host (the compiled
    pipeline's: cluster_defaults); where they differ its help shows both, and says which."""
    from fmnist_kfp.settings.pipeline import cluster_defaults

    local, cluster = PipelineParameters(), cluster_defaults()
    flags = _flags("run")
    differ = {name for name in PipelineParameters.specs()
              if getattr(local, name) != getattr(cluster, name)}
    assert {"data_source", "backend", "num_workers"} <= differ
    for name, spec in PipelineParameters.specs().items():
        text = " ".join(flags[name].help.split())
        if name in differ:
            here = dataclasses.replace(spec, default=getattr(local, name)).default_text
            there = dataclasses.replace(spec, default=getattr(cluster, name)).default_text
            assert f"(default {here} with --local, {there} with --host)" in text, name
        else:
            assert text.endswith(f"(default {spec.default_text})"), name
    assert "(default 1 with --local, 2 with --host)" in flags["num_workers"].help
    assert '(default "" with --local, tfds with --host)' in flags["data_source"].help


def test_schedule_help_shows_the_compiled_defaults():
    """A schedule runs the compiled pipeline: its help shows only those defaults."""
    from fmnist_kfp.settings.pipeline import cluster_defaults

    cluster = cluster_defaults()
    flags = _flags("schedule", "create")
    for name, spec in PipelineParameters.specs().items():
        shown = dataclasses.replace(spec, default=getattr(cluster, name)).default_text
        assert " ".join(flags[name].help.split()).endswith(f"(default {shown})"), name
    assert flags["backend"].help.endswith("(default kubernetes)")
    assert flags["num_workers"].help.endswith("(default 2)")
    assert flags["data_source"].help.endswith("(default tfds)")


def test_the_compiled_pipeline_has_the_defaults_the_help_shows():
    """cluster_defaults is what compiled/ holds, so the help's "with --host" is true."""
    from fmnist_kfp.settings.pipeline import cluster_defaults

    spec = next(yaml.safe_load_all((ROOT / "compiled" / "fashion_mnist_pipeline.yaml")
                                   .read_text()))
    compiled = spec["root"]["inputDefinitions"]["parameters"]
    cluster = cluster_defaults()
    for name in ("data_source", "backend", "num_workers", "epochs"):
        assert compiled[name]["defaultValue"] == getattr(cluster, name), name


def test_help_imports_neither_kfp_nor_tensorflow():
    """`fmnist-kfp run --help` stays fast: no kfp (nor its compiler), no pipeline built, no
    TensorFlow."""
    script = ("import sys\n"
              "from fmnist_kfp.cli import main\n"
              "try:\n"
              "    main(['run', '--help'])\n"
              "except SystemExit:\n"
              "    pass\n"
              "heavy = [m for m in sys.modules if m.split('.')[0] in "
              "('kfp', 'tensorflow', 'kfp_components', 'kubernetes')\n"
              "         or m == 'fmnist_kfp.pipelines.fashion_mnist']\n"
              "print('heavy:', sorted(heavy), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "with --host" in done.stdout
    assert "heavy: []" in done.stderr


def test_the_trainer_takes_every_training_setting_as_a_flag():
    from fmnist_kfp.training.trainer import parse_args

    _, config = parse_args(["--data-dir", "d", "--work-dir", "w", "--export-dir", "e",
                            "--epochs", "3", "--augment", "false", "--learning-rate", "0.002"])
    assert config == TrainingConfig(epochs=3, augment=False, learning_rate=0.002)
    defaults = parse_args(["--data-dir", "d", "--work-dir", "w", "--export-dir", "e"])[1]
    assert defaults == TrainingConfig()


def test_the_trainer_and_the_pipeline_share_their_defaults():
    pipeline, trainer = PipelineParameters(), TrainingConfig()
    for name in ("epochs", "precision", "train_examples", *Hyperparameters.names()):
        assert getattr(pipeline, name) == getattr(trainer, name), name
    assert pipeline.training_config("basic") == TrainingConfig(model_type="basic")


@pytest.mark.parametrize(("kind", "value", "expected"), [
    (int, 64.0, 64), (int, 64, 64), (float, 1, 1.0), (bool, True, True), (list, ["a"], ["a"]),
])
def test_json_and_kfp_values_are_typed(kind, value, expected):
    assert coerce(kind, value) == expected


@pytest.mark.parametrize(("kind", "value"), [(int, 64.5), (int, True), (int, "64"),
                                             (bool, "yes"), (float, "nan"), (dict, [1])])
def test_values_of_the_wrong_type_are_refused(kind, value):
    with pytest.raises(ValueError):
        coerce(kind, value)


def test_katib_strings_and_cli_text_are_parsed():
    assert TrainingConfig.typed("batch_size", "64") == 64
    assert TrainingConfig.typed("augment", "false") is False
    assert TrainingConfig.typed("learning_rate", "0.0003") == 0.0003


def test_every_nested_parameter_lists_its_groups_keys():
    for name, group in NESTED.items():
        help_text = PipelineParameters.specs()[name].setting.help
        assert all(key in help_text for key in group.specs()), name
    with pytest.raises(UserInputError, match="unknown kubernetes settings \\['cpus'\\]"):
        PipelineParameters(kubernetes={"cpus": "2"}).nested("kubernetes")


def test_changing_a_default_in_one_place_changes_it_everywhere(tmp_path):
    """Edits the one definition of ``epochs`` in a copy of the package and reads the default
    back from the CLI, the pipeline's compiled parameters, the trainer and the README table."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(
        ".venv", ".tools", ".git", "runs", "__pycache__", "bench", "tests", ".ruff_cache"))
    training = copy / "fmnist_kfp" / "settings" / "training.py"
    text = training.read_text()
    assert 'epochs: int = setting(10, help="Passes' in text
    training.write_text(text.replace('epochs: int = setting(10,', 'epochs: int = setting(17,'))
    script = """
import inspect, yaml
from fmnist_kfp.cli import build_parser
from tools.docs import readme_blocks
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.pipelines.compile import compile_all
run = build_parser()._subparsers._group_actions[0].choices["run"]
[epochs] = [a for a in run._actions if a.dest == "epochs"]
print("cli", epochs.help.split("default ")[-1].rstrip(")"))
compile_all("out")
spec = next(yaml.safe_load_all(open("out/fashion_mnist_pipeline.yaml")))
print("pipeline", spec["root"]["inputDefinitions"]["parameters"]["epochs"]["defaultValue"])
print("trainer", TrainingConfig().epochs)
print("readme", [r for r in readme_blocks()["parameters"].splitlines() if "`epochs`" in r][0])
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=copy, capture_output=True,
                            text=True, env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"},
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert lines["cli"] == "17"
    assert lines["pipeline"] in ("17", "17.0")
    assert lines["trainer"] == "17"
    assert "| `epochs` | `17` |" in lines["readme"]


def test_every_groups_check_across_fields_runs_for_the_pipelines_parameters(monkeypatch):
    """The pipeline's parameters are the groups' fields, flat (KFP's); each group's own
    ``cross_problems`` runs for them, whatever the others do (JobSettings' does not call
    ``super()``: through the MRO, the groups after it would be skipped)."""
    from fmnist_kfp.settings.pipeline import GROUPS

    assert set(GROUPS) == set(PipelineParameters.__bases__)
    for group in GROUPS:
        monkeypatch.setattr(group, "cross_problems",
                            lambda self, name=group.__name__: [f"{name} checked"], raising=False)
    problems = PipelineParameters().problems()
    assert [p for p in problems if p.endswith(" checked")] == [
        f"{group.__name__} checked" for group in GROUPS]
    monkeypatch.undo()
    assert "GPUs were asked for" in " ".join(
        PipelineParameters(gpus_per_worker=1, num_workers=0).problems())


def test_the_validation_split_is_checked_against_the_official_training_files():
    """The up-front rule's count is the official release's (fmnist_kfp/dataset/official.py):
    at most all but one image of each class; derived files (own digests) are left to ingest,
    which counts the files it reads."""
    from fmnist_kfp.dataset.official import NUM_CLASSES, OFFICIAL_FILES
    from fmnist_kfp.settings.data import OFFICIAL_TRAIN_IMAGES_PER_CLASS, DataSettings

    [train] = [f for f in OFFICIAL_FILES if (f.split, f.kind) == ("train", "labels")]
    assert OFFICIAL_TRAIN_IMAGES_PER_CLASS * NUM_CLASSES == train.num_examples
    most = (OFFICIAL_TRAIN_IMAGES_PER_CLASS - 1) * NUM_CLASSES
    assert DataSettings(validation_examples=most).problems() == []
    assert "give at most 59990" in DataSettings(validation_examples=most + 1).problems()[0]
    assert DataSettings(validation_examples=most + 1,
                        expected_sha256={"train-labels-idx1-ubyte.gz": "ab"}).problems() == []
