from typing import NamedTuple

from kfp.dsl import HTML, Artifact, Dataset, Input, Metrics, Output

from fmnist_kfp.kfp_components.base import component


@component(defaults={"enabled": True}, volume=True, credentials=True)
def tune_hyperparameters(
    dataset: Input[Dataset],
    model_type: str,
    enabled: bool,
    learning_rate: float,
    batch_size: int,
    filters: int,
    dropout_rate: float,
    precision: str,
    tuning: dict,
    backend: str,
    kubernetes: dict,
    num_workers: int,
    strategy: str,
    num_ps: int,
    gpus_per_worker: int,
    image: str,
    gpu_image: str,
    search: Output[Artifact],
    metrics: Output[Metrics],
    report: Output[HTML],
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
        model_type: {setting}
        enabled: Search, or hand the given hyperparameters on unchanged (the pipeline's
            ``tune``).
        learning_rate: {setting}
        batch_size: {setting}
        filters: {setting}
        dropout_rate: {setting}
        precision: {setting}
        tuning: {setting}
        backend: {setting}
        kubernetes: {setting}
        num_workers: {setting}
        strategy: {setting}
        num_ps: {setting}
        gpus_per_worker: {setting}
        image: {setting}
        gpu_image: {setting}
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

    from fmnist_kfp.kfp_components.tune.step import tune_step, tuning_outputs
    from fmnist_kfp.settings.training import Hyperparameters, TrainingConfig

    given = Hyperparameters(learning_rate=learning_rate, batch_size=batch_size, filters=filters,
                            dropout_rate=dropout_rate)
    result = None
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
    search.metadata.update(outputs.metadata)
    for name, value in outputs.metrics.items():
        metrics.log_metric(name, value)
    with open(metrics.path, "w") as handle:
        json.dump(metrics.metadata, handle)
    with open(report.path, "w") as handle:
        handle.write(outputs.html)
    from fmnist_kfp.lineage import add_lineage

    add_lineage(search, "tune", "tune_hyperparameters", inputs={"dataset": dataset}, parameters={
        "model_type": model_type, "tuned": enabled, "backend": backend,
        "given": asdict(given), "best": asdict(outputs.hyperparameters),
        **({"image": image, "gpu_image": gpu_image}
           if enabled and backend == "kubernetes" else {})})
    return namedtuple("TuneOutputs", ["hyperparameters"])(asdict(outputs.hyperparameters))
