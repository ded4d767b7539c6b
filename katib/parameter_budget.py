"""The search's parameter budget (``tuning.max_parameters``), the same for both backends.

A configuration whose model has more parameters than the budget is never trained. Locally the
Optuna search prunes it before a trainer starts. On Katib the trial's trainer refuses it before
TensorFlow starts, and reports the objective ``0`` with an exit code of 0. Katib v0.19's
suggestion services learn only from Succeeded and EarlyStopped trials
(kubeflow/katib v0.19.0 ``pkg/suggestion/v1beta1/internal/trial.py`` lines 41-47); a failed
trial would teach the search nothing. Either way the trial is recorded as
:data:`~fmnist_kfp.katib.results.OVER_PARAMETER_BUDGET`, with its size. The tune step's
search leaves out the choices that could never fit (:func:`within_budget`): under the default
100k, ``filters`` 64 (306k parameters) is not searched at all.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.models import parameter_count
from fmnist_kfp.tuning.experiment_settings import ExperimentSettings
from fmnist_kfp.tuning.search_space import Parameter, SearchSpace

# The TrainingConfig fields a model's size depends on (model_type: batch norm adds statistics).
SIZE_FIELDS = ("filters", "stem_filters", "dense_units", "model_type")


def trial_parameter_count(settings: ExperimentSettings, parameters: dict[str, Any]) -> int:
    """The parameters of the model a trial with these (typed) assignments builds."""
    known = TrainingConfig.specs()
    return parameter_count(replace(settings.training_config(),
                                   **{k: v for k, v in parameters.items() if k in known}))


def over_budget(settings: ExperimentSettings, count: int) -> bool:
    return bool(settings.max_parameters) and count > settings.max_parameters


def _smallest_sizes(settings: ExperimentSettings, search_space: SearchSpace,
                    skip: str = "") -> dict[str, Any]:
    """Each searched size field (but ``skip``) at the value that builds the smallest model."""
    smallest: dict[str, Any] = {}
    for name in SIZE_FIELDS:
        parameter = search_space.get(name)
        if parameter is None or name == skip:
            continue
        if parameter.type == "categorical":
            candidates = [TrainingConfig.typed(name, v) for v in parameter.values]
            counts = [parameter_count(replace(settings.training_config(), **{name: v}))
                      for v in candidates]
            smallest[name] = candidates[counts.index(min(counts))]  # the first smallest
        else:
            smallest[name] = int(parameter.bounds()[0])
    return smallest


def within_budget(settings: ExperimentSettings, search_space: SearchSpace) -> SearchSpace:
    """The search space less the sizes the budget rules out: a choice of a categorical size
    field (``filters`` 64 under 100k parameters) whose model is over the budget even with every
    other size field at its smallest is dropped, so no trial is spent learning that it never
    fits. A field none of whose choices fit is left whole: :func:`budget_problems` names it."""
    narrowed = search_space
    for name in SIZE_FIELDS:
        parameter = search_space.get(name)
        if parameter is None or parameter.type != "categorical":
            continue
        others = _smallest_sizes(settings, search_space, skip=name)
        fitting = [v for v in parameter.values if not over_budget(
            settings, trial_parameter_count(settings, {**others, name: TrainingConfig.typed(
                name, v)}))]
        if fitting and len(fitting) < len(parameter.values):
            narrowed = narrowed.with_parameter(Parameter.categorical(name, fitting))
    return narrowed


def default_search_space(settings: ExperimentSettings) -> SearchSpace:
    """What the tune step searches: the default space for the settings' algorithm and model,
    less the sizes over their budget."""
    return within_budget(settings, SearchSpace.default(settings.algorithm, settings.model_type))


def budget_problems(settings: ExperimentSettings, search_space: SearchSpace) -> list[str]:
    """A search whose every configuration is over the budget, refused before any trial: its
    smallest model (each size field searched at its least) is already over."""
    if not settings.max_parameters:
        return []
    count = trial_parameter_count(settings, _smallest_sizes(settings, search_space))
    if not over_budget(settings, count):
        return []
    return [f"every configuration of the search is over tuning.max_parameters="
            f"{settings.max_parameters:,} (its smallest model has {count:,} parameters): "
            "raise max_parameters, or search smaller filters, stem_filters or dense_units"]
