from kfp.dsl import Dataset, Input, Markdown, Metrics, Model, Output

from fmnist_kfp.kfp_components.base import component


@component
def train_model(
    dataset: Input[Dataset],
    model: Output[Model],
    metrics: Output[Metrics],
    tensorboard: Output[Markdown],
    model_type: str = "batchnorm",
    # {}: each value its setting's default. Not the four values: KFP writes a dict default
    # into the YAML's header in an order that changes between runs.
    hyperparameters: dict = {},  # noqa: B006 - KFP reads the default from here
    epochs: int = 10,
    precision: str = "auto",
    train_examples: int = 0,
    num_workers: int = 2,
    strategy: str = "multi_worker_mirrored",
    num_ps: int = 1,
    evaluator: bool = False,
    gpus_per_worker: int = 0,
    backend: str = "kubernetes",
    kubernetes: dict = {},  # noqa: B006 - KFP reads the default from here
    max_restarts: int = 2,
    profile_steps: int = 0,
    image: str = "ghcr.io/fmnist-kfp/fmnist-kfp:0.2.0",
    gpu_image: str = "ghcr.io/fmnist-kfp/fmnist-kfp:0.2.0-gpu",
):
    """Trains one CNN (MultiWorkerMirroredStrategy or parameter servers) and exports it as a
    SavedModel.

    The ``local`` backend starts one worker process per replica on loopback with the TF_CONFIG
    the Kubeflow training operator injects, restarts preempted workers from the last epoch
    checkpoint and fails the step when a worker fails; ``kubernetes`` runs a TFJob.

    Args:
        dataset: The ingested dataset.
        model_type: The CNN: basic, dropout or batchnorm.
        hyperparameters: learning_rate, batch_size, filters and dropout_rate, as the tune step
            outputs them (the search's best, or the given values); a key left out takes the
            default of the pipeline parameter of that name.
        epochs: Passes over the training split per model.
        precision: `auto` (bfloat16 on CPUs with AMX/AVX-512 BF16, float16 on GPUs), `float32`,
            `mixed_bfloat16` or `mixed_float16`.
        train_examples: Train on the first N training examples only (0: all of them).
        num_workers: Worker replicas per training job (processes locally, pods on Kubernetes); on
            one 2-core machine a second worker process halves throughput.
        strategy: `multi_worker_mirrored` (synchronous all-reduce over the chief and workers) or
            `parameter_server` (asynchronous: a Chief coordinates, Workers compute, `num_ps`
            parameter servers hold the variables; a lost worker does not stop training).
        num_ps: Parameter-server replicas of a `parameter_server` job (processes locally, `PS` pods
            on Kubernetes); unused by `multi_worker_mirrored`.
        evaluator: Run an evaluator replica beside training (a process locally, a TFJob `Evaluator`
            on Kubernetes) that scores each epoch's checkpoint on the validation split ingestion set
            aside into `evaluation.jsonl`, which the selection report plots.
        gpus_per_worker: GPUs per worker (`nvidia.com/gpu`); NCCL all-reduce when more than 0.
        backend: `local` (worker processes on this machine, the predictor on 127.0.0.1) or
            `kubernetes` (TFJobs, Katib Experiments, a KServe InferenceService).
        kubernetes: TFJob and trial pod settings, a JSON object with any of: operator, namespace,
            pvc_name, mount_path, cpu, memory, ps_cpu, ps_memory, gpu_node_selector,
            gpu_tolerations, object_store_secret, service_account, restart_policy,
            active_deadline_seconds, ttl_seconds_after_finished, clean_pod_policy, scheduling.
        max_restarts: Restarts a training job may take after its workers are killed (exit code >=
            128), resuming from the last epoch checkpoint: whole-job restarts locally, pods
            recreated by the training operator on Kubernetes; one more fails the job.
        profile_steps: Training steps profiled into the job's TensorBoard logs, from the second step
            on (0: none; scalars and the graph are always logged).
        image: The image of the training job's pods that request no GPU (a TFJob's replicas or a
            TrainJob's nodes); default: the image this component was compiled with.
        gpu_image: The image of the training job's pods that request GPUs (`gpus_per_worker` > 0):
            the same code with TensorFlow's CUDA libraries; default: the GPU image this component
            was compiled with.
        model: SavedModel under ``1/`` with the training history and TensorBoard logs
            (``tensorboard/``); metadata holds the model type, hyperparameters, parameter
            count, epochs, train time, final metrics and lineage.
        metrics: Final training metrics.
        tensorboard: Where to see the job's TensorBoard: a link to the Kubeflow
            ``Tensorboard`` this step creates on Kubernetes, the logs' path locally.
    """
    from fmnist_kfp.kfp_components.outputs import publish
    from fmnist_kfp.kfp_components.train.step import tensorboard_markdown, train_step
    from fmnist_kfp.lineage import add_lineage
    from fmnist_kfp.settings.training import TrainingConfig

    config = TrainingConfig(model_type=model_type, epochs=epochs, precision=precision,
                            train_examples=train_examples, profile_steps=profile_steps,
                            ).with_hyperparameters(hyperparameters)
    result = train_step(
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
    publish(result.kfp_outputs(), artifact=model, metrics=metrics)
    with open(tensorboard.path, "w") as handle:
        handle.write(tensorboard_markdown(model_type, result.tensorboard))
    add_lineage(model, "train", "train_model", inputs={"dataset": dataset}, parameters={
        "model_type": model_type, "hyperparameters": hyperparameters, "epochs": epochs,
        "precision": precision, "train_examples": train_examples, "num_workers": num_workers,
        "strategy": strategy, "num_ps": num_ps, "evaluator": evaluator, "backend": backend,
        "job_name": result.job_name,
        **({"image": image, "gpu_image": gpu_image} if backend == "kubernetes" else {})})
