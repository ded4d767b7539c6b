"""A distributed training job: what to train, on how many replicas, where results go, and the
trainer command every replica runs (a local worker process or a TFJob pod alike)."""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.settings.jobs import job_problems
from fmnist_kfp.settings.names import is_dns_1035_label
from fmnist_kfp.settings.training import TrainingConfig

TRAINER_MODULE = "fmnist_kfp.training.trainer"
# The trainer's flag for a search's parameter budget (a Katib trial's; katib/parameter_budget.py).
MAX_PARAMETERS_FLAG = "--max-parameters"
# Set for a Katib trial's trainer whose Experiment stops trials early
# (fmnist_kfp.katib.trial_process).
KATIB_EARLY_STOPPING_ENV = "FMNIST_KATIB_EARLY_STOPPING"
# How long such a trainer, not training a trial over the parameter budget, waits for Katib's
# collector to read the objective 0 it printed and stop the trial on it (the collector follows
# the log as it is written; the time allows for a loaded node).
OVER_BUDGET_VERDICT_SECONDS = 15


@dataclass(frozen=True)
class TrainingJobSpec:
    """``export_dir`` receives the SavedModel (chief only); ``work_dir`` holds the checkpoint a
    restarted job resumes from, the per-epoch history and ``result.json``.

    Validated once, at construction: a spec that exists is a job that can run (its config,
    its name, its replicas); what a TFJob or a TrainJob cannot do of it is
    :class:`fmnist_kfp.kubernetes.training_operators.ClusterJob`'s to say. Frozen, so it
    stays what was checked."""

    name: str
    config: TrainingConfig
    data_dir: str
    export_dir: str
    work_dir: str
    num_workers: int = 1
    use_chief: bool = False
    gpus_per_worker: int = 0
    max_restarts: int = 2
    strategy: str = "multi_worker_mirrored"
    num_ps: int = 0  # parameter servers (strategy parameter_server)
    evaluator: bool = False  # an evaluator replica scoring each epoch's checkpoint
    trainer_args: list[str] = field(default_factory=list)  # extra trainer flags (benchmarks)

    def __post_init__(self) -> None:
        self.config.validate()
        # The training operator's webhook wants a DNS-1035 label: its services are named
        # <job>-<replica>-<index>.
        if not is_dns_1035_label(self.name):
            raise UserInputError(
                f"job name {self.name!r} must be a DNS-1035 label: lowercase letters, digits "
                "and '-', starting with a letter, at most 63 characters"
            )
        problems = job_problems(self.num_workers, self.gpus_per_worker, self.max_restarts,
                                self.strategy, self.num_ps)
        if problems:
            raise UserInputError("; ".join(problems))

    @property
    def parameter_server(self) -> bool:
        return self.strategy == "parameter_server"

    def replica_counts(self) -> dict[str, int]:
        """Replicas per TFJob replica type: a parameter-server job always has a Chief (the
        coordinator) and ``num_ps`` PS; the evaluator is one ``Evaluator``."""
        counts = {}
        if self.use_chief or self.parameter_server:
            counts["Chief"] = 1
        counts["Worker"] = self.num_workers
        if self.parameter_server:
            counts["PS"] = self.num_ps
        if self.evaluator:
            counts["Evaluator"] = 1
        return counts

    def task_list(self) -> list[tuple[str, int]]:
        """Every replica as (TF_CONFIG task type, index), chief first."""
        return [(kind.lower(), i) for kind, n in self.replica_counts().items()
                for i in range(n)]

    @property
    def replicas(self) -> int:
        return sum(self.replica_counts().values())

    def trainer_command(self, python: str = sys.executable) -> list[str]:
        """``python -m fmnist_kfp.training.trainer`` with this job's directories and config."""
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
