"""The training step of the pipeline: hyperparameters in, a trained ``Model`` directory out.

Layout of the model directory (the KFP ``Model`` artifact)::

    1/                 SavedModel (version 1, the layout TF Serving and KServe expect)
    result.json        what the chief reported: hyperparameters, history, timings
    history.jsonl      per-epoch metrics
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fmnist.backends import choose_backend
from fmnist.errors import UserInputError
from fmnist.kubernetes.names import stable_name
from fmnist.kubernetes.storage import copy_tree, stage_dataset
from fmnist.settings.jobs import KubernetesSettings, cluster_settings
from fmnist.settings.platform import PVC_ENV
from fmnist.settings.training import TrainingConfig
from fmnist.training.export import SAVED_MODEL_VERSION
from fmnist.training.job import TrainingJobSpec


def job_name(model_type: str, model_dir: str) -> str:
    """The training job's name: :func:`stable_name` of the model's output location."""
    return stable_name(f"fmnist-{model_type}", model_dir)


def training_backend(backend: str, settings: KubernetesSettings | None = None,
                     make_launcher: Callable[[KubernetesSettings], Any] | None = None):
    """The launcher of ``backend``: worker processes here, or a TFJob on the cluster with the
    pods' ``settings`` (``make_launcher`` builds it from them; tests give it a client)."""

    def local():
        from fmnist.launcher.local import LocalProcessLauncher

        return LocalProcessLauncher()

    def kubernetes():
        from fmnist.launcher.kubernetes import TFJobLauncher

        return (make_launcher or TFJobLauncher)(settings)

    return choose_backend("training", backend, local=local, kubernetes=kubernetes)


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
    make_launcher: Callable[[KubernetesSettings], Any] | None = None,
) -> tuple[dict[str, Any], dict[str, float]]:
    """Trains one model; returns the ``Model`` artifact metadata and the metrics to log.

    On Kubernetes the workers are pods that cannot see this step's artifact paths, so the
    dataset is staged on the shared volume (once per dataset) and the job works there; the
    finished model is then copied into ``model_dir`` like the local backend's.
    ``launcher_options`` is the pipeline's ``kubernetes`` parameter, merged over the compiled
    platform's pod settings (:func:`~fmnist.settings.jobs.cluster_settings`).
    """
    name = job_name(config.model_type, model_dir)
    job_data_dir, job_dir = data_dir, model_dir
    settings = None
    if backend == "kubernetes":
        settings = cluster_settings(launcher_options)  # checked before anything is copied
        if not settings.pvc_name:
            raise UserInputError(
                "a TFJob needs the shared claim its pods and this step both mount (the staged "
                f"dataset, the exported model): compile the pipeline with {PVC_ENV}=<claim>, "
                "or set pvc_name in the kubernetes parameter")
        shared = settings.mount_path.rstrip("/")
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
    if settings is not None:  # every problem found before the dataset is copied
        from fmnist.kubernetes.tfjob import build_tfjob

        build_tfjob(spec, settings)
        job_data_dir = stage_dataset(data_dir, f"{shared}/datasets")
        spec.data_dir = job_data_dir
    outcome = training_backend(backend, settings, make_launcher).run(spec)
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
