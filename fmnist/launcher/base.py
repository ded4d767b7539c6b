"""The launcher interface shared by the local and Kubernetes (TFJob) backends."""

from __future__ import annotations

import re
import signal
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from fmnist.errors import UserInputError
from fmnist.training.config import TrainingConfig

BACKENDS = ("local", "kubernetes")
_JOB_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass
class TrainingJobSpec:
    """A distributed training job: what to train, on how many workers, where results go.

    ``export_dir`` receives the SavedModel (chief only); ``work_dir`` holds the checkpoint a
    restarted job resumes from, the per-epoch history and ``result.json``.
    """

    name: str
    config: TrainingConfig
    data_dir: str
    export_dir: str
    work_dir: str
    num_workers: int = 1
    use_chief: bool = False
    gpus_per_worker: int = 0
    max_restarts: int = 2
    trainer_args: list[str] = field(default_factory=list)  # extra trainer flags (benchmarks)

    def validate(self) -> TrainingJobSpec:
        self.config.validate()
        if not _JOB_NAME.match(self.name) or len(self.name) > 63:
            raise UserInputError(
                f"job name {self.name!r} must be a DNS label: lowercase letters, digits and '-', "
                "at most 63 characters"
            )
        if self.num_workers < 1:
            raise UserInputError(f"num_workers must be at least 1, got {self.num_workers}")
        if self.gpus_per_worker < 0:
            raise UserInputError(f"gpus_per_worker must be 0 or more, got {self.gpus_per_worker}")
        if self.max_restarts < 0:
            raise UserInputError(f"max_restarts must be 0 or more, got {self.max_restarts}")
        return self

    @property
    def replicas(self) -> int:
        return self.num_workers + (1 if self.use_chief else 0)


@dataclass
class TrainingJobResult:
    """What the chief reported (``result.json``) plus how the job went."""

    result: dict[str, Any]
    wall_seconds: float
    restarts: int


class TrainingLauncher(Protocol):
    def run(self, spec: TrainingJobSpec) -> TrainingJobResult:
        """Runs the job to completion; raises ``TrainingJobError`` if it fails."""
        ...


def sigterm_as_exit():
    """Turns SIGTERM (a terminated run, a deleted pod) into ``SystemExit`` so a launcher's
    cleanup runs; returns the previous handler to restore (None off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def terminate(signum, frame):
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, terminate)


def get_launcher(backend: str, **options: Any) -> TrainingLauncher:
    if backend == "local":
        from fmnist.launcher.local import LocalProcessLauncher

        return LocalProcessLauncher(**options)
    if backend == "kubernetes":
        from fmnist.launcher.kubernetes import TFJobLauncher

        return TFJobLauncher(**options)
    raise UserInputError(f"unknown training backend {backend!r}; choose one of {BACKENDS}")
