"""The arguments of a Kubeflow run of the compiled pipeline, checked before they are sent.

A run sends only the parameters it changes; the rest keep the compiled pipeline's defaults,
which are the Kubeflow variant's (:func:`pipelines.fashion_mnist.cluster_defaults`: TFJobs, two
workers, TFDS) — not :class:`PipelineParameters`' local ones. So the values are checked as they
will run: over the compiled defaults, by every rule the CLI applies (the settings' own, the
Katib search's, the TFJob pods', the serving manifests'), and an unknown name or a wrong type is
an error naming it instead of a run the API server rejects or a pipeline that fails an hour in.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fmnist.errors import UserInputError
from fmnist.settings.jobs import BACKENDS, KubernetesSettings
from fmnist.settings.pipeline import PipelineParameters
from fmnist.settings.platform import Platform
from fmnist.settings.training import MODEL_TYPES


def parameter_problems(parameters: PipelineParameters) -> list[str]:
    """Everything wrong with a run's parameters that can be known without its data: the
    settings' rules, then the search's, the TFJob pods' and the serving manifests'."""
    from fmnist.settings.platform import component_image
    from kfp_components.deploy.step import serving_problems
    from kfp_components.tune.step import tuning_problems

    problems = parameters.problems()
    if parameters.tune and not problems:  # the search starts from these values
        for model_type in parameters.model_types or [MODEL_TYPES[0]]:
            problems += tuning_problems(
                parameters.tuning, model_type, parameters.training_config(model_type),
                parameters.backend, num_workers=parameters.num_workers,
                gpus_per_worker=parameters.gpus_per_worker)
    if parameters.backend == "kubernetes" and not problems:
        typed, _ = KubernetesSettings.coerce_values(parameters.kubernetes)
        problems += KubernetesSettings(image=component_image(), **typed).problems()
    if parameters.backend in BACKENDS:
        problems += [p for p in serving_problems(
            parameters.serving, parameters.backend, parameters.model_name,
            parameters.blessing_tolerance, parameters.verification_images)
            if p not in problems]
    return list(dict.fromkeys(problems))


def cluster_arguments(**values: Any) -> dict[str, Any]:
    """``arguments``/``params`` for ``kfp.Client``'s run and recurring-run calls: the given
    parameters, typed as the pipeline declares them and validated over the compiled
    pipeline's defaults; raises ``UserInputError`` naming every problem.

    >>> cluster_arguments(epochs=12, num_workers=4)
    {'epochs': 12, 'num_workers': 4}
    """
    from pipelines.fashion_mnist import cluster_defaults

    typed, problems = PipelineParameters.coerce_values(values)
    if not problems:
        parameters = dataclasses.replace(cluster_defaults(Platform.from_env()), **typed)
        problems = parameter_problems(parameters)
    if problems:
        raise UserInputError("invalid pipeline parameters:\n  - " + "\n  - ".join(problems))
    return typed
