"""The training backends' seam: a launcher runs a :class:`TrainingJobSpec` to completion.

``local`` (:mod:`fmnist_kfp.launcher.local_processes`) starts the replicas as processes on this
machine; ``kubernetes`` (:mod:`fmnist_kfp.launcher.tfjob_launcher`) runs them as a TFJob. The step
checks the name with :func:`fmnist_kfp.backends.require_backend` and picks one with a plain
``if``.
"""

from __future__ import annotations

from typing import Protocol

from fmnist_kfp.training.training_job import TrainingJobResult, TrainingJobSpec


class TrainingLauncher(Protocol):
    def run(self, spec: TrainingJobSpec) -> TrainingJobResult:
        """Runs the job to completion; raises ``TrainingJobError`` if it fails."""
        ...
