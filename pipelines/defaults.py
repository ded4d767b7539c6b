"""The Kubeflow variant's defaults, apart from the pipeline: the CLI's help and the checks of a
run's arguments read them without importing kfp or building the pipeline."""

from __future__ import annotations

import dataclasses

from fmnist.settings.pipeline import PipelineParameters
from fmnist.settings.platform import Platform


def cluster_defaults(platform: Platform | None = None) -> PipelineParameters:
    """The Kubeflow variant's defaults: TFJobs of two workers, TFDS as the data source.

    ``kubernetes`` stays ``{}``: the shared claim is not a default the user's dict could
    replace, but part of the platform every task carries (``FMNIST_PVC_NAME``, see
    :func:`pipelines.fashion_mnist._on_platform`), under which the steps merge the user's
    settings (:func:`fmnist.settings.jobs.cluster_settings`); so no ``platform`` changes
    them."""
    return dataclasses.replace(
        PipelineParameters(), data_source="tfds", backend="kubernetes", num_workers=2)
