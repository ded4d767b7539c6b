"""The train step's checks of a run's parameters (see :mod:`kfp_components.checks`): on
Kubernetes, the TFJob pods' settings over the compiled images (the trials and the batch Job
use the same ``kubernetes`` settings)."""

from __future__ import annotations

from fmnist.settings.jobs import KubernetesSettings
from fmnist.settings.pipeline import PipelineParameters


def parameter_problems(parameters: PipelineParameters, context) -> list[str]:
    if parameters.backend != "kubernetes" or context.settings_problems:
        return []
    typed, _ = KubernetesSettings.coerce_values(parameters.kubernetes)
    return KubernetesSettings(image=context.platform.image, gpu_image=context.platform.gpu_image,
                              **typed).problems()
