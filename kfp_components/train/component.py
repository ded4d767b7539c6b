from kfp.dsl import Dataset, Input, Metrics, Model, Output

from kfp_components.base import component


@component
def train_model(
    dataset: Input[Dataset],
    model_type: str,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    dropout_rate: float,
    filters: int,
    precision: str,
    train_examples: int,
    num_workers: int,
    gpus_per_worker: int,
    backend: str,
    kubernetes: dict,
    max_restarts: int,
    model: Output[Model],
    metrics: Output[Metrics],
):
    """Trains one CNN with MultiWorkerMirroredStrategy and exports it as a SavedModel.

    The ``local`` backend starts one worker process per replica on loopback with the TF_CONFIG
    the Kubeflow training operator injects, restarts preempted workers from the last epoch
    checkpoint and fails the step when a worker fails; ``kubernetes`` runs a TFJob.

    Args:
        dataset: The ingested dataset.
        model_type: ``basic``, ``dropout`` or ``batchnorm``.
        epochs: Passes over the training split.
        batch_size: Per-replica batch; the global batch is this times the replicas.
        learning_rate: Adam's learning rate.
        dropout_rate: Dropout rate of the ``dropout`` model.
        filters: Filters of the first convolution (the later ones have twice as many).
        precision: ``auto`` (bfloat16 on CPUs with AMX/AVX-512 BF16, float16 on GPUs),
            ``float32``, ``mixed_bfloat16`` or ``mixed_float16``.
        train_examples: Train on the first N examples only (0: all), for quick runs.
        num_workers: Worker replicas (processes locally, pods on Kubernetes).
        gpus_per_worker: GPUs per worker (``nvidia.com/gpu``; NCCL all-reduce when > 0).
        backend: ``local`` or ``kubernetes``.
        kubernetes: TFJob settings for the kubernetes backend: ``namespace``, ``pvc_name``,
            ``mount_path``, ``object_store_secret``, ``cpu``, ``memory``, ``backoff_limit``,
            ``active_deadline_seconds``, ``ttl_seconds_after_finished`` (see KubernetesSettings).
        max_restarts: Restarts of the whole job after a worker is killed.
        model: SavedModel under ``1/`` with the training history; metadata holds the model
            type, hyperparameters, parameter count, epochs, train time and final metrics.
        metrics: Final training metrics.
    """
    import json

    from fmnist.launcher.step import train_step
    from fmnist.training.config import TrainingConfig

    config = TrainingConfig(
        model_type=model_type,
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        dropout_rate=dropout_rate,
        filters=filters,
        precision=precision,
        train_examples=train_examples,
    )
    metadata, values = train_step(
        config=config,
        data_dir=dataset.path,
        model_dir=model.path,
        backend=backend,
        num_workers=num_workers,
        gpus_per_worker=gpus_per_worker,
        max_restarts=max_restarts,
        launcher_options=kubernetes if backend == "kubernetes" else None,
    )
    model.metadata.update(metadata)
    for name, value in values.items():
        metrics.log_metric(name, value)
    with open(metrics.path, "w") as handle:  # a file, so the cache entry can be reused
        json.dump(values, handle)
