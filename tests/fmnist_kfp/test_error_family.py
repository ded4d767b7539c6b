"""One family of errors: every exception class of ours derives from FmnistError, which carries
the CLI's exit code; a local run's step ends on any of them with one line, never a traceback,
and importing the components changes nothing in the process."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fmnist_kfp
from fmnist_kfp import MAPPED_FOLDERS
from fmnist_kfp.errors import FmnistError, StepFailed, UserInputError
from fmnist_kfp.kfp_components import STEP_ERRORS_ENV, reports_errors_briefly
from fmnist_kfp.kubernetes.runner import JobFailed


def _modules():
    """Every module of the package as installed: its own subpackages and the mapped folders
    (in a checkout they sit beside it, and the repository's other folders are not ours)."""
    root = Path(fmnist_kfp.__file__).parent
    folders = [(root / name, f"fmnist_kfp.{name}") for name in os.listdir(root)
               if (root / name / "__init__.py").is_file()]
    folders += [(root.parent / name, f"fmnist_kfp.{name}") for name in MAPPED_FOLDERS
                if not (root / name).is_dir()]
    names = [f"fmnist_kfp.{path.stem}" for path in root.glob("*.py") if path.stem != "__init__"]
    for folder, package in folders:
        names.append(package)
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if "__pycache__" not in parts and parts[-1] not in ("__init__", "__main__"):
                names.append(".".join((package, *parts)))
    return [importlib.import_module(name) for name in sorted(names)]


def _our_exception_classes() -> list[type]:
    """Every error class defined in the installed package (its steps, Katib's trial code, the
    serving code and the pipelines included): warnings' categories and the runner's
    ``Terminated`` (a SystemExit: how a SIGTERM ends the process) are not errors."""
    return [value for module in _modules() for value in vars(module).values()
            if inspect.isclass(value) and issubclass(value, Exception)
            and not issubclass(value, Warning) and value.__module__ == module.__name__]


def test_every_exception_class_of_ours_derives_from_the_one_base():
    classes = _our_exception_classes()
    names = {f"{c.__module__}.{c.__qualname__}" for c in classes}
    # The runner's, the rollout's and a step's, found where they live.
    assert {"fmnist_kfp.kubernetes.runner.JobFailed",
            "fmnist_kfp.serving.deploy.kserve_api.KServeRolloutError",
            "fmnist_kfp.kfp_components.deploy.step.DeploymentError"} <= names
    assert len(classes) >= 29
    assert [c for c in classes if not issubclass(c, FmnistError)] == []


def _failing_step(error: BaseException):
    @reports_errors_briefly
    def step():
        raise error

    return step


def test_a_step_of_a_local_run_ends_on_an_error_of_ours_with_one_line(tmp_path, monkeypatch,
                                                                     capsys):
    record = tmp_path / "errors.jsonl"
    monkeypatch.setenv(STEP_ERRORS_ENV, str(record))
    with pytest.raises(SystemExit) as ended:
        _failing_step(JobFailed("TFJob fmnist-basic failed: worker-0 exited 1"))()
    assert ended.value.code == 1
    assert capsys.readouterr().err == "error: TFJob fmnist-basic failed: worker-0 exited 1\n"
    assert json.loads(record.read_text()) == {
        "error": "JobFailed", "message": "TFJob fmnist-basic failed: worker-0 exited 1",
        "exit_code": 1}
    with pytest.raises(SystemExit) as ended:
        _failing_step(UserInputError("epochs must be positive"))()
    assert ended.value.code == 2  # the input must change: the CLI's 2
    # Not ours: a bug, whose traceback stays.
    with pytest.raises(KeyError):
        _failing_step(KeyError("model_type"))()


def test_outside_a_local_run_a_steps_error_propagates_unchanged(monkeypatch):
    monkeypatch.delenv(STEP_ERRORS_ENV, raising=False)
    with pytest.raises(JobFailed, match="worker-0"):
        _failing_step(JobFailed("worker-0 exited 1"))()


def test_the_run_ends_with_the_steps_error_naming_the_step(tmp_path):
    from fmnist_kfp.local_run import _step_failure

    class Console:
        steps = [{"step": "train-model", "status": "FAILURE"}]
        log_path = str(tmp_path / "run.log")

    record = tmp_path / "errors.jsonl"
    record.write_text(json.dumps({"error": "JobFailed", "message": "worker-0 exited 1",
                                  "exit_code": 1}) + "\n")
    error = _step_failure(RuntimeError("Task train-model failed"), str(record), Console())
    assert isinstance(error, StepFailed) and error.kind == "JobFailed"
    assert str(error) == "the train-model step failed: worker-0 exited 1"
    assert error.exit_code == 1
    # No record: kfp.local's own words and where the log is (a bug's traceback is there).
    bug = _step_failure(RuntimeError("Task train-model failed"), str(tmp_path / "none"),
                        Console())
    assert not isinstance(bug, FmnistError) and "run.log" in str(bug)


def test_importing_the_components_changes_nothing_in_the_process(tmp_path):
    probe = ("import sys; hook = sys.excepthook; import fmnist_kfp.kfp_components; "
             "import fmnist_kfp.kfp_components.train.step; print(sys.excepthook is hook)")
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           check=True, env={**__import__("os").environ,
                                            STEP_ERRORS_ENV: str(tmp_path / "e")}).stdout
    assert shown.split() == ["True"]


def test_every_steps_entry_point_reports_errors_briefly_and_returns_a_dataclass():
    """Each step's entry point is the decorated one (``batch_predict_step`` once lost its
    decorator to the result class written between them), and what it returns is a dataclass
    (the deploy step: either deployer's)."""
    import dataclasses
    import inspect
    import typing

    from fmnist_kfp.kfp_components.batch_predict.step import batch_predict_step
    from fmnist_kfp.kfp_components.deploy.step import deploy
    from fmnist_kfp.kfp_components.ingest.step import ingest_step
    from fmnist_kfp.kfp_components.predict.step import predict_step
    from fmnist_kfp.kfp_components.promote.step import promote
    from fmnist_kfp.kfp_components.select.step import select_step
    from fmnist_kfp.kfp_components.train.step import train_step
    from fmnist_kfp.kfp_components.tune.step import tune_step
    from fmnist_kfp.serving.deploy.local_deployer import LocalDeployment
    from fmnist_kfp.serving.deploy.rollout_result import RolloutResult

    deployment = {"Deployment": LocalDeployment | RolloutResult}  # named for type checkers only
    for step in (ingest_step, tune_step, train_step, select_step, batch_predict_step, deploy,
                 promote, predict_step):
        assert inspect.isfunction(step) and hasattr(step, "__wrapped__"), step
        returned = typing.get_type_hints(step.__wrapped__, localns=deployment)["return"]
        for kind in typing.get_args(returned) or (returned,):
            assert isinstance(kind, type) and dataclasses.is_dataclass(kind), (step, kind)
