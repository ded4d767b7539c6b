from kfp.dsl import Dataset, Input, Markdown, Metrics, Model, Output

from fmnist_kfp.kfp_components.base import component


# hyperparameters defaults to {} (each value its setting's default), not to the four values:
# KFP writes a dict default into the YAML's header in an order that changes between runs.
@component(defaults={"hyperparameters": {}}, volume=True, credentials=True)
def train_model(
    dataset: Input[Dataset],
    model_type: str,
    hyperparameters: dict,
    epochs: int,
    precision: str,
    train_examples: int,
    num_workers: int,
    strategy: str,
    num_ps: int,
    evaluator: bool,
    gpus_per_worker: int,
    backend: str,
    kubernetes: dict,
    max_restarts: int,
    profile_steps: int,
    image: str,
    gpu_image: str,
    model: Output[Model],
    metrics: Output[Metrics],
    tensorboard: Output[Markdown],
):
    """Trains one CNN (MultiWorkerMirroredStrategy or parameter servers) and exports it as a
    SavedModel.

    The ``local`` backend starts one worker process per replica on loopback with the TF_CONFIG
    the Kubeflow training operator injects, restarts preempted workers from the last epoch
    checkpoint and fails the step when a worker fails; ``kubernetes`` runs a TFJob.

    Args:
        dataset: The ingested dataset.
        model_type: {setting}
        hyperparameters: learning_rate, batch_size, filters and dropout_rate, as the tune step
            outputs them (the search's best, or the given values); a key left out takes the
            default of the pipeline parameter of that name.
        epochs: {setting}
        precision: {setting}
        train_examples: {setting}
        num_workers: {setting}
        strategy: {setting}
        num_ps: {setting}
        evaluator: {setting}
        gpus_per_worker: {setting}
        backend: {setting}
        kubernetes: {setting}
        max_restarts: {setting}
        profile_steps: {setting}
        image: {setting}
        gpu_image: {setting}
        model: SavedModel under ``1/`` with the training history and TensorBoard logs
            (``tensorboard/``); metadata holds the model type, hyperparameters, parameter
            count, epochs, train time, final metrics and lineage.
        metrics: Final training metrics.
        tensorboard: Where to see the job's TensorBoard: a link to the Kubeflow
            ``Tensorboard`` this step creates on Kubernetes, the logs' path locally.
    """
    import json

    from fmnist_kfp.kfp_components.train.step import tensorboard_markdown, train_step
    from fmnist_kfp.lineage import add_lineage
    from fmnist_kfp.settings.training import TrainingConfig

    config = TrainingConfig(model_type=model_type, epochs=epochs, precision=precision,
                            train_examples=train_examples, profile_steps=profile_steps,
                            ).with_hyperparameters(hyperparameters)
    metadata, values = train_step(
        config=config,
        data_dir=dataset.path,
        model_dir=model.path,
        backend=backend,
        num_workers=num_workers,
        strategy=strategy,
        num_ps=num_ps,
        evaluator=evaluator,
        gpus_per_worker=gpus_per_worker,
        max_restarts=max_restarts,
        launcher_options=kubernetes if backend == "kubernetes" else None,
        image=image,
        gpu_image=gpu_image,
    )
    model.metadata.update(metadata)
    for name, value in values.items():
        metrics.log_metric(name, value)
    with open(metrics.path, "w") as handle:  # a file, so the cache entry can be reused
        json.dump(values, handle)
    with open(tensorboard.path, "w") as handle:
        handle.write(tensorboard_markdown(model_type, metadata["tensorboard"]))
    add_lineage(model, "train", "train_model", inputs={"dataset": dataset}, parameters={
        "model_type": model_type, "hyperparameters": hyperparameters, "epochs": epochs,
        "precision": precision, "train_examples": train_examples, "num_workers": num_workers,
        "strategy": strategy, "num_ps": num_ps, "evaluator": evaluator, "backend": backend,
        "job_name": metadata["job_name"],
        **({"image": image, "gpu_image": gpu_image} if backend == "kubernetes" else {})})
