"""How training jobs run: the backend, replicas and restarts, and the TFJob pods' settings."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.settings.names import image_rule, namespace_rule, quantity_rule
from fmnist_kfp.settings.scheduling import SchedulingSettings
from fmnist_kfp.settings.schema import Settings, at_least, not_negative, one_of, setting

BACKENDS = ("local", "kubernetes")
RESTART_POLICIES = ("ExitCode", "OnFailure", "Never", "Always")
CLEAN_POD_POLICIES = ("None", "Running", "All")
STRATEGIES = ("multi_worker_mirrored", "parameter_server")
# Which training operator runs a job (fmnist_kfp.kubernetes.training_operators decides auto).
OPERATORS = ("auto", "tfjob", "trainjob")
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass
class JobSettings(Settings):
    """Where training (and tuning trials, and deployment) run, and on how many workers."""

    WHAT = "job settings"

    backend: str = setting(
        "local", help="`local` (worker processes on this machine, the predictor on 127.0.0.1) "
                      "or `kubernetes` (TFJobs, Katib Experiments, a KServe InferenceService).",
        rules=[one_of(BACKENDS, "backend")])
    num_workers: int = setting(
        1, help="Worker replicas per training job (processes locally, pods on Kubernetes); on "
                "one 2-core machine a second worker process halves throughput.",
        rules=[at_least(1)])
    strategy: str = setting(
        "multi_worker_mirrored",
        help="`multi_worker_mirrored` (synchronous all-reduce over the chief and workers) or "
             "`parameter_server` (asynchronous: a Chief coordinates, Workers compute, `num_ps` "
             "parameter servers hold the variables; a lost worker does not stop training).",
        rules=[one_of(STRATEGIES, "strategy")])
    num_ps: int = setting(
        1, help="Parameter-server replicas of a `parameter_server` job (processes locally, `PS` "
                "pods on Kubernetes); unused by `multi_worker_mirrored`.",
        rules=[not_negative])
    evaluator: bool = setting(
        False, help="Run an evaluator replica beside training (a process locally, a TFJob "
                    "`Evaluator` on Kubernetes) that scores each epoch's checkpoint on the "
                    "validation split ingestion set aside into `evaluation.jsonl`, which the "
                    "selection report plots.")
    gpus_per_worker: int = setting(
        0, help="GPUs per worker (`nvidia.com/gpu`); NCCL all-reduce when more than 0.",
        rules=[not_negative])
    max_restarts: int = setting(
        2, help="Restarts a training job may take after its workers are killed (exit code "
                ">= 128), resuming from the last epoch checkpoint: whole-job restarts locally, "
                "pods recreated by the training operator on Kubernetes; one more fails the "
                "job.",
        rules=[not_negative])

    def cross_problems(self) -> list[str]:
        problems = []
        if self.gpus_per_worker and self.num_workers < 1:
            problems.append("GPUs were asked for, but no worker would use them: raise num_workers")
        problems += strategy_problems(self.strategy, self.num_workers, self.num_ps)
        return problems


def strategy_problems(strategy: str, num_workers: int, num_ps: int) -> list[str]:
    """What a job of ``strategy`` lacks, each problem naming its fix (before anything starts).

    TensorFlow's ``ParameterServerStrategy`` refuses a cluster without a ``ps`` or a ``worker``
    task (tensorflow v2.21.0 python/distribute/parameter_server_strategy_v2.py
    ``_verify_args_and_config``); here the job is refused before any replica starts."""
    problems = []
    if strategy == "parameter_server":
        if num_ps < 1:
            problems.append(f"strategy parameter_server needs at least one parameter server, got "
                            f"num_ps={num_ps}: set num_ps to 1 or more (or use strategy "
                            "multi_worker_mirrored)")
        if num_workers < 1:
            problems.append(f"strategy parameter_server needs at least one worker, got "
                            f"num_workers={num_workers}: set num_workers to 1 or more")
    return problems


def job_problems(num_workers: int, gpus_per_worker: int, max_restarts: int, strategy: str,
                 num_ps: int) -> list[str]:
    """What is wrong with a training job's replicas, each problem naming its fix: the one
    rule of a job's shape, for a job spec (:class:`fmnist_kfp.training.training_job.
    TrainingJobSpec`, at construction) and for a search's trials alike."""
    problems = []
    if num_workers < 1:
        problems.append(f"num_workers must be at least 1, got {num_workers}")
    if gpus_per_worker < 0:
        problems.append(f"gpus_per_worker must be 0 or more, got {gpus_per_worker}")
    if max_restarts < 0:
        problems.append(f"max_restarts must be 0 or more, got {max_restarts}")
    if strategy not in STRATEGIES:
        problems.append(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    return problems + strategy_problems(strategy, num_workers, num_ps)


@dataclass
class KubernetesSettings(Settings):
    """Where and how TFJobs (and Katib trials) run on the cluster: the ``kubernetes`` parameter.

    ``image`` and ``gpu_image`` are not user keys: they are the step's ``image`` and
    ``gpu_image`` inputs (:class:`fmnist_kfp.settings.platform.JobImages`), the pods without and
    with GPUs running each.
    """

    WHAT = "kubernetes settings"

    image: str = ""  # the step's image input, never a user key
    gpu_image: str = ""  # the step's gpu_image input (replicas that request GPUs)
    operator: str = setting(
        "auto", help="Which training operator runs the training jobs: `tfjob` (the Training "
                     "Operator v1), `trainjob` (Kubeflow Trainer v2, with the "
                     "`fmnist-tensorflow` runtime of `manifests/trainer-runtime`), or `auto`: "
                     "TFJob where the cluster serves it, else TrainJob; decided when the step "
                     "runs, and printed.",
        rules=[one_of(OPERATORS, "operator")])
    namespace: str = setting(
        "", help="Namespace of the TFJobs; empty: the namespace the step runs in.",
        rules=[namespace_rule])
    pvc_name: str = setting(
        "", help="ReadWriteMany claim shared by the step and its TFJob pods (dataset copy, "
                 "checkpoints, exports), mounted at mount_path.")
    mount_path: str = setting("/mnt/fmnist", help="Where the shared claim is mounted.")
    cpu: str = setting("2", help="CPU request and limit of each TFJob pod.",
                       rules=[quantity_rule])
    memory: str = setting("4Gi", help="Memory request and limit of each TFJob pod.",
                          rules=[quantity_rule])
    ps_cpu: str = setting("1", help="CPU request and limit of each `PS` pod (strategy "
                                    "parameter_server): it holds variables, it does not compute.",
                          rules=[quantity_rule])
    ps_memory: str = setting("2Gi", help="Memory request and limit of each `PS` pod.",
                             rules=[quantity_rule])
    gpu_node_selector: dict = setting(
        factory=lambda: {"nvidia.com/gpu.present": "true"},
        help="Node selector of GPU workers.")
    gpu_tolerations: list = setting(
        factory=lambda: [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        help="Tolerations of GPU workers.")
    object_store_secret: str = setting(
        "", help="A Secret whose keys become the pods' environment (AWS_ACCESS_KEY_ID, ...) for "
                 "s3:// or gs:// data.")
    service_account: str = setting("", help="ServiceAccount of the TFJob pods.")
    restart_policy: str = setting(
        "ExitCode", help="Replica restart policy: `ExitCode` recreates workers killed by a "
                         "signal (exit codes >= 128) and fails on bugs (1-127); how many "
                         "restarts a job gets is `max_restarts`.",
        rules=[one_of(RESTART_POLICIES, "restart policy")])
    active_deadline_seconds: int = setting(
        0, help="Deadline of each TFJob (runPolicy.activeDeadlineSeconds); 0: none.",
        rules=[not_negative])
    ttl_seconds_after_finished: int = setting(
        3600, help="How long a finished TFJob is kept (runPolicy.ttlSecondsAfterFinished).",
        rules=[not_negative])
    clean_pod_policy: str = setting(
        "Running", help="Pods deleted when the TFJob finishes (runPolicy.cleanPodPolicy).",
        rules=[one_of(CLEAN_POD_POLICIES, "clean pod policy")])
    scheduling: dict = setting(
        factory=dict,
        help="Queue, priority and gang scheduling of every TFJob, Katib trial and batch Job, "
             "a JSON object with any of: " + ", ".join(SchedulingSettings.specs())
             + " (docs/scheduling.md).")

    @property
    def scheduling_settings(self) -> SchedulingSettings:
        return SchedulingSettings.from_dict(self.scheduling)

    @property
    def target_namespace(self) -> str:
        if self.namespace:
            return self.namespace
        from kubeflow.training.utils.utils import get_default_target_namespace

        return get_default_target_namespace()

    def cross_problems(self) -> list[str]:
        problems = [p for p in (image_rule("image", self.image),
                                image_rule("gpu_image", self.gpu_image)) if p]
        typed, type_problems = SchedulingSettings.coerce_values(dict(self.scheduling or {}))
        if type_problems:
            return problems + [f"scheduling: {p}" for p in type_problems]
        return problems + [f"scheduling: {p}" for p in SchedulingSettings(**typed).problems()]

    def validate(self) -> KubernetesSettings:
        problems = self.problems()
        if problems:  # one message: the first problem says what to fix
            raise UserInputError(problems[0] if len(problems) == 1 else
                                 "invalid kubernetes settings: " + "; ".join(problems))
        return self


# Where a pod reads its own namespace; the KFP backend reads it the same way (kubeflow/pipelines
# 2.15.0 backend/src/v2/config/env.go lines 94-103).
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def step_namespace() -> str:
    """The namespace this step's pod runs in; empty off the cluster."""
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def cluster_settings(user: dict[str, Any] | None, *, image: str, gpu_image: str = "",
                     gpus_per_worker: int = 0) -> KubernetesSettings:
    """The settings of the TFJob (and batch Job) pods a step creates, checked: those of
    :func:`merged_cluster_settings`, then their own rules (:meth:`KubernetesSettings.validate`),
    so that the jobs made with them check them no more."""
    return merged_cluster_settings(user, image=image, gpu_image=gpu_image,
                                   gpus_per_worker=gpus_per_worker).validate()


def merged_cluster_settings(user: dict[str, Any] | None, *, image: str, gpu_image: str = "",
                            gpus_per_worker: int = 0) -> KubernetesSettings:
    """The settings of the pods a step creates: the compiled platform's under the user's
    ``kubernetes`` parameter. The one place the two merge.

    ``image`` and ``gpu_image`` are the step's inputs of those names (the pods without and
    with GPUs run them; their defaults are the images the component was compiled with). From
    the platform baked into every task's environment (:mod:`fmnist_kfp.settings.platform`): the
    shared claim (``FMNIST_PVC_NAME``) at ``MOUNT_PATH``, where this step's pod has it mounted.
    The user's keys override the rest. Refused before anything is created, naming the fix: no
    image, a claim or mount path other than the one this step mounts (the pods would not see
    the staged dataset, nor this step their model), and pods in another namespace than this
    step's while they mount a claim (a pod can only mount a PersistentVolumeClaim of its own
    namespace), and GPUs asked for (``gpus_per_worker``, each worker's) without a GPU image.
    The settings' own rules are the caller's to check, once: :func:`cluster_settings` checks
    them, a Katib Experiment's check with the Experiment's other rules
    (:func:`fmnist_kfp.kubernetes.experiment.check_experiment`)."""
    from fmnist_kfp.settings.platform import MOUNT_PATH, PVC_ENV

    if not image:
        raise UserInputError(
            "no image for the pods this step creates on Kubernetes: give the step's image "
            "input (a compiled component defaults it to the image it was compiled with)")
    typed, problems = KubernetesSettings.coerce_values(dict(user or {}))
    if problems:
        raise UserInputError(f"invalid {KubernetesSettings.WHAT}: " + "; ".join(problems))
    compiled_claim = os.environ.get(PVC_ENV, "").strip()
    base = {"pvc_name": compiled_claim, "mount_path": MOUNT_PATH} if compiled_claim else {}
    settings = KubernetesSettings(image=image, gpu_image=gpu_image, **{**base, **typed})
    if compiled_claim and (settings.pvc_name, settings.mount_path) != (compiled_claim,
                                                                       MOUNT_PATH):
        raise UserInputError(
            f"this step mounts the claim {compiled_claim!r} at {MOUNT_PATH} (compiled with "
            f"{PVC_ENV}); the TFJob pods must mount the same claim at the same path to read "
            "the staged dataset and leave the model where this step copies it from, but the "
            f"kubernetes parameter asks for {settings.pvc_name!r} at {settings.mount_path}: "
            f"drop pvc_name and mount_path from it, or compile with {PVC_ENV}="
            f"{settings.pvc_name}")
    here = step_namespace()
    if settings.pvc_name and settings.namespace and here and settings.namespace != here:
        raise UserInputError(
            f"the kubernetes parameter puts the TFJobs in namespace {settings.namespace!r}, but "
            f"this step runs in {here!r}, where the claim {settings.pvc_name!r} is: a pod can "
            "only mount a PersistentVolumeClaim of its own namespace. Drop namespace from the "
            f"kubernetes parameter (the TFJobs then run in {here!r}), or run the pipeline in "
            f"{settings.namespace!r}")
    if gpus_per_worker and not gpu_image:
        # A CPU image on a GPU node would train on its CPU without a word.
        raise UserInputError(
            f"the job asks for {gpus_per_worker} GPU(s) per worker, but no GPU image was "
            "given for those replicas: give the step's gpu_image input (a compiled component "
            "defaults it to the GPU image it was compiled with), or set gpus_per_worker to 0")
    return settings
