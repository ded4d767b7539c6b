"""TFJob manifests, built from the kubeflow-training SDK's models.

One replica spec per role: ``Worker`` × N (and an optional ``Chief``; with strategy
``parameter_server`` always a ``Chief``, the coordinator, and ``PS`` × ``num_ps`` with their own
resources; with ``evaluator`` one ``Evaluator``), each pod running the same trainer module the
local backend runs, with the dataset and the model on shared storage (a PVC
mount or an object-store URI) so the export outlives the pods. ``restartPolicy: ExitCode``
brings back preempted workers (exit codes ≥ 128) to resume from the epoch checkpoint, while a
bug or bad input (1–127) fails the job at once. How many restarts a job gets is the job spec's
``max_restarts``, which the launcher enforces; ``runPolicy.backoffLimit`` is set to agree with
it (:func:`backoff_limit`).
"""

from __future__ import annotations

from fmnist_kfp.kubernetes import keys
from fmnist_kfp.kubernetes.storage import pod_security_context
from fmnist_kfp.settings.jobs import GPU_RESOURCE, KubernetesSettings
from fmnist_kfp.settings.platform import TENSORFLOW_ENV
from fmnist_kfp.settings.scheduling import SchedulingSettings
from fmnist_kfp.training.training_job import TrainingJobSpec

CONTAINER_NAME = "tensorflow"  # the name the training operator expects for TFJob containers
# The labels the operator puts on every pod (kubeflow/trainer v1.9.2
# pkg/apis/kubeflow.org/v1/common_types.go lines 25-37, set in common/pod.go 402-407).
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
DNS_LABEL_MAX = 63


def backoff_limit(max_restarts: int) -> int:
    """``runPolicy.backoffLimit`` agreeing with the launcher's budget of ``max_restarts``.

    kubeflow/trainer v1.9.2: with ``backoffLimit: 0`` the first new pod failure fails the job
    (pkg/controller.v1/common/job.go lines 193-198, the work queue's retry count being always
    0) and so does the first container restart (pkg/core/job.go ``PastBackoffLimit``: ``result
    > 0``); otherwise the job fails once the restart counts of its running pods reach the
    limit (``result >= limit``), which only ``OnFailure``/``Always`` pods accumulate. So 0 for
    no restarts, else ``max_restarts + 1``: the operator then stops no earlier than the launcher
    would, whose count also covers ``ExitCode`` restarts, which the operator leaves
    unbounded."""
    return 0 if max_restarts == 0 else max_restarts + 1


def gang_policy(scheduling: SchedulingSettings, replicas: int):
    """``runPolicy.schedulingPolicy`` of a gang-scheduled TFJob (None without ``gang``): every
    replica or none (``minAvailable``), in the Volcano queue, at the priority, with the
    scheduler-plugins timeout. The training operator turns it into the gang scheduler's
    PodGroup (see docs/scheduling.md for the upstream code)."""
    from kubeflow.training import models

    if not scheduling.gang:
        return None
    return models.KubeflowOrgV1SchedulingPolicy(
        min_available=replicas, queue=scheduling.gang_queue or None,
        priority_class=scheduling.priority_class or None,
        schedule_timeout_seconds=scheduling.gang_timeout_seconds or None)


def tfjob_problems(spec: TrainingJobSpec, settings: KubernetesSettings) -> list[str]:
    """What the training operator or the API server would refuse of this job as a TFJob with
    these pod settings, or what would not end as asked, each with the fix (empty: nothing).
    :class:`fmnist_kfp.kubernetes.training_operators.ClusterJob` refuses with these."""
    problems = []
    # Our rule, from the operator's naming: each pod and its headless Service are named
    # <job>-<type>-<index> (pkg/controller.v1/common/util.go GenGeneralName, v1.9.2 lines
    # 50-53), and a Service name must be a DNS-1035 label of at most 63 characters, which the
    # API server checks only after the TFJob webhook has accepted the job.
    longest = max((f"{spec.name}-{kind.lower()}-{count - 1}"
                   for kind, count in spec.replica_counts().items()), key=len)
    if len(longest) > DNS_LABEL_MAX:
        problems.append(
            f"job name {spec.name!r} is too long: its pod and service {longest!r} would exceed "
            f"{DNS_LABEL_MAX} characters; shorten the name by {len(longest) - DNS_LABEL_MAX}")
    if spec.parameter_server and settings.clean_pod_policy == "None":
        # tfjob_controller.go (v1.9.2) lines 444-458: with a Chief the job succeeds when the
        # chief does; common/job.go lines 40-66: cleanPodPolicy None then deletes nothing, and
        # PS pods (which never exit) would run on after the job.
        problems.append(
            "strategy parameter_server with clean_pod_policy None would leave the PS and worker "
            "pods running after the job succeeds (they never exit on their own): set "
            "clean_pod_policy to Running (the default) or All")
    return problems


def build_tfjob(spec: TrainingJobSpec, settings: KubernetesSettings):
    """The ``KubeflowOrgV1TFJob`` for a training job; it only builds: ``spec`` and
    ``settings`` as a :class:`~fmnist_kfp.kubernetes.training_operators.ClusterJob` checked
    them (:func:`tfjob_problems`)."""
    from kubeflow.training import models
    from kubernetes import client

    command = spec.trainer_command(python="python")  # the image's interpreter, not ours
    limits = {"cpu": settings.cpu, "memory": settings.memory}
    if spec.gpus_per_worker:
        limits[GPU_RESOURCE] = str(spec.gpus_per_worker)
    env = [client.V1EnvVar(name=name, value=value) for name, value in TENSORFLOW_ENV.items()]
    env_from = None
    if settings.object_store_secret:
        env_from = [
            client.V1EnvFromSource(
                secret_ref=client.V1SecretEnvSource(name=settings.object_store_secret)
            )
        ]
    scheduling = settings.scheduling_settings
    volumes, mounts = None, None
    if settings.pvc_name:
        volumes = [
            client.V1Volume(
                name="fmnist-data",
                persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(
                    claim_name=settings.pvc_name
                ),
            )
        ]
        mounts = [client.V1VolumeMount(name="fmnist-data", mount_path=settings.mount_path)]

    def template(resources: dict[str, str], gpus: bool):
        # Replicas that request GPUs run the GPU image (TensorFlow with its CUDA wheels); the
        # rest the CPU image, ~2.8 GB of CUDA libraries lighter (see the Dockerfile).
        container = client.V1Container(
            name=CONTAINER_NAME,
            image=settings.gpu_image if gpus else settings.image,
            command=command,
            env=env,
            env_from=env_from,
            resources=client.V1ResourceRequirements(requests=dict(resources), limits=resources),
            volume_mounts=mounts,
        )
        pod_spec = client.V1PodSpec(
            containers=[container],
            volumes=volumes,
            service_account_name=settings.service_account or None,
            node_selector=dict(settings.gpu_node_selector) if gpus else None,
            tolerations=[client.V1Toleration(**t) for t in settings.gpu_tolerations]
            if gpus
            else None,
            # The image's user and group, and fsGroup 0 on the shared volume: see
            # fmnist_kfp.kubernetes.storage for why, and how the operator passes it on.
            security_context=pod_security_context(with_volume=bool(settings.pvc_name)),
            priority_class_name=scheduling.priority_class or None,
            # The operator only fills an empty schedulerName, with its flag's value, which for
            # scheduler-plugins is not the scheduler's name (see fmnist_kfp.settings.scheduling).
            scheduler_name=scheduling.scheduler_name or None,
        )
        # No Istio sidecar in training pods (it would keep a finished pod running and sits in
        # the workers' gRPC path): the label is what Kubeflow's own TFJob test sets
        # (kubeflow/manifests v1.11.0 tests/training_operator_job.yaml lines 12-15), the
        # annotation what older Istio reads.
        return client.V1PodTemplateSpec(
            metadata=client.V1ObjectMeta(labels={"sidecar.istio.io/inject": "false"},
                                         annotations={"sidecar.istio.io/inject": "false"}),
            spec=pod_spec,
        )

    gpus = bool(spec.gpus_per_worker)
    cpu_only = {"cpu": settings.cpu, "memory": settings.memory}
    # Who computes gets the GPUs: the workers, and the chief of a mirrored job (it trains);
    # a parameter-server chief only coordinates, PS pods hold variables, the evaluator scores.
    templates = {
        "Chief": template(cpu_only, False) if spec.parameter_server else template(limits, gpus),
        "Worker": template(limits, gpus),
        "PS": template({"cpu": settings.ps_cpu, "memory": settings.ps_memory}, False),
        "Evaluator": template(cpu_only, False),
    }
    replicas = {
        kind: models.KubeflowOrgV1ReplicaSpec(
            replicas=count, restart_policy=settings.restart_policy, template=templates[kind])
        for kind, count in spec.replica_counts().items()
    }
    run_policy = models.KubeflowOrgV1RunPolicy(
        backoff_limit=backoff_limit(spec.max_restarts),
        active_deadline_seconds=settings.active_deadline_seconds or None,
        clean_pod_policy=settings.clean_pod_policy,
        ttl_seconds_after_finished=settings.ttl_seconds_after_finished,
        scheduling_policy=gang_policy(scheduling, sum(spec.replica_counts().values())),
    )
    return models.KubeflowOrgV1TFJob(
        api_version="kubeflow.org/v1",
        kind="TFJob",
        metadata=client.V1ObjectMeta(
            name=spec.name,
            namespace=settings.target_namespace,
            labels={**keys.PART_OF, keys.MODEL_TYPE: spec.config.model_type,
                    **scheduling.job_labels()},
        ),
        spec=models.KubeflowOrgV1TFJobSpec(tf_replica_specs=replicas, run_policy=run_policy),
    )


