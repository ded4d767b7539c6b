"""The pipeline's run parameters: defaults in one place, validated before any work starts."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from fmnist.dataset.official import OFFICIAL_FILES
from fmnist.dataset.sources import DATA_DIR_ENV, TFDS_SOURCE, resolve_source
from fmnist.durations import parse_duration
from fmnist.errors import UserInputError
from fmnist.launcher.base import BACKENDS
from fmnist.training.config import MODEL_TYPES, TrainingConfig


@dataclass
class PipelineParameters:
    """Run parameters of the Fashion-MNIST pipeline (see the pipeline docstring)."""

    data_source: str = ""
    freshness: str = "24h"
    expected_sha256: dict[str, str] = field(default_factory=dict)
    model_types: list[str] = field(default_factory=lambda: list(MODEL_TYPES))
    epochs: int = 12
    batch_size: int = 128
    learning_rate: float = 1e-3
    dropout_rate: float = 0.5
    filters: int = 32
    precision: str = "auto"
    train_examples: int = 0
    # One worker per job on one machine: a second process on the same cores trains 2.4x slower
    # (gRPC ring all-reduce, half the threads each). Clusters raise it: one pod per worker.
    num_workers: int = 1
    gpus_per_worker: int = 0
    backend: str = "local"
    kubernetes: dict[str, Any] = field(default_factory=dict)
    max_restarts: int = 2
    tune: bool = False
    tuning: dict[str, Any] = field(default_factory=dict)  # see katib.tune_step
    model_name: str = "fashion-mnist"
    blessing_tolerance: float = 0.005
    verification_images: int = 200
    prediction_images: int = 1000
    serving: dict[str, Any] = field(default_factory=dict)

    def validate(self, check_data: bool | None = None) -> PipelineParameters:
        """Raises ``UserInputError`` naming every bad parameter; checks that a local data
        directory exists and holds the four files (their checksums are verified on ingest)."""
        problems: list[str] = []
        if not self.model_types:
            problems.append("model_types is empty; give at least one of " + ", ".join(MODEL_TYPES))
        if len(set(self.model_types)) != len(self.model_types):
            problems.append(f"model_types has duplicates: {self.model_types}")
        for model_type in self.model_types or [MODEL_TYPES[0]]:
            config = self.training_config(model_type)
            config_problems = config.problems()
            problems += config_problems
            if self.tune and not config_problems:  # the search starts from this configuration
                from katib.tune_step import tuning_problems

                problems += tuning_problems(self.tuning, model_type, config, self.backend)
        try:
            parse_duration(self.freshness)
        except UserInputError as err:
            problems.append(str(err))
        if self.backend not in BACKENDS:
            problems.append(f"unknown backend {self.backend!r}; choose one of {BACKENDS}")
        if self.num_workers < 1:
            problems.append(f"num_workers must be at least 1, got {self.num_workers}"
                            + (" (GPUs were asked for, but no worker would use them)"
                               if self.gpus_per_worker else ""))
        if self.gpus_per_worker < 0:
            problems.append(f"gpus_per_worker must be 0 or more, got {self.gpus_per_worker}")
        problems += _kubernetes_problems(self.kubernetes, self.backend)
        if self.max_restarts < 0:
            problems.append(f"max_restarts must be 0 or more, got {self.max_restarts}")
        problems += _serving_problems(self)
        if check_data if check_data is not None else self.backend == "local":
            # A cluster reads its own storage; this machine's directories mean nothing there.
            problems += _data_problems(resolve_source(self.data_source))
        if problems:
            unique = list(dict.fromkeys(problems))
            raise UserInputError("invalid pipeline parameters:\n  - " + "\n  - ".join(unique))
        return self

    def training_config(self, model_type: str) -> TrainingConfig:
        """What the training step of ``model_type`` is given (before any tuning)."""
        return TrainingConfig(
            model_type=model_type,
            epochs=self.epochs,
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            dropout_rate=self.dropout_rate,
            filters=self.filters,
            precision=self.precision,
            train_examples=self.train_examples,
        )

    def arguments(self) -> dict[str, Any]:
        """Pipeline arguments, with the data source resolved so it is part of the cache key."""
        values = asdict(self)
        values["data_source"] = resolve_source(self.data_source)
        return values


def _kubernetes_problems(settings: dict[str, Any], backend: str) -> list[str]:
    from dataclasses import fields as dataclass_fields

    from fmnist.launcher.tfjob import KubernetesSettings
    from fmnist.settings import component_image

    known = {f.name for f in dataclass_fields(KubernetesSettings)} - {"image"}
    unknown = sorted(set(settings) - known)
    if unknown:
        return [f"unknown kubernetes settings {unknown}; known: {sorted(known)}"]
    if backend != "kubernetes":
        return []
    try:
        KubernetesSettings(image=component_image(), **settings).validate()
    except (UserInputError, TypeError) as err:
        return [str(err)]
    return []


def _serving_problems(parameters: PipelineParameters) -> list[str]:
    from serving.deploy_step import serving_problems

    problems = serving_problems(parameters.serving, parameters.backend, parameters.model_name,
                                parameters.blessing_tolerance, parameters.verification_images)
    if parameters.prediction_images < 1:
        problems.append(f"prediction_images must be at least 1, got {parameters.prediction_images}")
    return [p for p in problems if not p.startswith("unknown backend")]  # reported above


def _data_problems(source: str) -> list[str]:
    if source == TFDS_SOURCE or "://" in source:
        return []  # remote sources are checked by the ingestion step itself
    if not os.path.isdir(source):
        return [
            f"data directory {source!r} does not exist (from the data_source parameter or "
            f"${DATA_DIR_ENV}); point it at a directory holding the four official IDX .gz files"
        ]
    missing = [f.name for f in OFFICIAL_FILES if not os.path.isfile(os.path.join(source, f.name))]
    if missing:
        return [f"data directory {source!r} lacks {', '.join(missing)}"]
    return []
