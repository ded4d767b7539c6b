"""What a Katib Experiment (or the same search run locally) is: the objective, algorithm,
trial budget, early stopping and the trials' jobs, checked in Katib's own terms before anything
is built. :mod:`fmnist_kfp.kubernetes.experiment` turns it into the Experiment manifest;
:mod:`fmnist_kfp.katib.optuna_search` runs it with Optuna.

Trials score on the dataset's validation split, which ingestion set aside from the training
files (``validation_examples``); the test split stays unseen until the chosen model is
reported. Katib reads the metrics from the trainer's stdout: every epoch prints one line, an
RFC 3339 UTC timestamp and ``key=value`` pairs
(``2025-01-01T12:00:03.123456Z epoch=3 epochs=10 loss=0.3100 accuracy=0.8900 val_loss=0.2800
val_accuracy=0.9000 seconds=... images_per_second=...``), one report per epoch, which is what
median stopping compares at ``start_step``. The timestamp matters: Katib's collector takes a
line's first token as its time when it parses as RFC 3339 and stores ``0001-01-01T00:00:00Z``
otherwise, and ``latest`` is the value with the greatest time, ties going to whichever row the
database returns last (``ORDER BY time`` only): without timestamps a trial's "latest" epoch
depends on row order.

upstream: docs/upstream.md#katib
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.settings.jobs import KubernetesSettings, job_problems
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.settings.tuning import TuningSettings
from fmnist_kfp.tuning.search_space import SearchSpace, algorithm_problems

API_VERSION = "kubeflow.org/v1beta1"
# What the trainer prints each epoch (besides the epoch=/epochs= counters); the val_ pair is
# scored on the dataset's validation split.
REPORTED_METRICS = ("loss", "accuracy", "val_loss", "val_accuracy", "seconds", "images_per_second")
OBJECTIVE_TYPES: dict[str, Literal["maximize", "minimize"]] = {
    "val_accuracy": "maximize", "val_loss": "minimize", "accuracy": "maximize", "loss": "minimize"}
METRIC_STRATEGIES = ("latest", "max", "min")
RESUME_POLICIES = ("Never", "LongRunning", "FromVolume")
EARLY_STOPPING_ALGORITHMS = ("medianstop",)
# Katib's default StdOut filter (pkg/metricscollector/v1beta1/common/const.go), spelled out so
# the manifest states how the epoch lines are parsed and tests parse them with the same regex.
METRICS_FILTER = r"([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)"
# The training operator labels exactly one pod of a TFJob job-role=master: the Chief replica if
# there is one, else Worker 0 (TFJobReconciler.IsMasterRole). That is also the trainer's chief
# (ClusterRole.is_chief), the pod that exports, so Katib collects metrics from it alone.
PRIMARY_POD_LABELS = {"training.kubeflow.org/job-role": "master"}
SUCCESS_CONDITION = 'status.conditions.#(type=="Succeeded")#|#(status=="True")#'
FAILURE_CONDITION = 'status.conditions.#(type=="Failed")#|#(status=="True")#'
TRIAL_NAME_PARAMETER = "trialName"  # ${trialSpec.Name}: a directory of its own per trial
# Trial TFJobs are named <experiment>-<8 characters> and their pods' services
# <trial>-worker-<i>, which must stay DNS labels (63 characters).
MAX_NAME_LENGTH = 40
# The step's deadline beyond its trials' rounds: Katib's suggestion service starting, the
# dataset staged, the Experiment deleted.
SEARCH_SLACK_SECONDS = 600

_TUNING = TuningSettings()  # the defaults a search starts from, for either backend


def placeholder(name: str) -> str:
    """Where Katib substitutes a trial parameter's value in the trial template."""
    return "${trialParameters." + name + "}"


@dataclass(frozen=True)
class EarlyStopping:
    """Katib's median stopping: once ``min_trials_required`` trials have succeeded, a trial whose
    objective after ``start_step`` reports (epochs) is worse than the succeeded trials' average
    over their first ``start_step`` reports is stopped (Katib's medianstop service averages,
    despite the name)."""

    min_trials_required: int = _TUNING.min_trials_required
    start_step: int = _TUNING.start_step
    algorithm: str = "medianstop"


@dataclass
class ExperimentSettings:
    """How the search runs: objective, algorithm, trial budget and the trials' TFJobs."""

    name: str
    # Image, storage and resources of every trial pod; None for a search on this machine only.
    kubernetes: KubernetesSettings | None = None
    namespace: str = ""  # empty: kubernetes.namespace, else the current namespace
    algorithm: str = _TUNING.algorithm
    algorithm_settings: dict[str, Any] = field(default_factory=dict)
    objective_metric: str = "val_accuracy"
    objective_goal: float | None = None  # stop once a trial reaches it; None: run all trials
    additional_metrics: tuple[str, ...] = ("val_loss", "accuracy", "loss")
    # "latest": a trial scores its last epoch, the model it exports (not its best epoch).
    metric_strategy: str = "latest"
    parallel_trial_count: int = _TUNING.parallel_trials
    max_trial_count: int = _TUNING.max_trials
    max_failed_trial_count: int = _TUNING.failed_trial_budget
    early_stopping: EarlyStopping | None = None
    resume_policy: str = "Never"
    model_type: str = "batchnorm"
    # The unsearched fields; by default a trial's budget is the default search's.
    base_config: TrainingConfig = field(default_factory=lambda: TrainingConfig(
        epochs=_TUNING.epochs, train_examples=_TUNING.train_examples))
    num_workers: int = 1  # per trial TFJob
    use_chief: bool = False  # an extra Chief replica per trial (it trains too)
    # A trial's TFJob runs the training step's strategy: parameter_server adds a Chief (the
    # coordinator) and num_ps PS replicas; its scores come from the trial's own validation.
    strategy: str = "multi_worker_mirrored"
    num_ps: int = 0
    gpus_per_worker: int = 0
    # Pods of a trial's TFJob recreated after a kill (its runPolicy.backoffLimit follows it); as
    # the local search's trials get.
    max_restarts: int = 1
    output_dir: str = ""  # trials write under <output_dir>/<name>/<trial>; default: the PVC's
    # Keep finished trials' jobs (and pods) for debugging; kept anyway with early stopping
    # (fmnist_kfp.kubernetes.experiment.retains_trial_jobs).
    retain_trials: bool = False
    trial_minutes: int = _TUNING.trial_minutes  # a trial's share of the step's deadline
    # A configuration with more parameters is never trained (katib/parameter_budget.py); 0: none.
    max_parameters: int = _TUNING.max_parameters

    @classmethod
    def from_tuning(cls, name: str, model_type: str, base: TrainingConfig,
                    tuning: TuningSettings, **cluster: Any) -> ExperimentSettings:
        """The experiment the pipeline's ``tuning`` settings describe, starting from ``base``
        (the given hyperparameters); ``cluster``: num_workers, gpus_per_worker, kubernetes."""
        return cls(
            name=name,
            algorithm=tuning.algorithm,
            algorithm_settings={} if tuning.random_state is None
            else {"random_state": tuning.random_state},
            objective_goal=tuning.objective_goal,
            parallel_trial_count=tuning.parallel_trials,
            max_trial_count=tuning.max_trials,
            max_failed_trial_count=tuning.failed_trial_budget,
            early_stopping=EarlyStopping(tuning.min_trials_required, tuning.start_step)
            if tuning.early_stopping else None,
            model_type=model_type,
            base_config=replace(base, epochs=tuning.epochs,
                                train_examples=tuning.train_examples),
            trial_minutes=tuning.trial_minutes,
            max_parameters=tuning.max_parameters,
            **cluster,
        )

    @property
    def trials_root(self) -> str:
        kubernetes = self.kubernetes
        root = self.output_dir or (
            f"{kubernetes.mount_path}/katib" if kubernetes and kubernetes.pvc_name else ""
        )
        return f"{root.rstrip('/')}/{self.name}"

    @property
    def target_namespace(self) -> str:
        return self.namespace or (self.kubernetes.target_namespace if self.kubernetes else "")

    def deadline_seconds(self) -> float:
        """The tuning step's deadline on Kubernetes (0: none): a trial's time for each round of
        ``parallel_trial_count`` trials (Katib counts failed trials toward
        ``maxTrialCount`` too, so there are at most ceil(max / parallel) rounds), plus
        ``SEARCH_SLACK_SECONDS``. A trial's time is its TFJob's ``active_deadline_seconds``
        when set, else ``trial_minutes``. Without a deadline a search whose trials never
        finish (a katib-controller that does not watch TFJobs) would hold the run for hours."""
        kubernetes = self.kubernetes
        per_trial = ((kubernetes.active_deadline_seconds if kubernetes else 0)
                     or self.trial_minutes * 60)
        if per_trial <= 0 or self.parallel_trial_count < 1:
            return 0.0
        rounds = -(-self.max_trial_count // self.parallel_trial_count)
        return float(rounds * per_trial + SEARCH_SLACK_SECONDS)

    def training_config(self) -> TrainingConfig:
        """The configuration every trial starts from, before its assignments."""
        return replace(self.base_config, model_type=self.model_type)

    def problems(self, search_space: SearchSpace | None = None) -> list[str]:
        """Every problem with these settings (and the search space, if given), each with the
        fix; the trial pods' settings too when ``kubernetes`` is set."""
        problems = self.cluster_problems() if self.kubernetes is not None else []
        return problems + self.search_problems(search_space)

    def cluster_problems(self) -> list[str]:
        """What the Katib Experiment needs beyond the search: pods and shared storage."""
        if self.kubernetes is None:
            return ["the Katib backend needs kubernetes settings (image, namespace, pvc_name "
                    "or output_dir) for the trial pods"]
        problems = []
        try:
            self.kubernetes.validate()
        except UserInputError as error:
            problems.append(str(error))
        if not self.output_dir and not self.kubernetes.pvc_name:
            problems.append("trials need shared storage for their checkpoints and models: set "
                            "output_dir (an object-store URI) or kubernetes.pvc_name")
        return problems

    def search_problems(self, search_space: SearchSpace | None = None) -> list[str]:
        """What any backend needs: the experiment's own rules (:meth:`experiment_problems`)
        and its trials' (:meth:`trial_problems`)."""
        return self.experiment_problems(search_space) + self.trial_problems()

    def trial_problems(self) -> list[str]:
        """What is wrong with the job every trial runs: its base configuration and replicas
        (the job spec's own rule, :func:`fmnist_kfp.settings.jobs.job_problems`). On Katib the
        trial's job spec checks these as it is made, so the Experiment's builder leaves them
        to it."""
        return ([f"base configuration: {p}" for p in self.training_config().problems()]
                + job_problems(self.num_workers, self.gpus_per_worker, self.max_restarts,
                               self.strategy, self.num_ps))

    def experiment_problems(self, search_space: SearchSpace | None = None) -> list[str]:
        """The search's own rules: name, objective, algorithm, budget and the search space."""
        problems = []
        if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", self.name):
            problems.append(f"experiment name {self.name!r} must start with a lowercase letter, "
                            "then lowercase letters, digits or '-', ending in a letter or digit")
        elif len(self.name) > MAX_NAME_LENGTH:
            problems.append(f"experiment name {self.name!r} is longer than {MAX_NAME_LENGTH} "
                            "characters: trial pod names built from it must stay DNS labels")
        problems += self._objective_problems()
        problems += algorithm_problems(self.algorithm, self.algorithm_settings)
        problems += self._count_problems()
        if self.resume_policy not in RESUME_POLICIES:
            problems.append(f"unknown resume policy {self.resume_policy!r}; choose one of "
                            f"{', '.join(RESUME_POLICIES)}")
        if self.max_parameters < 0:
            problems.append(f"max_parameters must be 0 (no budget) or more, got "
                            f"{self.max_parameters}")
        if search_space is not None:
            space_problems = search_space.problems(self.algorithm, self.model_type)
            problems += space_problems
            if not space_problems:
                problems += self._budget_problems(search_space)
        return problems

    def _objective_problems(self) -> list[str]:
        problems = []
        if self.objective_metric not in OBJECTIVE_TYPES:
            problems.append(
                f"the trainer does not report objective metric {self.objective_metric!r}; it "
                f"reports {', '.join(REPORTED_METRICS)} each epoch; choose an objective among "
                f"{', '.join(OBJECTIVE_TYPES)}"
            )
        unknown = [m for m in self.additional_metrics if m not in REPORTED_METRICS]
        if unknown:
            problems.append(f"the trainer does not report {unknown}; additional metrics must be "
                            f"among {', '.join(REPORTED_METRICS)}")
        if self.objective_metric in self.additional_metrics:
            problems.append(f"{self.objective_metric} is the objective: remove it from "
                            "additional_metrics")
        if len(set(self.additional_metrics)) != len(self.additional_metrics):
            problems.append("additional_metrics lists a metric twice")
        if self.metric_strategy not in METRIC_STRATEGIES:
            problems.append(f"unknown metric strategy {self.metric_strategy!r}; choose one of "
                            f"{', '.join(METRIC_STRATEGIES)}")
        goal = self.objective_goal
        if goal is not None and "accuracy" in self.objective_metric and not 0 < goal <= 1:
            problems.append(f"objective goal {goal} is not an accuracy: give one in (0, 1]")
        return problems

    def _count_problems(self) -> list[str]:
        problems = []
        counts = {"parallel_trial_count": self.parallel_trial_count,
                  "max_trial_count": self.max_trial_count}
        for name, value in counts.items():
            if value < 1:
                problems.append(f"{name} must be at least 1, got {value}")
        if self.max_failed_trial_count < 0:
            problems.append(f"max_failed_trial_count must be 0 or more, got "
                            f"{self.max_failed_trial_count}")
        if self.max_trial_count < self.parallel_trial_count:
            problems.append(
                f"max_trial_count ({self.max_trial_count}) is below parallel_trial_count "
                f"({self.parallel_trial_count}): raise max_trial_count or lower "
                "parallel_trial_count"
            )
        if self.max_failed_trial_count > self.max_trial_count:
            problems.append(f"max_failed_trial_count ({self.max_failed_trial_count}) exceeds "
                            f"max_trial_count ({self.max_trial_count})")
        stopping = self.early_stopping
        if stopping is not None:
            if stopping.algorithm not in EARLY_STOPPING_ALGORITHMS:
                problems.append(f"unknown early stopping algorithm {stopping.algorithm!r}; "
                                f"choose one of {', '.join(EARLY_STOPPING_ALGORITHMS)}")
            if stopping.min_trials_required < 1:
                problems.append("early stopping min_trials_required must be at least 1")
            elif stopping.min_trials_required >= self.max_trial_count:
                problems.append(
                    f"early stopping waits for {stopping.min_trials_required} finished trials "
                    f"but the experiment runs at most {self.max_trial_count}, so it would never "
                    "stop one: lower min_trials_required or raise max_trial_count"
                )
            if stopping.start_step < 1:
                problems.append("early stopping start_step (an epoch count) must be at least 1")
        return problems

    def _budget_problems(self, search_space: SearchSpace) -> list[str]:
        problems = []
        if self.algorithm == "grid" and self.max_trial_count > search_space.grid_size():
            problems.append(
                f"max_trial_count ({self.max_trial_count}) exceeds the grid's "
                f"{search_space.grid_size()} combinations (Katib refuses that): lower it"
            )
        epochs = search_space.get("epochs")
        fewest_epochs = epochs.bounds()[0] if epochs and epochs.type == "int" else (
            min(int(v) for v in epochs.values) if epochs else self.base_config.epochs
        )
        stopping = self.early_stopping
        if stopping is not None and stopping.start_step >= fewest_epochs:
            problems.append(
                f"early stopping start_step {stopping.start_step} is not below the fewest "
                f"epochs a trial runs ({fewest_epochs}), so no trial could be stopped early: "
                "lower start_step"
            )
        return problems

    def validate(self, search_space: SearchSpace | None = None) -> ExperimentSettings:
        problems = self.problems(search_space)
        if problems:
            raise UserInputError("invalid Katib experiment: " + "; ".join(problems))
        return self


