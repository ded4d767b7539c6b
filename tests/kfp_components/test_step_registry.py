"""One registry of steps (``kfp_components.registry.COMPONENTS``): the compiled pipeline, the
Python API, the component docs and the parameter checks all derive from it, so they cannot
disagree."""

from __future__ import annotations

import yaml

from fmnist_kfp import pipelines
from fmnist_kfp.kfp_components.checks import STEP_CHECKS, CheckContext, parameter_problems
from fmnist_kfp.kfp_components.registry import COMPONENTS
from fmnist_kfp.settings.pipeline import PipelineParameters
from fmnist_kfp.settings.platform import Platform
from tests import ROOT


def test_the_compiled_pipeline_runs_every_registered_step_and_no_other():
    # The pipeline spec, then its platform config (kfp-kubernetes).
    spec, *_ = yaml.safe_load_all((ROOT / "compiled" / "fashion_mnist_pipeline.yaml").read_text())
    components = {name.removeprefix("comp-") for name in spec["components"]
                  if not name.startswith(("comp-for-loop", "comp-condition"))}
    assert components == {c.component_spec.name for c in COMPONENTS.values()}


def test_the_python_api_exports_every_registered_component():
    """``batch_predict`` was missing from ``pipelines``; it is both a folder and a component."""
    import fmnist_kfp.kfp_components.batch_predict  # noqa: F401  (the folder, imported first)

    for folder, built in COMPONENTS.items():
        function = built.python_func.__name__
        assert function in pipelines.__all__, function
        # The registered component, wrapped so that its tasks take the images chosen when a
        # user's pipeline is defined (tests/pipelines/test_images_at_compile.py).
        assert getattr(pipelines, function).built is COMPONENTS[folder]


def test_every_component_folder_is_registered_with_its_readme():
    folders = {p.parent.name for p in (ROOT / "kfp_components").glob("*/component.py")}
    assert folders == set(COMPONENTS)
    assert all((ROOT / "kfp_components" / folder / "README.md").is_file() for folder in folders)


def test_every_steps_checks_module_is_run():
    declared = {p.parent.name for p in (ROOT / "kfp_components").glob("*/checks.py")}
    assert declared == set(STEP_CHECKS) == {"ingest", "tune", "train", "deploy"}


def test_one_call_reports_every_steps_problems_at_once(tmp_path):
    """A bad search, bad TFJob pods and bad serving settings in one run: one call names them
    all, each from its step's checks."""
    parameters = PipelineParameters(
        backend="kubernetes", tune=True, tuning={"max_trials": 0},
        kubernetes={"cpu": "lots"}, serving={"min_replicas": 5, "max_replicas": 1})
    problems = parameter_problems(parameters, Platform(image="registry.example/fmnist:1.0"),
                                  check_data=False)
    assert any("max_trial_count" in p for p in problems), problems
    assert any("cpu" in p for p in problems), problems
    assert any("replicas" in p for p in problems), problems
    # On this machine the ingest step's check reads the data directory too.
    local = PipelineParameters(data_source=str(tmp_path / "nowhere"))
    assert any("does not exist" in p for p in parameter_problems(local))
    context = CheckContext(platform=Platform(image="registry.example/fmnist:1.0"), check_data=False)
    assert STEP_CHECKS["ingest"](local, context) == []  # a cluster reads its own storage
