"""Each component's source says what it takes: an input named for a setting defaults, in the
signature, to the Kubeflow variant's value of that setting (the release images for ``image`` and
``gpu_image``) and is described, in the docstring, by the setting's help."""

import importlib
import inspect
import subprocess
import sys

import docstring_parser
import pytest
from kfp.dsl import Metrics, Output

from fmnist_kfp.kfp_components.base import component, setting_defaults, setting_specs
from fmnist_kfp.kfp_components.registry import COMPONENTS
from fmnist_kfp.settings.pipeline import cluster_defaults
from tests import ROOT

# Inputs that are no setting, with the default each must have and why.
OTHER_DEFAULTS = {
    ("train", "hyperparameters"): {},  # each value its setting's default
    ("tune", "enabled"): True,
    ("ingest", "freshness_window"): "",  # the cache entry never expires
    ("predict", "sample_size"): cluster_defaults().prediction_images,
    ("predict", "serves_model"): True,
}


def _settings_of(func) -> list[str]:
    specs = setting_specs()
    return [name for name in inspect.signature(func).parameters if name in specs]


def signature_problems(func, folder: str = "") -> list[str]:
    """Where ``func``'s signature and docstring differ from the settings its inputs stand
    for (and from :data:`OTHER_DEFAULTS`)."""
    specs, values = setting_specs(), setting_defaults()
    parameters = inspect.signature(func).parameters
    described = {p.arg_name: " ".join(p.description.split())
                 for p in docstring_parser.parse(func.__doc__ or "").params}
    problems = []
    for name in _settings_of(func):
        if parameters[name].default != values[name]:
            problems.append(f"{name} defaults to {parameters[name].default!r}, "
                            f"its setting to {values[name]!r}")
        if described.get(name) != " ".join(specs[name].setting.help_in(folder).split()):
            problems.append(f"{name}'s docstring is not its setting's help")
    for (where, name), default in OTHER_DEFAULTS.items():
        if where == folder and parameters[name].default != default:
            problems.append(f"{name} defaults to {parameters[name].default!r}, not {default!r}")
    return problems


@pytest.mark.parametrize("folder", list(COMPONENTS))
def test_inputs_named_for_settings_take_their_default_and_help(folder):
    func = COMPONENTS[folder].python_func
    assert signature_problems(func, folder) == []
    # The spec KFP compiles says the same, on one line: the Kubeflow UI and the README show it.
    spec, specs = COMPONENTS[folder].component_spec, setting_specs()
    for name in _settings_of(func):
        assert spec.inputs[name].description == specs[name].setting.help_in(folder), name
        assert spec.inputs[name].default == setting_defaults()[name], name


def test_the_components_document_most_settings():
    documented = sum(len(_settings_of(c.python_func)) for c in COMPONENTS.values())
    assert documented >= 20, "components should take their settings' defaults and help"


def test_a_changed_default_or_help_is_found():
    """The check above can fail: a default or a description that is not the setting's."""

    def wrong(epochs: int = 11, precision: str = "auto"):
        """Trains.

        Args:
            epochs: Passes over the training split per model.
            precision: Something else.
        """

    assert signature_problems(wrong) == [
        "epochs defaults to 11, its setting to 10",
        "precision's docstring is not its setting's help"]


def test_every_description_is_one_line():
    """KFP keeps a docstring entry's line breaks in an input's description; the decorator
    makes every input's and output's one line (the settings' help is one line); KFP describes
    no output artifact documented under ``Args:``, the decorator does."""

    @component
    def step(metrics: Output[Metrics], epochs: int = 10):
        """Trains.

        Args:
            metrics: Final training
                metrics.
            epochs: Passes over the training split
                per model.
        """

    assert step.component_spec.inputs["epochs"].description == (
        "Passes over the training split per model.")
    assert step.component_spec.outputs["metrics"].description == "Final training metrics."


@pytest.mark.parametrize("folder", list(COMPONENTS))
def test_each_component_imports_from_its_folder_as_its_readme_says(folder):
    function = COMPONENTS[folder].python_func.__name__
    assert f"from fmnist_kfp.kfp_components.{folder} import {function}" in (
        ROOT / "kfp_components" / folder / "README.md").read_text()
    package = importlib.import_module(f"fmnist_kfp.kfp_components.{folder}")
    assert getattr(package, function) is COMPONENTS[folder]


def test_a_run_s_arguments_are_checked_without_building_the_pipeline():
    """The CLI imports ``fmnist_kfp.pipelines.arguments``: neither it nor checking a run's
    arguments builds the pipeline or a component."""
    script = ("import sys\n"
              "from fmnist_kfp.pipelines.arguments import cluster_arguments\n"
              "assert cluster_arguments(epochs=3) == {'epochs': 3}\n"
              "built = [m for m in sys.modules if m.endswith(('.component', '.fashion_mnist',"
              " '.registry', '.api'))]\n"
              "assert not built, built\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_every_name_of_the_python_api_resolves():
    from fmnist_kfp import pipelines

    assert [name for name in pipelines.__all__ if not hasattr(pipelines, name)] == []
