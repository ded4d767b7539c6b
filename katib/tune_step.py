"""The tuning step of the pipeline: a search for one model type, on Katib or on this machine.

``tuning`` (the pipeline's ``tuning`` parameter) sets the search; every key is optional:

=====================  ========  ==========================================================
key                    default   meaning
=====================  ========  ==========================================================
algorithm              tpe       random, grid, tpe, multivariate-tpe (both backends);
                                 bayesianoptimization, cmaes (Katib only)
max_trials             12        trials in all
parallel_trials        2         trials at a time (locally at most one per core)
max_failed_trials      3         the search fails once more trials than this failed (at
                                 most max_trials)
epochs                 6         epochs per trial (the final training keeps its own)
train_examples         0         train each trial on the first N examples (0: all but the
                                 validation split)
validation_examples    6000      scored on the last N training examples, never the test split
early_stopping         true      Katib's medianstop
min_trials_required    3         medianstop: succeeded trials before any is stopped
start_step             2         medianstop: epochs before a trial can be stopped
objective_goal         none      stop once a trial's validation accuracy reaches it
random_state           none      seed of the search algorithm
=====================  ========  ==========================================================
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fmnist.errors import UserInputError
from fmnist.launcher.step import stable_name
from fmnist.training.config import TrainingConfig
from katib.experiment import MAX_NAME_LENGTH, EarlyStopping, ExperimentSettings
from katib.results import TuningResult
from katib.search_space import SearchSpace

TUNING_DEFAULTS: dict[str, Any] = {
    "algorithm": "tpe",
    "max_trials": 12,
    "parallel_trials": 2,
    "max_failed_trials": None,  # 3, or max_trials when that is smaller
    "epochs": 6,
    "train_examples": 0,
    "validation_examples": 6000,
    "early_stopping": True,
    "min_trials_required": 3,
    "start_step": 2,
    "objective_goal": None,
    "random_state": None,
}


def experiment_name(model_type: str, output_path: str) -> str:
    """The search's name, stable across retries of the step (which re-attach to it)."""
    return stable_name(f"fmnist-tune-{model_type}", output_path, MAX_NAME_LENGTH)


_KINDS: dict[str, type] = {
    "algorithm": str, "max_trials": int, "parallel_trials": int, "max_failed_trials": int,
    "epochs": int, "train_examples": int, "validation_examples": int, "early_stopping": bool,
    "min_trials_required": int, "start_step": int, "objective_goal": float,
    "random_state": int,
}
_KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _typed(tuning: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    unknown = sorted(set(tuning) - set(TUNING_DEFAULTS))
    if unknown:
        return {}, [f"unknown tuning settings {unknown}; known: {sorted(TUNING_DEFAULTS)}"]
    values = {**TUNING_DEFAULTS, **tuning}
    problems = []
    for key, kind in _KINDS.items():
        value = values[key]
        if value is None and TUNING_DEFAULTS[key] is None:
            continue
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            continue
        if kind is int and isinstance(value, float) and value.is_integer():
            values[key] = int(value)  # pipeline dict parameters carry numbers as floats
            continue
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            problems.append(f"tuning {key} must be {_KIND_NAMES[kind]}, got {value!r}")
    return values, problems


def experiment_settings(name: str, model_type: str, base: TrainingConfig,
                        tuning: dict[str, Any]) -> tuple[ExperimentSettings, SearchSpace]:
    """The experiment and search space the ``tuning`` settings describe (not yet validated)."""
    values, problems = _typed(tuning)
    if problems:
        raise UserInputError("invalid tuning settings: " + "; ".join(problems))
    algorithm_settings = {}
    if values["random_state"] is not None:
        algorithm_settings["random_state"] = values["random_state"]
    settings = ExperimentSettings(
        name=name,
        algorithm=values["algorithm"],
        algorithm_settings=algorithm_settings,
        objective_goal=values["objective_goal"],
        parallel_trial_count=values["parallel_trials"],
        max_trial_count=values["max_trials"],
        max_failed_trial_count=values["max_failed_trials"]
        if values["max_failed_trials"] is not None else min(3, values["max_trials"]),
        early_stopping=EarlyStopping(values["min_trials_required"], values["start_step"])
        if values["early_stopping"] else None,
        validation_examples=values["validation_examples"],
        model_type=model_type,
        base_config=replace(base, epochs=values["epochs"],
                            train_examples=values["train_examples"]),
    )
    return settings, SearchSpace.default(settings.algorithm, model_type)


def tuning_problems(tuning: dict[str, Any], model_type: str, base: TrainingConfig,
                    backend: str) -> list[str]:
    """Every problem with these tuning settings, found before any trial starts."""
    try:
        settings, space = experiment_settings("fmnist-tune-check", model_type, base, tuning)
    except UserInputError as error:
        return [str(error)]
    if backend == "local":
        from katib.local_tuner import local_problems

        return local_problems(settings, space)
    return settings.search_problems(space)


def tune_step(*, model_type: str, base: TrainingConfig, tuning: dict[str, Any], data_dir: str,
              output_dir: str, backend: str = "local", kubernetes: dict[str, Any] | None = None,
              launcher=None) -> TuningResult:
    """Runs the search; trials work under ``output_dir`` locally, on the shared volume on
    Kubernetes (``launcher``: a ``KatibExperimentLauncher`` with its own client). Raises
    ``UserInputError`` before any trial for bad settings and ``TuningError`` when the search
    fails."""
    name = experiment_name(model_type, output_dir)
    settings, space = experiment_settings(name, model_type, base, tuning)
    if backend == "local":
        from katib.local_tuner import LocalTuner

        return LocalTuner(work_dir=f"{output_dir}/trials").run(settings, space, data_dir)
    if backend != "kubernetes":
        raise UserInputError(f"unknown tuning backend {backend!r}; choose local or kubernetes")
    from fmnist.launcher.step import stage_dataset
    from fmnist.launcher.tfjob import KubernetesSettings
    from fmnist.settings import component_image
    from katib.katib_launcher import KatibExperimentLauncher

    pods = KubernetesSettings(image=component_image(), **(kubernetes or {}))
    settings = replace(settings, kubernetes=pods)
    settings.validate(space)  # before the dataset is copied
    data = stage_dataset(data_dir, f"{pods.mount_path.rstrip('/')}/datasets")
    if launcher is None:
        deadline = pods.active_deadline_seconds  # a trial's: the search may take them all
        launcher = KatibExperimentLauncher(
            timeout_seconds=deadline * settings.max_trial_count + 600 if deadline else 0.0)
    return launcher.run(settings, space, data)


@dataclass
class TuningOutputs:
    """What the tuning step records: result.json, artifact metadata, metrics, the report."""

    result: dict[str, Any]
    metadata: dict[str, Any]
    metrics: dict[str, float]
    html: str


def tuning_outputs(result: TuningResult | None) -> TuningOutputs:
    """The step's outputs for a finished search, or for tuning switched off (None)."""
    if result is None:
        return TuningOutputs({"tuned": False}, {"tuned": False}, {},
                             "<p>Tuning was off: the given hyperparameters trained the "
                             "model.</p>")
    from katib.report import render_html

    metadata = {
        "tuned": True, "experiment": result.experiment, "backend": result.backend,
        "algorithm": result.algorithm, "objective_metric": result.objective_metric,
        "best_trial": result.best_trial, "best_objective": result.best_objective,
        "best_parameters": result.best_parameters, "trials": len(result.trials),
        "total_epochs": result.total_epochs,
    }
    summary = result.as_dict()
    metrics = {f"best_{result.objective_metric}": result.best_objective,
               "trials": float(len(result.trials)),
               "total_trial_epochs": float(result.total_epochs)}
    metrics.update({f"trials_{status}": float(count)
                    for status, count in summary["trial_counts"].items()})
    return TuningOutputs(summary, metadata, metrics, render_html(result))
