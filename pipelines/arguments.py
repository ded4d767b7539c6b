"""The arguments of a Kubeflow run of the compiled pipeline, checked before they are sent.

A run sends only the parameters it changes; the rest keep the compiled pipeline's defaults,
which are the Kubeflow variant's (:func:`fmnist_kfp.settings.pipeline.cluster_defaults`:
TFJobs, two workers, TFDS) — not :class:`PipelineParameters`' local ones. So the values are checked
as they will run: over the compiled defaults, by every rule the CLI applies
(:func:`fmnist_kfp.kfp_components.checks.parameter_problems`: the settings' own, then each step's),
and an unknown name or a wrong type is an error naming it instead of a run the API server rejects or
a pipeline that fails an hour in.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.settings.pipeline import PipelineParameters, cluster_defaults
from fmnist_kfp.settings.platform import Platform


def cluster_arguments(**values: Any) -> dict[str, Any]:
    """``arguments``/``params`` for ``kfp.Client``'s run and recurring-run calls: the given
    parameters, typed as the pipeline declares them and validated over the compiled
    pipeline's defaults; raises ``UserInputError`` naming every problem.

    >>> cluster_arguments(epochs=12, num_workers=4)
    {'epochs': 12, 'num_workers': 4}
    """
    from fmnist_kfp.kfp_components.checks import parameter_problems

    typed, problems = PipelineParameters.coerce_values(values)
    if not problems:
        platform = Platform.from_env()
        parameters = dataclasses.replace(cluster_defaults(), **typed)
        problems = parameter_problems(parameters, platform, check_data=False)
    if problems:
        raise UserInputError("invalid pipeline parameters:\n  - " + "\n  - ".join(problems))
    return typed
