from typing import NamedTuple

from kfp.dsl import HTML, Artifact, Dataset, Input, Metrics, Output

from fmnist_kfp.kfp_components.base import component


@component
def tune_hyperparameters(
    dataset: Input[Dataset],
    search: Output[Artifact],
    metrics: Output[Metrics],
    report: Output[HTML],
    model_type: str = "batchnorm",
    enabled: bool = True,
    learning_rate: float = 0.004,
    batch_size: int = 256,
    filters: int = 32,
    dropout_rate: float = 0.5,
    precision: str = "auto",
    tuning: dict = {},  # noqa: B006 - KFP reads the default from here
    backend: str = "kubernetes",
    kubernetes: dict = {},  # noqa: B006 - KFP reads the default from here
    num_workers: int = 2,
    strategy: str = "multi_worker_mirrored",
    num_ps: int = 1,
    gpus_per_worker: int = 0,
    image: str = "ghcr.io/fmnist-kfp/fmnist-kfp:0.2.0",
    gpu_image: str = "ghcr.io/fmnist-kfp/fmnist-kfp:0.2.0-gpu",
) -> NamedTuple("TuneOutputs", [("hyperparameters", dict)]):
    """Searches the trainer's hyperparameters for one CNN and outputs the best values; with
    ``enabled`` false it outputs the given values at once.

    ``kubernetes`` runs a Katib Experiment whose trials are TFJobs of the training step's
    trainer (re-attached on retry, deleted when the run is terminated, the step failing when
    the experiment fails); ``local`` runs the same search space, objective and median-stopping
    rule with Optuna, each trial a real local training job. Trials score on the dataset's
    validation split (set aside at ingestion); the test split stays unseen.

    Args:
        dataset: The ingested dataset.
        model_type: The CNN: basic, dropout or batchnorm.
        enabled: Search, or hand the given hyperparameters on unchanged (the pipeline's
            ``tune``).
        learning_rate: Adam's peak learning rate: reached after the warm-up, then cosine decay to 0.
        batch_size: Per-replica batch size; the global batch is batch_size × replicas.
        filters: Filters of the first convolution (the later ones have twice as many).
        dropout_rate: Dropout rate of the dropout CNN.
        precision: `auto` (bfloat16 on CPUs with AMX/AVX-512 BF16, float16 on GPUs), `float32`,
            `mixed_bfloat16` or `mixed_float16`.
        tuning: Search settings, a JSON object with any of: algorithm, max_trials, parallel_trials,
            max_failed_trials, epochs, train_examples, early_stopping, min_trials_required,
            start_step, objective_goal, random_state, max_parameters, trial_minutes.
        backend: `local` (worker processes on this machine, the predictor on 127.0.0.1) or
            `kubernetes` (TFJobs, Katib Experiments, a KServe InferenceService).
        kubernetes: TFJob and trial pod settings, a JSON object with any of: operator, namespace,
            pvc_name, mount_path, cpu, memory, ps_cpu, ps_memory, gpu_node_selector,
            gpu_tolerations, object_store_secret, service_account, restart_policy,
            active_deadline_seconds, ttl_seconds_after_finished, clean_pod_policy, scheduling.
        num_workers: Worker replicas per training job (processes locally, pods on Kubernetes); on
            one 2-core machine a second worker process halves throughput.
        strategy: `multi_worker_mirrored` (synchronous all-reduce over the chief and workers) or
            `parameter_server` (asynchronous: a Chief coordinates, Workers compute, `num_ps`
            parameter servers hold the variables; a lost worker does not stop training).
        num_ps: Parameter-server replicas of a `parameter_server` job (processes locally, `PS` pods
            on Kubernetes); unused by `multi_worker_mirrored`.
        gpus_per_worker: GPUs per worker (`nvidia.com/gpu`); NCCL all-reduce when more than 0.
        image: The image of the Katib trials' pods that request no GPU (each trial a TFJob or a
            TrainJob); default: the image this component was compiled with.
        gpu_image: The image of the Katib trials' pods that request GPUs (`gpus_per_worker` > 0):
            the same code with TensorFlow's CUDA libraries; default: the GPU image this component
            was compiled with.
        search: Every trial (parameters, objective, status, epochs) and the best, as JSON.
        metrics: Best validation accuracy, trial counts and total epochs.
        report: A table of every trial and a plot of the objective against the trial.

    Returns:
        hyperparameters: learning_rate, batch_size, filters and dropout_rate for training.
    """
    import json
    import os
    from collections import namedtuple
    from dataclasses import asdict

    from fmnist_kfp.kfp_components.outputs import publish
    from fmnist_kfp.kfp_components.tune.step import tune_step, tuning_outputs
    from fmnist_kfp.settings.training import Hyperparameters, TrainingConfig

    given = Hyperparameters(learning_rate=learning_rate, batch_size=batch_size, filters=filters,
                            dropout_rate=dropout_rate)
    result = None
    if not enabled:  # the run's console shows it beside the step (fmnist_kfp.run_console)
        print(f"tuning off for {model_type}: the given hyperparameters go on unchanged")
    if enabled:
        base = TrainingConfig(model_type=model_type, precision=precision).with_hyperparameters(
            given)
        result = tune_step(model_type=model_type, base=base, tuning=tuning,
                           data_dir=dataset.path, output_dir=search.path, backend=backend,
                           kubernetes=kubernetes, num_workers=num_workers,
                           strategy=strategy, num_ps=num_ps,
                           gpus_per_worker=gpus_per_worker, image=image, gpu_image=gpu_image)
    outputs = tuning_outputs(result, given)
    # Files behind every output artifact, so a cached run can reuse them.
    os.makedirs(search.path, exist_ok=True)
    with open(f"{search.path}/result.json", "w") as handle:
        json.dump(outputs.result, handle, indent=2)
    (best,) = publish(outputs.kfp_outputs(), artifact=search, metrics=metrics)
    with open(report.path, "w") as handle:
        handle.write(outputs.html)
    from fmnist_kfp.lineage import add_lineage

    add_lineage(search, "tune", "tune_hyperparameters", inputs={"dataset": dataset}, parameters={
        "model_type": model_type, "tuned": enabled, "backend": backend,
        "given": asdict(given), "best": best,
        **({"image": image, "gpu_image": gpu_image}
           if enabled and backend == "kubernetes" else {})})
    return namedtuple("TuneOutputs", ["hyperparameters"])(best)
