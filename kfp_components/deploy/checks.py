"""The deploy step's checks of a run's parameters (see :mod:`fmnist_kfp.kfp_components.checks`): the
serving settings as the manifests (or the local server) will take them."""

from __future__ import annotations

from fmnist_kfp.settings.jobs import BACKENDS
from fmnist_kfp.settings.pipeline import PipelineParameters


def parameter_problems(parameters: PipelineParameters, context) -> list[str]:
    if parameters.backend not in BACKENDS:
        return []  # the settings' own rules name it
    from fmnist_kfp.kfp_components.deploy.step import serving_problems

    return serving_problems(parameters.serving, parameters.backend, parameters.model_name,
                            parameters.blessing_tolerance, parameters.verification_images,
                            context.platform.image)
