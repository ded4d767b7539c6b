"""The Katib Experiment manifest, built from Katib's own models (``kubeflow_katib_api``, the
pydantic models kubeflow/katib v0.19.0 generates from its OpenAPI spec in api/python_api/).

Each trial is a TFJob from :func:`fmnist_kfp.kubernetes.tfjob.build_tfjob`, the same one a pipeline
run launches, with ``${trialParameters.<name>}`` in place of every searched flag's value. Its
pods run the trainer under :mod:`fmnist_kfp.katib.trial_process`, so that a trainer killed by a
signal stays retryable under ``restartPolicy: ExitCode`` inside Katib's metrics-collector wrapper
(see there for the rules).

With the ``trainjob`` operator (Kubeflow Trainer v2) each trial is instead the TrainJob of
:func:`fmnist_kfp.kubernetes.trainjob.build_trainjob`, as the Kubeflow SDK 0.5's
``OptimizerClient`` makes its trials TrainJobs (kubeflow 0.5.0 kubeflow/optimizer/backends/
kubernetes/backend.py lines 117-153: ``trialSpec`` a TrainJob, ``primaryContainerName``
``node``, the rest left to Katib's defaults), with Katib 0.19's defaults for TrainJob trials
stated (:data:`TRAINJOB_PRIMARY_POD_LABELS`, :data:`TRAINJOB_SUCCESS_CONDITION`). Katib runs
them only where its katib-config lists ``TrainJob.v1alpha1.trainer.kubeflow.org`` in
``trialResources`` (``fmnist-kfp preflight`` checks it).
"""

from __future__ import annotations

import re
from dataclasses import replace

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kubernetes import keys
from fmnist_kfp.kubernetes.experiment_webhook import webhook_problems
from fmnist_kfp.kubernetes.manifest import to_manifest
from fmnist_kfp.kubernetes.tfjob import CONTAINER_NAME
from fmnist_kfp.kubernetes.training_operators import ClusterJob
from fmnist_kfp.kubernetes.trainjob import CONTAINER_NAME as TRAINJOB_CONTAINER
from fmnist_kfp.kubernetes.trainjob import OVERRIDES
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.tuning.experiment_settings import (
    API_VERSION,
    FAILURE_CONDITION,
    METRICS_FILTER,
    OBJECTIVE_TYPES,
    PRIMARY_POD_LABELS,
    SUCCESS_CONDITION,
    TRIAL_NAME_PARAMETER,
    ExperimentSettings,
    placeholder,
)
from fmnist_kfp.tuning.search_space import SearchSpace, format_value

TRIAL_PROCESS = ["python", "-m", "fmnist_kfp.katib.trial_process", "--"]
# Katib's pod webhook joins the primary container's command and args with spaces into one
# ``sh -c`` string, unquoted (kubeflow/katib v0.19.0 pkg/webhook/v1beta1/pod/utils.go lines
# 191-194): an argument with a space or a shell metacharacter would be split or interpreted.
_SHELL_SAFE = re.compile(r"[\w@%+=:,./-]*")
_PLACEHOLDER = re.compile(r"\$\{trialParameters\.[^}]+\}")
# Katib 0.19's defaults for a TrainJob trial (kubeflow/katib v0.19.0 pkg/apis/controller/
# experiments/v1beta1/constants.go lines 38-50, applied by experiment_defaults.go lines 97-137):
# the primary pod is node 0's (the pod of completion index 0 of the replicated job ``node``:
# TF_CONFIG's worker 0, which does the chief's work and exports), and Trainer reports a
# finished TrainJob as ``Complete`` (its JobSet's ``Completed``), a failed one as ``Failed``.
TRAINJOB_PRIMARY_POD_LABELS = {"jobset.sigs.k8s.io/replicatedjob-name": "node",
                               "batch.kubernetes.io/job-completion-index": "0"}
TRAINJOB_SUCCESS_CONDITION = 'status.conditions.#(type=="Complete")#|#(status=="True")#'
TRAINJOB_FAILURE_CONDITION = 'status.conditions.#(type=="Failed")#|#(status=="True")#'
# Katib names a trial <experiment>-<8 random characters> (pkg/controller.v1beta1/experiment/
# suggestionclient/suggestionclient.go line 177) and its job after the trial (manifest/
# generator.go lines 102-104): the longest name a trial's TrainJob can have, for the pod-name
# checks of trainjob_problems.
TRIAL_NAME_SUFFIX = "-abcdefgh"
# The trial template by the operator: (primary container, primary pod labels, success and
# failure conditions).
TRIAL_TEMPLATES = {
    "tfjob": (CONTAINER_NAME, PRIMARY_POD_LABELS, SUCCESS_CONDITION, FAILURE_CONDITION),
    "trainjob": (TRAINJOB_CONTAINER, TRAINJOB_PRIMARY_POD_LABELS, TRAINJOB_SUCCESS_CONDITION,
                 TRAINJOB_FAILURE_CONDITION),
}


def _trial_job_spec(settings: ExperimentSettings, data_dir: str, name: str):
    """The training job every trial runs, its output under the trial's own directory."""
    from fmnist_kfp.training.training_job import MAX_PARAMETERS_FLAG, TrainingJobSpec

    trial_dir = f"{settings.trials_root}/{placeholder(TRIAL_NAME_PARAMETER)}"
    return TrainingJobSpec(
        name=name, config=settings.training_config(), data_dir=data_dir,
        export_dir=f"{trial_dir}/1", work_dir=trial_dir, num_workers=settings.num_workers,
        use_chief=settings.use_chief, gpus_per_worker=settings.gpus_per_worker,
        strategy=settings.strategy, num_ps=settings.num_ps,
        max_restarts=settings.max_restarts,
        # The trainer refuses a configuration over the budget before it trains
        # (katib/parameter_budget.py).
        trainer_args=[MAX_PARAMETERS_FLAG, str(settings.max_parameters)]
        if settings.max_parameters else [],
    )


def _trial_job(settings: ExperimentSettings, data_dir: str, name: str, operator: str,
               shape: str) -> ClusterJob:
    """The trials' job as ``operator`` runs it, checked once as it is made: the job spec's
    rules (the base configuration, the replicas) and what the operator cannot do of it."""
    return ClusterJob(_trial_job_spec(settings, data_dir, name), trial_pod_settings(settings),
                      operator, shape)


def _trial_command(command: list[str], search_space: SearchSpace) -> list[str]:
    """The trainer's command under the trial process, each searched flag's value a
    placeholder; refused when Katib's wrapper would split or interpret an argument."""
    command = TRIAL_PROCESS + list(command)
    for name in search_space.names:
        flag = "--" + name.replace("_", "-")
        command[command.index(flag) + 1] = placeholder(name)
    unsafe = [arg for arg in command if not _SHELL_SAFE.fullmatch(_PLACEHOLDER.sub("", arg))]
    if unsafe:
        raise UserInputError(
            f"trial command arguments {unsafe} hold spaces or shell characters, which "
            "Katib's metrics collector would split or interpret (it runs the command "
            "as one unquoted sh -c string): use paths and values without them")
    return command


def _trial_metadata(manifest: dict, search_space: SearchSpace) -> None:
    """Katib names the job after the trial and creates it in the experiment's namespace; its
    webhook refuses a template that sets either. The model type's label follows the trial's."""
    metadata = manifest["metadata"]
    metadata.pop("name", None)
    metadata.pop("namespace", None)
    for name in search_space.names:
        if name == "model_type":
            metadata["labels"][keys.MODEL_TYPE] = placeholder(name)


def trial_pod_settings(settings: ExperimentSettings) -> KubernetesSettings:
    """The trial pods' settings, in the Experiment's namespace: a search on Katib has them."""
    if settings.kubernetes is None:
        raise UserInputError(f"search {settings.name}: a Katib search runs its trials on the "
                             "cluster and needs the kubernetes settings of their pods")
    return replace(settings.kubernetes, namespace=settings.target_namespace)


def _trial_spec(settings: ExperimentSettings, search_space: SearchSpace, data_dir: str) -> dict:
    """The trial TFJob as a manifest, with placeholders for the searched flags' values."""
    manifest = _trial_job(settings, data_dir, settings.name, "tfjob", OVERRIDES).manifest()
    _trial_metadata(manifest, search_space)
    for replica in manifest["spec"]["tfReplicaSpecs"].values():
        for container in replica["template"]["spec"]["containers"]:
            container["command"] = _trial_command(container["command"], search_space)
    return manifest


def _trainjob_trial_spec(settings: ExperimentSettings, search_space: SearchSpace,
                         data_dir: str, shape: str) -> dict:
    """The trial TrainJob as a manifest (pod settings in ``shape``: the TrainJob fields the
    cluster's Trainer serves), with placeholders for the searched flags' values. What a
    TrainJob cannot do raises :class:`UserInputError` before anything is created."""
    manifest = _trial_job(settings, data_dir, settings.name + TRIAL_NAME_SUFFIX, "trainjob",
                          shape).manifest()
    _trial_metadata(manifest, search_space)
    trainer = manifest["spec"]["trainer"]
    trainer["command"] = _trial_command(trainer["command"], search_space)
    return manifest


def max_failed_trial_count(settings: ExperimentSettings) -> int:
    """Katib fails an Experiment once ``failed >= maxFailedTrialCount`` (kubeflow/katib v0.19.0
    pkg/controller.v1beta1/experiment/util/status_util.go line 205, trials with unavailable
    metrics counting as failed); our budget fails the search once *more* trials than it
    failed, as the local search does. Its webhook wants it at most ``maxTrialCount``
    (pkg/webhook/v1beta1/experiment/validator/validator.go lines 104-109)."""
    return min(settings.max_failed_trial_count + 1, settings.max_trial_count)


def retains_trial_jobs(settings: ExperimentSettings) -> bool:
    """Whether Katib keeps each finished trial's job (the trial template's ``retain``): when
    asked (``retain_trials``), and always with early stopping. Katib v0.19.0 counts an
    early-stopped trial as completed and deletes a completed trial's job unless retained, so it
    never reads that trial's observation (pkg/controller.v1beta1/trial/trial_controller.go
    L239-256, reconcileJob L311-318), and it asks for no new suggestion while an early-stopped
    trial has none (experiment/experiment_controller.go L466-473): a trial stopped before the
    last would hang the search (kubeflow/katib#1377, open). Retained, its observation is read
    and the search goes on; the jobs go with the Experiment (each Trial owns its job)."""
    return settings.retain_trials or settings.early_stopping is not None


def build_experiment(settings: ExperimentSettings, search_space: SearchSpace, data_dir: str,
                     operator: str = "tfjob", shape: str = OVERRIDES):
    """The ``V1beta1Experiment`` that searches ``search_space`` with trials reading the dataset
    at ``data_dir`` (a path on the PVC or an object-store URI), checked first
    (:func:`check_experiment`). ``operator``: the trials' job, ``tfjob`` or ``trainjob``
    (:func:`fmnist_kfp.kubernetes.training_operators.choose_operator` decides it at run time);
    ``shape``: a TrainJob's pod settings, as the cluster's Trainer takes them
    (:func:`fmnist_kfp.kubernetes.training_operators.trainjob_api`)."""
    check_experiment(settings, search_space, data_dir, operator)
    return build_checked_experiment(settings, search_space, data_dir, operator, shape)


def check_experiment(settings: ExperimentSettings, search_space: SearchSpace, data_dir: str,
                     operator: str = "tfjob") -> None:
    """Raises :class:`UserInputError` for what is wrong with the Experiment itself, before any
    call to the cluster; its trials' job checks itself as it is made (:func:`_trial_job`)."""
    if settings.kubernetes is None:
        raise UserInputError(settings.cluster_problems()[0])
    problems = settings.cluster_problems() + settings.experiment_problems(search_space)
    if problems:
        raise UserInputError("invalid Katib experiment: " + "; ".join(problems))
    if not data_dir:
        raise UserInputError("data_dir is empty: give the ingested dataset's directory or URI")
    if operator not in TRIAL_TEMPLATES:
        raise UserInputError(f"the trials' operator must be one of {', '.join(TRIAL_TEMPLATES)}"
                             f", got {operator!r}")


def build_checked_experiment(settings: ExperimentSettings, search_space: SearchSpace,
                             data_dir: str, operator: str = "tfjob", shape: str = OVERRIDES):
    """:func:`build_experiment` after :func:`check_experiment` passed for the same settings:
    it builds, the trials' job checked once as it is made."""
    from kubeflow_katib_api.models import (
        IoK8sApimachineryPkgApisMetaV1ObjectMeta,
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
    container, pod_labels, success, failure = TRIAL_TEMPLATES[operator]
    trial_spec = (_trainjob_trial_spec(settings, search_space, data_dir, shape)
                  if operator == "trainjob" else _trial_spec(settings, search_space, data_dir))
    trial_template = V1beta1TrialTemplate(
        primary_container_name=container,
        primary_pod_labels=dict(pod_labels),
        success_condition=success,
        failure_condition=failure,
        retain=retains_trial_jobs(settings) or None,
        trial_parameters=trial_parameters,
        trial_spec=trial_spec,
    )
    experiment = V1beta1Experiment(
        api_version=API_VERSION,
        kind="Experiment",
        metadata=IoK8sApimachineryPkgApisMetaV1ObjectMeta(
            name=settings.name, namespace=settings.target_namespace,
            labels=dict(keys.PART_OF),
        ),
        spec=V1beta1ExperimentSpec(
            objective=objective,
            algorithm=algorithm,
            early_stopping=early_stopping,
            parameters=parameters,
            parallel_trial_count=settings.parallel_trial_count,
            max_trial_count=settings.max_trial_count,
            max_failed_trial_count=max_failed_trial_count(settings),
            resume_policy=settings.resume_policy,
            metrics_collector_spec=V1beta1MetricsCollectorSpec(
                collector=V1beta1CollectorSpec(kind="StdOut"),
                source=V1beta1SourceSpec(filter=V1beta1FilterSpec(metrics_format=[METRICS_FILTER])),
            ),
            trial_template=trial_template,
        ),
    )
    problems = webhook_problems(to_manifest(experiment))
    if problems:  # a bug here, not bad input: the checks above should have caught it
        raise RuntimeError("the built Experiment would fail Katib's admission webhook: "
                           + "; ".join(problems))
    return experiment


