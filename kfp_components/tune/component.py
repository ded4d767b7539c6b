from typing import NamedTuple

from kfp.dsl import HTML, Artifact, Dataset, Input, Metrics, Output

from kfp_components.base import component


@component
def tune_hyperparameters(
    dataset: Input[Dataset],
    model_type: str,
    enabled: bool,
    batch_size: int,
    learning_rate: float,
    dropout_rate: float,
    filters: int,
    precision: str,
    tuning: dict,
    backend: str,
    kubernetes: dict,
    search: Output[Artifact],
    metrics: Output[Metrics],
    report: Output[HTML],
) -> NamedTuple("TunedHyperparameters", [("learning_rate", float), ("batch_size", int),
                                           ("filters", int), ("dropout_rate", float)]):
    """Searches the trainer's hyperparameters for one CNN and outputs the best values; with
    ``enabled`` false it outputs the given values at once.

    ``kubernetes`` runs a Katib Experiment whose trials are TFJobs of the training step's
    trainer (re-attached on retry, deleted when the run is terminated, the step failing when
    the experiment fails); ``local`` runs the same search space, objective and median-stopping
    rule with Optuna, each trial a real local training job. Trials score on a validation split
    carved from the training data; the test split stays unseen.

    Args:
        dataset: The ingested dataset.
        model_type: ``basic``, ``dropout`` or ``batchnorm``.
        enabled: Search, or hand the given hyperparameters on unchanged.
        batch_size: Per-replica batch size where it is not searched.
        learning_rate: Adam's learning rate where it is not searched.
        dropout_rate: Dropout rate where it is not searched.
        filters: Filters of the first convolution where it is not searched.
        precision: Training precision of every trial.
        tuning: Search settings: algorithm, max_trials, parallel_trials, max_failed_trials,
            epochs, train_examples, validation_examples, early_stopping, min_trials_required,
            start_step, objective_goal, random_state (see the README).
        backend: ``local`` (Optuna, local training jobs) or ``kubernetes`` (Katib, TFJobs).
        kubernetes: Trial pod settings for the kubernetes backend (as for training).
        search: Every trial (parameters, objective, status, epochs) and the best, as JSON.
        metrics: Best validation accuracy, trial counts and total epochs.
        report: A table of every trial and a plot of the objective against the trial.

    Returns:
        The best learning_rate, batch_size, filters and dropout_rate for the training step.
    """
    import json
    import os
    from collections import namedtuple

    from fmnist.training.config import TrainingConfig
    from katib.tune_step import tune_step, tuning_outputs

    base = TrainingConfig(model_type=model_type, batch_size=batch_size,
                          learning_rate=learning_rate, dropout_rate=dropout_rate,
                          filters=filters, precision=precision)
    result = None
    if enabled:
        result = tune_step(model_type=model_type, base=base, tuning=tuning,
                           data_dir=dataset.path, output_dir=search.path, backend=backend,
                           kubernetes=kubernetes)
    best = result.training_config() if result else base
    outputs = tuning_outputs(result)
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
    tuned = namedtuple("TunedHyperparameters",
                       ["learning_rate", "batch_size", "filters", "dropout_rate"])
    return tuned(best.learning_rate, best.batch_size, best.filters, best.dropout_rate)
