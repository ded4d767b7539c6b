"""The tuning step: a search for one model type, on Katib or on this machine.

``tuning`` (the pipeline's ``tuning`` parameter,
:class:`~fmnist_kfp.settings.tuning.TuningSettings`) sets the search; the search's best values come
back as one :class:`~fmnist_kfp.settings.training.Hyperparameters`, the type the training step
takes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from fmnist_kfp.backends import require_backend
from fmnist_kfp.errors import UserInputError
from fmnist_kfp.katib.results import TuningResult
from fmnist_kfp.kfp_components import reports_errors_briefly
from fmnist_kfp.kfp_components.outputs import StepOutputs
from fmnist_kfp.kubernetes.names import stable_name
from fmnist_kfp.settings.jobs import merged_cluster_settings
from fmnist_kfp.settings.training import Hyperparameters, TrainingConfig
from fmnist_kfp.settings.tuning import TuningSettings
from fmnist_kfp.tuning.experiment_settings import MAX_NAME_LENGTH, ExperimentSettings
from fmnist_kfp.tuning.search_space import SearchSpace


def experiment_name(model_type: str, output_path: str) -> str:
    """The search's name, stable across retries of the step (which re-attach to it)."""
    return stable_name(f"fmnist-tune-{model_type}", output_path, MAX_NAME_LENGTH)


def experiment_settings(name: str, model_type: str, base: TrainingConfig,
                        tuning: dict[str, Any] | TuningSettings, *, num_workers: int = 1,
                        gpus_per_worker: int = 0, strategy: str = "multi_worker_mirrored",
                        num_ps: int = 1) -> tuple[ExperimentSettings, SearchSpace]:
    """The experiment and search space the ``tuning`` settings describe (not yet validated):
    the default space less the sizes over the parameter budget."""
    if isinstance(tuning, dict):
        tuning = TuningSettings.from_dict(tuning)
    settings = ExperimentSettings.from_tuning(name, model_type, base, tuning,
                                              num_workers=num_workers,
                                              gpus_per_worker=gpus_per_worker,
                                              strategy=strategy,
                                              num_ps=num_ps if strategy == "parameter_server"
                                              else 0)
    from fmnist_kfp.katib.parameter_budget import default_search_space

    return settings, default_search_space(settings)


def tuning_problems(tuning: dict[str, Any], model_type: str, base: TrainingConfig,
                    backend: str, *, num_workers: int = 1, gpus_per_worker: int = 0,
                    strategy: str = "multi_worker_mirrored", num_ps: int = 1) -> list[str]:
    """Every problem with these tuning settings, found before any trial starts."""
    try:
        settings, space = experiment_settings("fmnist-tune-check", model_type, base, tuning,
                                              num_workers=num_workers,
                                              gpus_per_worker=gpus_per_worker,
                                              strategy=strategy, num_ps=num_ps)
    except UserInputError as error:
        return [str(error)]
    from fmnist_kfp.katib.parameter_budget import budget_problems

    if backend == "local":
        from fmnist_kfp.katib.optuna_search import local_problems

        problems = local_problems(settings, space)
    else:
        problems = settings.search_problems(space)
    return problems + (budget_problems(settings, space) if not problems else [])


@dataclass(frozen=True)
class TrialJobInputs:
    """How the tuning step's trials run, one object for the component's flat inputs of that
    name: each trial's replicas (the training step's), and on Kubernetes their pods
    (``kubernetes``, the pipeline's parameter, over the images: ``image``, or ``gpu_image``
    for trials that request GPUs)."""

    num_workers: int = 1
    gpus_per_worker: int = 0
    strategy: str = "multi_worker_mirrored"
    num_ps: int = 1  # parameter servers, for strategy parameter_server only
    kubernetes: dict[str, Any] | None = None
    image: str = ""
    gpu_image: str = ""


@reports_errors_briefly
def tune_step(*, model_type: str, base: TrainingConfig, tuning: dict[str, Any], data_dir: str,
              output_dir: str, backend: str = "local", launcher=None,
              **trials: Any) -> TuningResult:
    """Runs the search; trials work under ``output_dir`` locally, on the shared volume on
    Kubernetes (``launcher``: a ``KatibExperimentLauncher`` with its own client). ``trials``:
    the fields of :class:`TrialJobInputs`, as the component passes its inputs (the compiled
    component calls the step with them). Raises ``UserInputError`` before any trial for bad
    settings and ``TuningError`` when the search fails."""
    inputs = TrialJobInputs(**trials)
    name = experiment_name(model_type, output_dir)
    settings, space = experiment_settings(name, model_type, base, tuning,
                                          num_workers=inputs.num_workers,
                                          gpus_per_worker=inputs.gpus_per_worker,
                                          strategy=inputs.strategy, num_ps=inputs.num_ps)

    require_backend("tuning", backend)
    if backend == "local":
        from fmnist_kfp.katib.optuna_search import LocalTuner

        return LocalTuner(work_dir=f"{output_dir}/trials").run(settings, space, data_dir)
    from fmnist_kfp.katib.experiment_launcher import KatibExperimentLauncher
    from fmnist_kfp.kubernetes.storage import make_shared_dirs, stage_dataset, staged_location

    # The compiled image and claim under the user's settings, the merge checked (namespace,
    # claim); the pods' own rules are the Experiment's check's (katib.experiment, below).
    pods = merged_cluster_settings(inputs.kubernetes, image=inputs.image,
                                   gpu_image=inputs.gpu_image,
                                   gpus_per_worker=inputs.gpus_per_worker)
    on_cluster = replace(settings, kubernetes=pods)
    datasets = f"{pods.mount_path.rstrip('/')}/datasets"
    data = staged_location(data_dir, datasets)  # staged below
    katib = launcher or KatibExperimentLauncher(
        timeout_seconds=on_cluster.deadline_seconds())  # tuning.trial_minutes per round
    # Every problem before the dataset is copied, each checked once.
    experiment = katib.experiment(on_cluster, space, data)
    stage_dataset(data_dir, datasets)
    make_shared_dirs(on_cluster.trials_root)  # group-writable: every trial makes its own
    return katib.run(on_cluster, space, data, experiment)


@dataclass
class TuningOutputs:
    """What the tuning step records: result.json, artifact metadata, metrics, the report and
    the hyperparameters training gets."""

    result: dict[str, Any]
    metadata: dict[str, Any]
    metrics: dict[str, float]
    html: str
    hyperparameters: Hyperparameters

    def kfp_outputs(self) -> StepOutputs:
        """The search's metadata, the metrics, and the best hyperparameters as the step's
        output."""
        return StepOutputs(metadata=self.metadata, metrics=self.metrics,
                           returns=(asdict(self.hyperparameters),))


def tuning_outputs(result: TuningResult | None, given: Hyperparameters) -> TuningOutputs:
    """The step's outputs for a finished search, or for tuning switched off (None: the
    ``given`` hyperparameters are handed on)."""
    if result is None:
        return TuningOutputs({"tuned": False}, {"tuned": False}, {},
                             "<p>Tuning was off: the given hyperparameters trained the "
                             "model.</p>", given)
    from fmnist_kfp.katib.report import render_html

    metadata = {
        "tuned": True, "experiment": result.experiment, "backend": result.backend,
        "algorithm": result.algorithm, "objective_metric": result.objective_metric,
        "best_trial": result.best_trial, "best_objective": result.best_objective,
        "best_parameters": result.best_parameters, "trials": len(result.trials),
        "total_epochs": result.total_epochs,
    }
    summary = result.as_dict()
    metrics = {f"best_{result.objective_metric}": result.best_objective,
               "trials": float(len(result.trials)),
               "total_trial_epochs": float(result.total_epochs)}
    metrics.update({f"trials_{status}": float(count)
                    for status, count in summary["trial_counts"].items()})
    best = result.training_config().hyperparameters()
    return TuningOutputs(summary, metadata, metrics, render_html(result), best)
