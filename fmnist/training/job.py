"""A distributed training job: what to train, on how many replicas, where results go, and the
trainer command every replica runs (a local worker process or a TFJob pod alike)."""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from fmnist.errors import UserInputError
from fmnist.settings.names import is_dns_1035_label
from fmnist.settings.training import TrainingConfig

TRAINER_MODULE = "fmnist.training.trainer"


@dataclass
class TrainingJobSpec:
    """``export_dir`` receives the SavedModel (chief only); ``work_dir`` holds the checkpoint a
    restarted job resumes from, the per-epoch history and ``result.json``."""

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
        # The training operator's webhook wants a DNS-1035 label: its services are named
        # <job>-<replica>-<index>.
        if not is_dns_1035_label(self.name):
            raise UserInputError(
                f"job name {self.name!r} must be a DNS-1035 label: lowercase letters, digits "
                "and '-', starting with a letter, at most 63 characters"
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

    def trainer_command(self, python: str = sys.executable) -> list[str]:
        """``python -m fmnist.training.trainer`` with this job's directories and config."""
        args = [python, "-m", TRAINER_MODULE, "--data-dir", self.data_dir,
                "--work-dir", self.work_dir, "--export-dir", self.export_dir]
        for key, value in asdict(self.config).items():
            args += ["--" + key.replace("_", "-"), str(value)]
        return args + list(self.trainer_args)


@dataclass
class TrainingJobResult:
    """What the chief reported (``result.json``) plus how the job went."""

    result: dict[str, Any]
    wall_seconds: float
    restarts: int
