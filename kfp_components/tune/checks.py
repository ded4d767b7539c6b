"""The tune step's checks of a run's parameters (see :mod:`fmnist_kfp.kfp_components.checks`): the
search (Katib's rules, on either backend) for each model it tunes, from the values it starts
from."""

from __future__ import annotations

from fmnist_kfp.settings.pipeline import PipelineParameters
from fmnist_kfp.settings.training import MODEL_TYPES


def parameter_problems(parameters: PipelineParameters, context) -> list[str]:
    if not parameters.tune or context.settings_problems:
        return []  # the search starts from these values: they must be right first
    from fmnist_kfp.kfp_components.tune.step import tuning_problems

    problems: list[str] = []
    for model_type in parameters.model_types or [MODEL_TYPES[0]]:
        problems += tuning_problems(
            parameters.tuning, model_type, parameters.training_config(model_type),
            parameters.backend, num_workers=parameters.num_workers,
            gpus_per_worker=parameters.gpus_per_worker)
    return problems
