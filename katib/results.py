"""What a hyperparameter search found, the same whichever backend ran it.

Both tuners (Katib on the cluster, Optuna on this machine) report a :class:`TuningResult`: every
trial with its assignments, objective, status and epochs run, and the best trial's values typed
as the trainer's :class:`~fmnist_kfp.settings.training.TrainingConfig` fields, ready to train with.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from fmnist_kfp.settings.training import TrainingConfig

# Katib's trial conditions (v1beta1 TrialConditionType) that end a trial.
SUCCEEDED = "Succeeded"
FAILED = "Failed"
EARLY_STOPPED = "EarlyStopped"
METRICS_UNAVAILABLE = "MetricsUnavailable"
KILLED = "Killed"
# Ours, not Katib's: a configuration over tuning.max_parameters, never trained.
OVER_PARAMETER_BUDGET = "OverParameterBudget"
FINISHED_STATES = (SUCCEEDED, FAILED, EARLY_STOPPED, METRICS_UNAVAILABLE, KILLED,
                   OVER_PARAMETER_BUDGET)


def typed_assignments(assignments: dict[str, Any]) -> dict[str, Any]:
    """``{"learning_rate": "0.001", "batch_size": "64"}`` → ``{..: 0.001, ..: 64}``; entries
    that are not trainer fields (Katib's ``trialName``) are left out."""
    known = TrainingConfig.specs()
    return {name: TrainingConfig.typed(name, value) for name, value in assignments.items()
            if name in known}


@dataclass
class TrialRecord:
    """One trial: what it tried and how it went."""

    name: str
    parameters: dict[str, Any]  # typed, as the trainer takes them
    status: str  # one of FINISHED_STATES, or Running/Pending while the search goes on
    objective: float | None = None  # the objective by the metric strategy (latest epoch)
    # Other reported metrics, latest; "error": why a trial that failed has no objective.
    metrics: dict[str, float | str] = field(default_factory=dict)
    epochs: int = 0  # epochs reported (fewer than asked when stopped early)
    seconds: float = 0.0
    parameter_count: int = 0  # the model's, as its configuration builds it


@dataclass
class TuningResult:
    """A finished search."""

    experiment: str
    backend: str
    algorithm: str
    objective_metric: str
    objective_type: str  # maximize or minimize
    best_trial: str
    best_parameters: dict[str, Any]  # typed; only the searched hyperparameters
    best_objective: float
    trials: list[TrialRecord]
    early_stopping: bool = False
    seconds: float = 0.0
    base_config: dict[str, Any] = field(default_factory=dict)  # what the trials started from

    def count(self, status: str) -> int:
        return sum(1 for t in self.trials if t.status == status)

    @property
    def total_epochs(self) -> int:
        return sum(t.epochs for t in self.trials)

    @property
    def best_parameter_count(self) -> int:
        """The best trial's model size (what the final training builds, but for its epochs)."""
        return next((t.parameter_count for t in self.trials if t.name == self.best_trial), 0)

    def training_config(self, **overrides: Any) -> TrainingConfig:
        """The trainer's configuration with the best values: the base configuration, the
        best trial's assignments, then ``overrides`` (for example the final run's epochs)."""
        values = {**self.base_config, **self.best_parameters, **overrides}
        return TrainingConfig.from_dict(values).validate()

    def as_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["total_epochs"] = self.total_epochs
        values["best_parameter_count"] = self.best_parameter_count
        values["trial_counts"] = {s: self.count(s) for s in FINISHED_STATES if self.count(s)}
        return values

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TuningResult:
        known = {f.name for f in fields(cls)}
        kept = {k: v for k, v in values.items() if k in known}
        kept["trials"] = [TrialRecord(**t) for t in kept.get("trials", [])]
        return cls(**kept)
