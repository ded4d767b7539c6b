"""The training step of the pipeline: hyperparameters in, a trained ``Model`` directory out.

Layout of the model directory (the KFP ``Model`` artifact)::

    1/                 SavedModel (version 1, the layout TF Serving and KServe expect)
    result.json        what the chief reported: hyperparameters, history, timings
    history.jsonl      per-epoch metrics
"""

from __future__ import annotations

import re
from typing import Any

from fmnist.launcher.base import TrainingJobSpec, get_launcher
from fmnist.training.config import TrainingConfig

SAVED_MODEL_VERSION = "1"


def job_name(model_type: str, suffix: str = "") -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", f"fmnist-{model_type}-{suffix}".lower()).strip("-")
    return name[:63].rstrip("-")


def train_step(
    *,
    config: TrainingConfig,
    data_dir: str,
    model_dir: str,
    backend: str = "local",
    num_workers: int = 1,
    use_chief: bool = False,
    gpus_per_worker: int = 0,
    max_restarts: int = 2,
    job_suffix: str = "",
    launcher_options: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, float]]:
    """Trains one model; returns the ``Model`` artifact metadata and the metrics to log."""
    spec = TrainingJobSpec(
        name=job_name(config.model_type, job_suffix),
        config=config,
        data_dir=data_dir,
        export_dir=f"{model_dir}/{SAVED_MODEL_VERSION}",
        work_dir=model_dir,
        num_workers=num_workers,
        use_chief=use_chief,
        gpus_per_worker=gpus_per_worker,
        max_restarts=max_restarts,
    ).validate()
    outcome = get_launcher(backend, **(launcher_options or {})).run(spec)
    result = outcome.result
    final = result["final_metrics"]
    metadata = {
        "model_type": result["model_type"],
        "framework": "tensorflow",
        "format": "saved_model",
        "saved_model_version": SAVED_MODEL_VERSION,
        "signatures": ["serving_default (image_bytes)", "serving_pixels (pixels)"],
        "hyperparameters": result["hyperparameters"],
        "parameters": result["parameters"],
        "epochs": result["epochs"],
        "replicas": result["replicas"],
        "global_batch_size": result["global_batch_size"],
        "precision": result["precision"],
        "train_seconds": result["train_seconds"],
        "job_seconds": outcome.wall_seconds,
        "restarts": outcome.restarts,
        "backend": backend,
        "final_metrics": final,
    }
    metrics = {
        "train_accuracy": final.get("accuracy", 0.0),
        "train_loss": final.get("loss", 0.0),
        "train_seconds": result["train_seconds"],
        "images_per_second": final.get("images_per_second", 0.0),
        "parameters": float(result["parameters"]),
    }
    if "val_accuracy" in final:
        metrics["validation_accuracy"] = final["val_accuracy"]
    return metadata, metrics
