"""The train step's checks of a run's parameters (see :mod:`fmnist_kfp.kfp_components.checks`): on
Kubernetes, the TFJob pods' settings over the compiled images (the trials and the batch Job
use the same ``kubernetes`` settings)."""

from __future__ import annotations

from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.settings.pipeline import PipelineParameters


def parameter_problems(parameters: PipelineParameters, context) -> list[str]:
    if parameters.backend != "kubernetes" or context.settings_problems:
        return []
    typed, _ = KubernetesSettings.coerce_values(parameters.kubernetes)
    return KubernetesSettings(image=context.platform.image, gpu_image=context.platform.gpu_image,
                              **typed).problems()
