"""The training backends' seam: a launcher runs a :class:`TrainingJobSpec` to completion.

``local`` (:mod:`fmnist.launcher.local`) starts the replicas as processes on this machine;
``kubernetes`` (:mod:`fmnist.launcher.kubernetes`) runs them as a TFJob. The step chooses one
with :func:`fmnist.backends.choose_backend`.
"""

from __future__ import annotations

from typing import Protocol

from fmnist.training.job import TrainingJobResult, TrainingJobSpec


class TrainingLauncher(Protocol):
    def run(self, spec: TrainingJobSpec) -> TrainingJobResult:
        """Runs the job to completion; raises ``TrainingJobError`` if it fails."""
        ...
