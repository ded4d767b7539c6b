"""Katib Experiments that tune the trainer, built from the kubeflow-katib SDK's models.

Each trial is a TFJob from :func:`fmnist.launcher.tfjob.build_tfjob`, the same one a pipeline
run launches, with ``${trialParameters.<name>}`` in place of every searched flag's value. Trials
score on a validation split carved from the end of the training split
(``--validation-examples``); the test split stays unseen until model selection.

Katib reads the metrics from the trainer's stdout: every epoch prints one
``key=value`` line (``epoch=3 epochs=10 loss=0.3100 accuracy=0.8900 val_loss=0.2800
val_accuracy=0.9000 seconds=... images_per_second=...``), which Katib's StdOut collector parses,
one report per epoch, which is what median stopping compares at ``start_step``.

:func:`webhook_problems` re-implements the checks of Katib's admission webhook
(``pkg/webhook/v1beta1/experiment/validator/validator.go``, v0.19) so a manifest can be checked
without a cluster.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from fmnist.errors import UserInputError
from fmnist.launcher.tfjob import CONTAINER_NAME, KubernetesSettings
from fmnist.training.config import TrainingConfig
from katib.search_space import (
    DISTRIBUTIONS,
    SearchSpace,
    algorithm_problems,
    format_value,
)

API_VERSION = "kubeflow.org/v1beta1"
# What the trainer prints each epoch (besides the epoch=/epochs= counters). The val_ pair appears
# only with a validation split (validation_examples > 0), which every experiment has.
REPORTED_METRICS = ("loss", "accuracy", "val_loss", "val_accuracy", "seconds", "images_per_second")
OBJECTIVE_TYPES = {"val_accuracy": "maximize", "val_loss": "minimize",
                   "accuracy": "maximize", "loss": "minimize"}
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
FASHION_MNIST_TRAIN_EXAMPLES = 60_000
# Trial TFJobs are named <experiment>-<8 characters> and their pods' services
# <trial>-worker-<i>, which must stay DNS labels (63 characters).
MAX_NAME_LENGTH = 40

# What Katib v0.19 knows by default (its katib-config), for checking manifests.
KATIB_ALGORITHMS = ("random", "tpe", "grid", "hyperband", "bayesianoptimization", "cmaes",
                    "sobol", "multivariate-tpe", "enas", "darts", "pbt")
KATIB_COLLECTOR_KINDS = ("StdOut", "File", "TensorFlowEvent", "PrometheusMetric", "Custom",
                         "Push")
KATIB_TRIAL_KINDS = ("TrainJob", "Job", "TFJob", "PyTorchJob", "MPIJob", "XGBoostJob")
TRIAL_META_KEYS = ("Name", "Namespace", "Kind", "APIVersion", "Annotations", "Labels")


@dataclass(frozen=True)
class EarlyStopping:
    """Katib's median stopping: once ``min_trials_required`` trials have succeeded, a trial whose
    objective after ``start_step`` reports (epochs) is worse than the succeeded trials' average
    over their first ``start_step`` reports is stopped (Katib's medianstop service averages,
    despite the name)."""

    min_trials_required: int = 3
    start_step: int = 4
    algorithm: str = "medianstop"


@dataclass
class ExperimentSettings:
    """How the search runs: objective, algorithm, trial budget and the trials' TFJobs."""

    name: str
    # Image, storage and resources of every trial pod; None for a search on this machine only.
    kubernetes: KubernetesSettings | None = None
    namespace: str = ""  # empty: kubernetes.namespace, else the current namespace
    algorithm: str = "tpe"
    algorithm_settings: dict[str, Any] = field(default_factory=dict)
    objective_metric: str = "val_accuracy"
    objective_goal: float | None = None  # stop once a trial reaches it; None: run all trials
    additional_metrics: tuple[str, ...] = ("val_loss", "accuracy", "loss")
    # "latest": a trial scores its last epoch, the model it exports (not its best epoch).
    metric_strategy: str = "latest"
    parallel_trial_count: int = 3
    max_trial_count: int = 12
    max_failed_trial_count: int = 3
    early_stopping: EarlyStopping | None = None
    resume_policy: str = "Never"
    validation_examples: int = 6000
    model_type: str = "batchnorm"
    base_config: TrainingConfig = field(default_factory=TrainingConfig)  # unsearched fields
    num_workers: int = 1  # per trial TFJob
    use_chief: bool = False  # an extra Chief replica per trial (it trains too)
    gpus_per_worker: int = 0
    output_dir: str = ""  # trials write under <output_dir>/<name>/<trial>; default: the PVC's
    retain_trials: bool = False  # keep finished trials' TFJobs (and pods) for debugging

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

    def training_config(self) -> TrainingConfig:
        """The configuration every trial starts from, before its assignments."""
        return replace(self.base_config, model_type=self.model_type,
                       validation_examples=self.validation_examples)

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
        if self.gpus_per_worker < 0:
            problems.append(f"gpus_per_worker must be 0 or more, got {self.gpus_per_worker}")
        return problems

    def search_problems(self, search_space: SearchSpace | None = None) -> list[str]:
        """What any backend needs: name, objective, algorithm, budget, validation split,
        base configuration and the search space."""
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
        if self.num_workers < 1:
            problems.append(f"num_workers must be at least 1, got {self.num_workers}")
        if not 0 < self.validation_examples < FASHION_MNIST_TRAIN_EXAMPLES:
            problems.append(
                f"validation_examples must be between 1 and {FASHION_MNIST_TRAIN_EXAMPLES - 1} "
                f"(carved from the training split), got {self.validation_examples}: trials "
                "are scored on it, never on the test split"
            )
        problems += [f"base configuration: {p}" for p in self.training_config().problems()]
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
        fewest_epochs = epochs.low if epochs and epochs.type == "int" else (
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


def _placeholder(name: str) -> str:
    return "${trialParameters." + name + "}"


def _trial_spec(settings: ExperimentSettings, search_space: SearchSpace, data_dir: str) -> dict:
    """The trial TFJob as a manifest, with placeholders for the searched flags' values."""
    from fmnist.launcher.base import TrainingJobSpec
    from fmnist.launcher.tfjob import build_tfjob, to_manifest

    trial_dir = f"{settings.trials_root}/{_placeholder(TRIAL_NAME_PARAMETER)}"
    spec = TrainingJobSpec(
        name=settings.name, config=settings.training_config(), data_dir=data_dir,
        export_dir=f"{trial_dir}/1", work_dir=trial_dir, num_workers=settings.num_workers,
        use_chief=settings.use_chief, gpus_per_worker=settings.gpus_per_worker,
    )
    manifest = to_manifest(build_tfjob(spec, replace(settings.kubernetes,
                                                     namespace=settings.target_namespace)))
    # Katib names the TFJob after the trial and creates it in the experiment's namespace; its
    # webhook refuses a template that sets either.
    metadata = manifest["metadata"]
    metadata.pop("name", None)
    metadata.pop("namespace", None)
    for name in search_space.names:
        if name == "model_type":
            metadata["labels"]["fmnist/model-type"] = _placeholder(name)
    for replica in manifest["spec"]["tfReplicaSpecs"].values():
        for container in replica["template"]["spec"]["containers"]:
            command = container["command"]
            for name in search_space.names:
                flag = "--" + name.replace("_", "-")
                command[command.index(flag) + 1] = _placeholder(name)
    return manifest


def build_experiment(settings: ExperimentSettings, search_space: SearchSpace, data_dir: str):
    """The ``V1beta1Experiment`` that searches ``search_space`` with trials reading the dataset
    at ``data_dir`` (a path on the PVC or an object-store URI)."""
    from kubeflow.katib import (
        V1beta1AlgorithmSetting,
        V1beta1AlgorithmSpec,
        V1beta1CollectorSpec,
        V1beta1EarlyStoppingSetting,
        V1beta1EarlyStoppingSpec,
        V1beta1Experiment,
        V1beta1ExperimentSpec,
        V1beta1FeasibleSpace,
        V1beta1FilterSpec,
        V1beta1MetricsCollectorSpec,
        V1beta1MetricStrategy,
        V1beta1ObjectiveSpec,
        V1beta1ParameterSpec,
        V1beta1SourceSpec,
        V1beta1TrialParameterSpec,
        V1beta1TrialTemplate,
    )
    from kubernetes import client

    if settings.kubernetes is None:
        raise UserInputError(settings.cluster_problems()[0])
    settings.validate(search_space)
    if not data_dir:
        raise UserInputError("data_dir is empty: give the ingested dataset's directory or URI")
    metrics = [settings.objective_metric, *settings.additional_metrics]
    objective = V1beta1ObjectiveSpec(
        type=OBJECTIVE_TYPES[settings.objective_metric],
        objective_metric_name=settings.objective_metric,
        goal=settings.objective_goal,
        additional_metric_names=list(settings.additional_metrics) or None,
        metric_strategies=[V1beta1MetricStrategy(name=m, value=settings.metric_strategy)
                           for m in metrics],
    )
    algorithm = V1beta1AlgorithmSpec(
        algorithm_name=settings.algorithm,
        algorithm_settings=[V1beta1AlgorithmSetting(name=k, value=format_value(v))
                            for k, v in settings.algorithm_settings.items()] or None,
    )
    early_stopping = None
    if settings.early_stopping is not None:
        stopping = settings.early_stopping
        early_stopping = V1beta1EarlyStoppingSpec(
            algorithm_name=stopping.algorithm,
            algorithm_settings=[
                V1beta1EarlyStoppingSetting(name="min_trials_required",
                                            value=str(stopping.min_trials_required)),
                V1beta1EarlyStoppingSetting(name="start_step", value=str(stopping.start_step)),
            ],
        )
    parameters = []
    for p in search_space.parameters:
        if p.type == "categorical":
            space = V1beta1FeasibleSpace(list=p.katib_values)
        else:
            space = V1beta1FeasibleSpace(
                min=format_value(p.low), max=format_value(p.high),
                step=None if p.step is None else format_value(p.step),
                distribution=p.distribution or None,
            )
        parameters.append(V1beta1ParameterSpec(name=p.name, parameter_type=p.type,
                                               feasible_space=space))
    trial_parameters = [
        V1beta1TrialParameterSpec(name=p.name, reference=p.name,
                                  description=f"--{p.name.replace('_', '-')} of the trainer")
        for p in search_space.parameters
    ] + [V1beta1TrialParameterSpec(name=TRIAL_NAME_PARAMETER, reference="${trialSpec.Name}",
                                   description="the trial's name: its own output directory")]
    trial_template = V1beta1TrialTemplate(
        primary_container_name=CONTAINER_NAME,
        primary_pod_labels=dict(PRIMARY_POD_LABELS),
        success_condition=SUCCESS_CONDITION,
        failure_condition=FAILURE_CONDITION,
        retain=settings.retain_trials or None,
        trial_parameters=trial_parameters,
        trial_spec=_trial_spec(settings, search_space, data_dir),
    )
    experiment = V1beta1Experiment(
        api_version=API_VERSION,
        kind="Experiment",
        metadata=client.V1ObjectMeta(
            name=settings.name, namespace=settings.target_namespace,
            labels={"app.kubernetes.io/part-of": "fmnist-kfp"},
        ),
        spec=V1beta1ExperimentSpec(
            objective=objective,
            algorithm=algorithm,
            early_stopping=early_stopping,
            parameters=parameters,
            parallel_trial_count=settings.parallel_trial_count,
            max_trial_count=settings.max_trial_count,
            max_failed_trial_count=settings.max_failed_trial_count,
            resume_policy=settings.resume_policy,
            metrics_collector_spec=V1beta1MetricsCollectorSpec(
                collector=V1beta1CollectorSpec(kind="StdOut"),
                source=V1beta1SourceSpec(filter=V1beta1FilterSpec(metrics_format=[METRICS_FILTER])),
            ),
            trial_template=trial_template,
        ),
    )
    problems = webhook_problems(to_manifest(experiment))
    if problems:  # a bug here, not bad input: validate() should have caught it first
        raise RuntimeError("the built Experiment would fail Katib's admission webhook: "
                           + "; ".join(problems))
    return experiment


def to_manifest(experiment) -> dict:
    """The JSON the API server receives (camelCase keys, no nulls)."""
    from kubernetes.client import ApiClient

    return ApiClient().sanitize_for_serialization(experiment)


def _number(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def webhook_problems(manifest: dict) -> list[str]:
    """What Katib's experiment admission webhook (v0.19) would reject in ``manifest``, plus the
    feasible-space checks its suggestion services make (numeric min < max, positive step,
    non-empty lists, unique names). Empty when Katib would admit it."""
    problems: list[str] = []
    name = (manifest.get("metadata") or {}).get("name", "")
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name or ""):
        problems.append(f"metadata.name {name!r}: lowercase letters, digits and '-', starting "
                        "with a letter and ending with a letter or digit")
    spec = manifest.get("spec") or {}
    problems += _webhook_count_problems(spec)
    objective = spec.get("objective")
    if not objective:
        return problems + ["spec.objective: must be specified"]
    if objective.get("type") not in ("minimize", "maximize"):
        problems.append(f"spec.objective.type {objective.get('type')!r}: must be minimize or "
                        "maximize")
    metric = objective.get("objectiveMetricName")
    if not metric:
        problems.append("spec.objective.objectiveMetricName: must be specified")
    if metric in (objective.get("additionalMetricNames") or []):
        problems.append("spec.objective.additionalMetricNames: must not contain the objective "
                        "metric")
    algorithm = (spec.get("algorithm") or {}).get("algorithmName")
    if not algorithm:
        problems.append("spec.algorithm.algorithmName: must be specified")
    elif algorithm not in KATIB_ALGORITHMS:
        problems.append(f"spec.algorithm.algorithmName {algorithm!r}: Katib has no suggestion "
                        f"service for it ({', '.join(KATIB_ALGORITHMS)})")
    if "earlyStopping" in spec:
        stopping = (spec.get("earlyStopping") or {}).get("algorithmName")
        if stopping not in EARLY_STOPPING_ALGORITHMS:
            problems.append(f"spec.earlyStopping.algorithmName {stopping!r}: Katib knows only "
                            f"{', '.join(EARLY_STOPPING_ALGORITHMS)}")
    if spec.get("resumePolicy", "") not in ("", *RESUME_POLICIES):
        problems.append(f"spec.resumePolicy {spec.get('resumePolicy')!r}: invalid")
    parameters = spec.get("parameters") or []
    if not parameters:
        problems.append("spec.parameters: must be specified")
    problems += _webhook_parameter_problems(parameters)
    problems += _webhook_trial_template_problems(spec.get("trialTemplate"), parameters)
    problems += _webhook_collector_problems(spec.get("metricsCollectorSpec") or {})
    return problems


def _webhook_count_problems(spec: dict) -> list[str]:
    problems = []
    parallel, most, failed = (spec.get(k) for k in
                              ("parallelTrialCount", "maxTrialCount", "maxFailedTrialCount"))
    if failed is not None and failed < 0:
        problems.append("spec.maxFailedTrialCount: should not be less than 0")
    if most is not None and most <= 0:
        problems.append("spec.maxTrialCount: must be greater than 0")
    if parallel is not None and parallel <= 0:
        problems.append("spec.parallelTrialCount: must be greater than 0")
    if failed is not None and most is not None and failed > most:
        problems.append("spec.maxFailedTrialCount: should be less than or equal to "
                        "spec.maxTrialCount")
    if parallel is not None and most is not None and parallel > most:
        problems.append("spec.parallelTrialCount: should be less than or equal to "
                        "spec.maxTrialCount")
    return problems


def _webhook_parameter_problems(parameters: list[dict]) -> list[str]:
    problems = []
    names = [p.get("name") for p in parameters]
    for duplicate in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"spec.parameters: name {duplicate!r} is duplicated")
    for i, p in enumerate(parameters):
        where = f"spec.parameters[{i}] ({p.get('name')})"
        kind = p.get("parameterType")
        space = p.get("feasibleSpace") or {}
        if kind not in ("int", "double", "categorical", "discrete", "unknown"):
            problems.append(f"{where}.parameterType {kind!r}: not supported")
        if space.get("distribution", "") not in DISTRIBUTIONS:
            problems.append(f"{where}.feasibleSpace.distribution {space['distribution']!r}: "
                            "not supported")
        if not space:
            problems.append(f"{where}.feasibleSpace: must be specified")
        elif kind in ("int", "double"):
            if space.get("list"):
                problems.append(f"{where}.feasibleSpace.list: not supported for {kind}")
            low, high = _number(space.get("min")), _number(space.get("max"))
            if low is None or high is None:
                problems.append(f"{where}.feasibleSpace.min and max must be numbers given as "
                                "strings")
            elif not low < high:
                problems.append(f"{where}.feasibleSpace: min {space['min']} must be below "
                                f"max {space['max']}")
            if "step" in space and not (_number(space["step"]) or 0) > 0:
                problems.append(f"{where}.feasibleSpace.step {space['step']!r}: must be a "
                                "positive number")
            if kind == "int" and not all(re.fullmatch(r"-?\d+", str(space.get(k, "0")))
                                         for k in ("min", "max", "step")):
                problems.append(f"{where}.feasibleSpace: an int parameter's min, max and step "
                                "must be integers")
        elif kind in ("categorical", "discrete"):
            if any(k in space for k in ("min", "max", "step")):
                problems.append(f"{where}.feasibleSpace: min, max and step are not supported "
                                f"for {kind}")
            if not space.get("list"):
                problems.append(f"{where}.feasibleSpace.list: must not be empty")
    return problems


def _webhook_trial_template_problems(template: dict | None, parameters: list[dict]) -> list[str]:
    where = "spec.trialTemplate"
    if not template:
        return [f"{where}: must be specified"]
    problems = []
    if not template.get("primaryContainerName"):
        problems.append(f"{where}.primaryContainerName: must be specified")
    if not template.get("successCondition") or not template.get("failureCondition"):
        problems.append(f"{where}: successCondition and failureCondition must be specified")
    trial_parameters = template.get("trialParameters")
    if trial_parameters is None:
        return problems + [f"{where}.trialParameters: must be specified"]
    trial_spec = template.get("trialSpec")
    if (trial_spec is None) == (template.get("configMap") is None):
        return problems + [f"{where}: exactly one of trialSpec and configMap must be given"]
    if trial_spec is None:
        return problems  # a ConfigMap's template is only read on the cluster
    text = json.dumps(trial_spec)
    experiment_parameters = {p.get("name") for p in parameters}
    seen_names: set[str] = set()
    seen_references: set[str] = set()
    for i, tp in enumerate(trial_parameters):
        name, reference = tp.get("name", ""), tp.get("reference", "")
        at = f"{where}.trialParameters[{i}]"
        if not name or not reference or "{" in name or "}" in name:
            problems.append(f"{at}: name and reference must be specified and the name must "
                            "not contain '{' or '}'")
            continue
        if name in seen_names or reference in seen_references:
            problems.append(f"{at}: name {name!r} or reference {reference!r} is duplicated")
            continue
        seen_names.add(name)
        seen_references.add(reference)
        if experiment_parameters and not _is_meta_reference(reference) and \
                reference not in experiment_parameters:
            problems.append(f"{at}.reference {reference!r}: not in spec.parameters")
        if _placeholder(name) not in text:
            problems.append(f"{at}.name {name!r}: not found in the trial template")
        text = text.replace(_placeholder(name), "test-value")
    leftover = re.findall(r"\$\{trialParameters\..+?\}", text)
    if leftover:
        problems.append(f"{where}: {sorted(set(leftover))} in the trial template are not in "
                        "trialParameters")
    metadata = trial_spec.get("metadata") or {}
    if metadata.get("name") or metadata.get("namespace"):
        problems.append(f"{where}: metadata.name and metadata.namespace in the trial template "
                        "must be omitted")
    if not trial_spec.get("apiVersion") or not trial_spec.get("kind"):
        problems.append(f"{where}: apiVersion and kind of the trial template must be specified")
    elif trial_spec["kind"] not in KATIB_TRIAL_KINDS:
        problems.append(f"{where}: kind {trial_spec['kind']!r} is not among Katib's default "
                        f"trial resources ({', '.join(KATIB_TRIAL_KINDS)})")
    return problems


def _is_meta_reference(reference: str) -> bool:
    """``${trialSpec.Name}``, ``${trialSpec.Labels[key]}`` and the like."""
    match = re.search(r"\$\{trialSpec\.(.+?)\}", reference)
    if not match:
        return False
    key = match.group(1)
    indexed = re.fullmatch(r"(.+)\[(.+)]", key)
    return key in TRIAL_META_KEYS or bool(indexed and indexed.group(1) in TRIAL_META_KEYS)


def _webhook_collector_problems(collector_spec: dict) -> list[str]:
    problems = []
    kind = (collector_spec.get("collector") or {}).get("kind", "StdOut")  # Katib's default
    if kind not in KATIB_COLLECTOR_KINDS:
        problems.append(f"spec.metricsCollectorSpec.collector.kind {kind!r}: invalid; choose "
                        f"one of {', '.join(KATIB_COLLECTOR_KINDS)}")
    formats = ((collector_spec.get("source") or {}).get("filter") or {}).get("metricsFormat")
    for pattern in formats or []:
        try:
            re.compile(pattern)
        except re.error as error:
            problems.append(f"metricsFormat {pattern!r}: invalid filter: {error}")
            continue
        if not re.fullmatch(r".*\(.*\).*\(.*\).*", pattern):
            problems.append(f"metricsFormat {pattern!r}: two top subexpressions are required")
    return problems

