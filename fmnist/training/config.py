"""Hyperparameters of one training run, validated before any work starts."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from fmnist.errors import UserInputError

MODEL_TYPES = ("basic", "dropout", "batchnorm")
PRECISIONS = ("auto", "float32", "mixed_bfloat16", "mixed_float16")
LR_SCHEDULES = ("cosine", "constant")


@dataclass
class TrainingConfig:
    """What to train and how. ``batch_size`` is per replica: the global batch is
    ``batch_size × replicas``, so adding workers keeps each worker's step the same size."""

    model_type: str = "batchnorm"
    epochs: int = 10
    batch_size: int = 64
    learning_rate: float = 1e-3
    dropout_rate: float = 0.5
    filters: int = 32
    dense_units: int = 64
    precision: str = "auto"
    lr_schedule: str = "cosine"  # cosine decay to 0 over the run, or constant
    augment: bool = True  # random horizontal flips: garments are left-right symmetric
    train_examples: int = 0  # 0: the whole training split
    validation_examples: int = 0  # carved from the end of the training split, never the test split
    seed: int = 42

    def validate(self) -> TrainingConfig:
        problems = self.problems()
        if problems:
            raise UserInputError("invalid training configuration: " + "; ".join(problems))
        return self

    def problems(self) -> list[str]:
        """Every invalid setting, each with what is allowed."""
        problems = []
        if self.model_type not in MODEL_TYPES:
            problems.append(
                f"unknown model type {self.model_type!r}; choose one of {', '.join(MODEL_TYPES)}"
            )
        for name in ("epochs", "batch_size", "filters", "dense_units"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                problems.append(f"{name} must be a positive integer, got {value!r}")
        if not 0 < self.learning_rate <= 1:
            problems.append(f"learning_rate must be in (0, 1], got {self.learning_rate!r}")
        if not 0 <= self.dropout_rate < 1:
            problems.append(f"dropout_rate must be in [0, 1), got {self.dropout_rate!r}")
        if self.precision not in PRECISIONS:
            problems.append(
                f"unknown precision {self.precision!r}; choose one of {', '.join(PRECISIONS)}"
            )
        if self.lr_schedule not in LR_SCHEDULES:
            problems.append(
                f"unknown lr_schedule {self.lr_schedule!r}; choose one of {', '.join(LR_SCHEDULES)}"
            )
        for name in ("train_examples", "validation_examples"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be 0 (all/none) or positive")
        return problems

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainingConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise UserInputError(
                f"unknown hyperparameters {sorted(unknown)}; known: {sorted(known)}"
            )
        return cls(**values)

    @classmethod
    def field_types(cls) -> dict[str, type]:
        """Each field's type (``int``, ``float``, ``str``, ``bool``), from its default."""
        defaults = cls()
        return {f.name: type(getattr(defaults, f.name)) for f in fields(cls)}

    @classmethod
    def typed(cls, name: str, value: Any) -> Any:
        """``value`` as field ``name`` holds it: Katib's assignments are strings and KFP's
        artifact metadata carries every number as a float (``"64"``, ``64.0`` → ``64``)."""
        kind = cls.field_types().get(name)
        if kind is None:
            raise KeyError(f"{name!r} is not a trainer hyperparameter")
        if kind is bool:
            return value if isinstance(value, bool) else str(value).lower() in ("true", "1",
                                                                                "yes")
        if kind is int:
            return int(float(value))
        return kind(value)

    @classmethod
    def from_json(cls, text: str) -> TrainingConfig:
        return cls.from_dict(json.loads(text))
