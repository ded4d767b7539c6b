"""The Kubernetes backend: a Kubeflow TFJob per training job (see the cluster issue)."""

from __future__ import annotations

from fmnist.errors import UserInputError
from fmnist.launcher.base import TrainingJobResult, TrainingJobSpec


class TFJobLauncher:
    """Creates a TFJob with the kubeflow-training SDK and waits for it."""

    def __init__(self, **options):
        self.options = options

    def run(self, spec: TrainingJobSpec) -> TrainingJobResult:
        raise UserInputError(
            "the kubernetes training backend is not available in this release yet; "
            "use backend='local'"
        )
