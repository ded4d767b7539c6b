"""Training settings, from the hyperparameters a search tunes to the trainer's whole config.

* :class:`Hyperparameters` — what the tune step searches and hands to training: one type from
  the tune step through training to the run summary;
* :class:`TrainingSettings` — the pipeline's training knobs (hyperparameters, epochs,
  precision, subset size), shared by the pipeline and the trainer;
* :class:`TrainingConfig` — everything one training job runs with (the trainer's flags).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from fmnist_kfp.settings.schema import (
    Settings,
    between,
    not_negative,
    one_of,
    positive,
    setting,
)

MODEL_TYPES = ("basic", "dropout", "batchnorm")
PRECISIONS = ("auto", "float32", "mixed_bfloat16", "mixed_float16")
LR_SCHEDULES = ("cosine", "constant")


@dataclass
class Hyperparameters(Settings):
    """The hyperparameters a search tunes; the tune step outputs them, training takes them."""

    WHAT = "hyperparameters"

    learning_rate: float = setting(
        4e-3, help="Adam's peak learning rate: reached after the warm-up, then cosine decay to 0.",
        rules=[between(0, 1, low_open=True)])
    batch_size: int = setting(
        256, help="Per-replica batch size; the global batch is batch_size × replicas.",
        rules=[positive])
    filters: int = setting(
        32, help="Filters of the first convolution (the later ones have twice as many).",
        rules=[positive])
    dropout_rate: float = setting(
        0.5, help="Dropout rate of the dropout CNN.", rules=[between(0, 1, high_open=True)])

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(Hyperparameters))

    def hyperparameters(self) -> Hyperparameters:
        """Just the tunable values (of a subclass instance too)."""
        return Hyperparameters(**{name: getattr(self, name) for name in self.names()})


@dataclass
class TrainingSettings(Hyperparameters):
    """Training knobs the pipeline exposes and the trainer takes."""

    WHAT = "training settings"

    epochs: int = setting(10, help="Passes over the training split per model.",
                          rules=[positive])
    precision: str = setting(
        "auto", help="`auto` (bfloat16 on CPUs with AMX/AVX-512 BF16, float16 on GPUs), "
                     "`float32`, `mixed_bfloat16` or `mixed_float16`.",
        rules=[one_of(PRECISIONS, "precision")])
    train_examples: int = setting(
        0, help="Train on the first N training examples only (0: all of them).",
        rules=[not_negative])
    profile_steps: int = setting(
        0, help="Training steps profiled into the job's TensorBoard logs, from the second step "
                "on (0: none; scalars and the graph are always logged).",
        rules=[not_negative])


@dataclass
class TrainingConfig(TrainingSettings):
    """What one training job trains and how (the trainer's flags)."""

    WHAT = "training configuration"

    model_type: str = setting("batchnorm", help="The CNN: basic, dropout or batchnorm.",
                              rules=[one_of(MODEL_TYPES, "model type")])
    stem_filters: int = setting(
        16, help="Filters of a 3×3 convolution at full resolution ('same' padding) before the "
                 "book's three (0: none). Multiples of 16 keep oneDNN's bfloat16 kernels fast.",
        rules=[not_negative])
    dense_units: int = setting(64, help="Units of the dense layer before the classifier.",
                               rules=[positive])
    lr_schedule: str = setting("cosine", help="`cosine` decay to 0 over the run, or `constant`.",
                               rules=[one_of(LR_SCHEDULES, "lr_schedule")])
    warmup_epochs: float = setting(
        1.0, help="Linear warm-up of the learning rate from 0 over this many epochs (at most "
                  "half the run; 0: none).",
        rules=[not_negative])
    label_smoothing: float = setting(
        0.1, help="Label smoothing of the cross-entropy targets (0: none).",
        rules=[between(0, 1, high_open=True)])
    augment: bool = setting(
        True, help="Random horizontal flips (garments are left-right symmetric).")
    flip_averaging: bool = setting(
        True, help="The exported model averages its probabilities for each image and its "
                   "mirror image (two forward passes; both signatures).")
    seed: int = setting(42, help="Seed of weights, shuffling and augmentation.")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrainingConfig:
        return cls.from_dict(json.loads(text))

    def with_hyperparameters(self, values: Hyperparameters | dict[str, Any]) -> TrainingConfig:
        """A copy trained with ``values`` (a tune step's output)."""
        if isinstance(values, dict):
            values = Hyperparameters.from_dict(values)
        return replace(self, **asdict(values.hyperparameters()))
