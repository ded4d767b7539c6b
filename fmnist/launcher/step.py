"""The training step of the pipeline: hyperparameters in, a trained ``Model`` directory out.

Layout of the model directory (the KFP ``Model`` artifact)::

    1/                 SavedModel (version 1, the layout TF Serving and KServe expect)
    result.json        what the chief reported: hyperparameters, history, timings
    history.jsonl      per-epoch metrics
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from fmnist.launcher.base import TrainingJobSpec, get_launcher
from fmnist.training.config import TrainingConfig

SAVED_MODEL_VERSION = "1"


def stable_name(prefix: str, location: str, max_length: int = 63) -> str:
    """A DNS-label name that is the same every time this task of this run asks, and different
    for every other task and run: ``prefix`` plus a hash of the task's output location, which
    KFP derives from the run and the task. A retried launcher therefore finds the remote job
    (TFJob, Katib Experiment) it created."""
    digest = hashlib.sha256(location.encode()).hexdigest()[:10]
    name = re.sub(r"[^a-z0-9-]+", "-", prefix.lower()).strip("-")
    return f"{name[:max_length - len(digest) - 1]}-{digest}"


def job_name(model_type: str, model_dir: str) -> str:
    """The training job's name: :func:`stable_name` of the model's output location."""
    return stable_name(f"fmnist-{model_type}", model_dir)


def copy_tree(source: str, destination: str, last: str = "") -> None:
    """Copies a directory with ``tf.io.gfile`` (local paths, mounts, gs://, s3://); the
    top-level file named ``last`` is copied after everything else (a completion marker)."""
    import tensorflow as tf

    deferred = None
    for directory, _, files in tf.io.gfile.walk(source):
        target = destination + directory[len(source.rstrip("/")):]
        tf.io.gfile.makedirs(target)
        for name in files:
            if name == last and target == destination:
                deferred = (f"{directory}/{name}", f"{target}/{name}")
                continue
            tf.io.gfile.copy(f"{directory}/{name}", f"{target}/{name}", overwrite=True)
    if deferred:
        tf.io.gfile.copy(*deferred, overwrite=True)


def stage_dataset(data_dir: str, shared_root: str) -> str:
    """Copies the dataset to shared storage under a name from its checksums; reuses a copy."""
    import tensorflow as tf

    from fmnist.dataset.records import METADATA_FILE, read_metadata

    metadata = read_metadata(data_dir)
    key = hashlib.sha256(
        repr(sorted(metadata.get("sha256", {}).items())).encode()
        + metadata.get("ingested_at", "").encode()
    ).hexdigest()[:16]
    target = f"{shared_root}/{key}"
    if not tf.io.gfile.exists(f"{target}/{METADATA_FILE}"):  # written last: a whole copy
        copy_tree(data_dir, target, last=METADATA_FILE)
    return target


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
    launcher_options: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, float]]:
    """Trains one model; returns the ``Model`` artifact metadata and the metrics to log.

    On Kubernetes the workers are pods that cannot see this step's artifact paths, so the
    dataset is staged on the shared volume (once per dataset) and the job works there; the
    finished model is then copied into ``model_dir`` like the local backend's.
    """
    name = job_name(config.model_type, model_dir)
    job_data_dir, job_dir = data_dir, model_dir
    options = dict(launcher_options or {})
    if backend == "kubernetes":
        shared = options.get("mount_path", "/mnt/fmnist").rstrip("/")
        job_data_dir = stage_dataset(data_dir, f"{shared}/datasets")
        job_dir = f"{shared}/jobs/{name}"
    spec = TrainingJobSpec(
        name=name,
        config=config,
        data_dir=job_data_dir,
        export_dir=f"{job_dir}/{SAVED_MODEL_VERSION}",
        work_dir=job_dir,
        num_workers=num_workers,
        use_chief=use_chief,
        gpus_per_worker=gpus_per_worker,
        max_restarts=max_restarts,
    ).validate()
    outcome = get_launcher(backend, **options).run(spec)
    if job_dir != model_dir:
        copy_tree(job_dir, model_dir)
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
        "job_name": name,
        "export_uri": f"{job_dir}/{SAVED_MODEL_VERSION}",
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
