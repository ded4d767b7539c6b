"""TFJob manifests, built from the kubeflow-training SDK's models.

One replica spec per role: ``Worker`` × N (and an optional ``Chief``), each pod running the same
trainer module the local backend runs, with the dataset and the model on shared storage (a PVC
mount or an object-store URI) so the export outlives the pods. ``restartPolicy: ExitCode``
brings back preempted workers (exit codes ≥ 128) to resume from the epoch checkpoint, while a
bug or bad input (1–127) fails the job at once. How many restarts a job gets is the job spec's
``max_restarts``, which the launcher enforces; ``runPolicy.backoffLimit`` is set to agree with
it (:func:`backoff_limit`).
"""

from __future__ import annotations

from fmnist.errors import UserInputError
from fmnist.settings.jobs import GPU_RESOURCE, KubernetesSettings
from fmnist.training.job import TrainingJobSpec

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


def build_tfjob(spec: TrainingJobSpec, settings: KubernetesSettings):
    """The ``KubeflowOrgV1TFJob`` for a training job."""
    from kubeflow.training import models
    from kubernetes import client

    spec.validate()  # at least one worker, among the rest
    settings.validate()
    # Our rule, from the operator's naming: each pod and its headless Service are named
    # <job>-<type>-<index> (pkg/controller.v1/common/util.go GenGeneralName, v1.9.2 lines
    # 50-53), and a Service name must be a DNS-1035 label of at most 63 characters, which the
    # API server checks only after the TFJob webhook has accepted the job.
    longest = f"{spec.name}-worker-{max(spec.num_workers - 1, 0)}"
    if len(longest) > DNS_LABEL_MAX:
        raise UserInputError(
            f"job name {spec.name!r} is too long: its pod and service {longest!r} would exceed "
            f"{DNS_LABEL_MAX} characters; shorten the name by {len(longest) - DNS_LABEL_MAX}")
    command = spec.trainer_command(python="python")  # the image's interpreter, not ours
    limits = {"cpu": settings.cpu, "memory": settings.memory}
    if spec.gpus_per_worker:
        limits[GPU_RESOURCE] = str(spec.gpus_per_worker)
    env = [client.V1EnvVar(name="TF_CPP_MIN_LOG_LEVEL", value="2")]
    env_from = None
    if settings.object_store_secret:
        env_from = [
            client.V1EnvFromSource(
                secret_ref=client.V1SecretEnvSource(name=settings.object_store_secret)
            )
        ]
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
    container = client.V1Container(
        name=CONTAINER_NAME,
        image=settings.image,
        command=command,
        env=env,
        env_from=env_from,
        resources=client.V1ResourceRequirements(requests=dict(limits), limits=limits),
        volume_mounts=mounts,
    )
    pod_spec = client.V1PodSpec(
        containers=[container],
        volumes=volumes,
        service_account_name=settings.service_account or None,
        node_selector=dict(settings.gpu_node_selector) if spec.gpus_per_worker else None,
        tolerations=[client.V1Toleration(**t) for t in settings.gpu_tolerations]
        if spec.gpus_per_worker
        else None,
    )
    # No Istio sidecar in training pods (it would keep a finished pod running and sits in the
    # workers' gRPC path): the label is what Kubeflow's own TFJob test sets
    # (kubeflow/manifests v1.11.0 tests/training_operator_job.yaml lines 12-15), the annotation
    # what older Istio reads.
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels={"sidecar.istio.io/inject": "false"},
                                     annotations={"sidecar.istio.io/inject": "false"}),
        spec=pod_spec,
    )
    replicas = {
        "Worker": models.KubeflowOrgV1ReplicaSpec(
            replicas=spec.num_workers, restart_policy=settings.restart_policy, template=template
        )
    }
    if spec.use_chief:
        replicas["Chief"] = models.KubeflowOrgV1ReplicaSpec(
            replicas=1, restart_policy=settings.restart_policy, template=template
        )
    run_policy = models.KubeflowOrgV1RunPolicy(
        backoff_limit=backoff_limit(spec.max_restarts),
        active_deadline_seconds=settings.active_deadline_seconds or None,
        clean_pod_policy=settings.clean_pod_policy,
        ttl_seconds_after_finished=settings.ttl_seconds_after_finished,
    )
    return models.KubeflowOrgV1TFJob(
        api_version="kubeflow.org/v1",
        kind="TFJob",
        metadata=client.V1ObjectMeta(
            name=spec.name,
            namespace=settings.target_namespace,
            labels={"app.kubernetes.io/part-of": "fmnist-kfp", "fmnist/model-type":
                    spec.config.model_type},
        ),
        spec=models.KubeflowOrgV1TFJobSpec(tf_replica_specs=replicas, run_policy=run_policy),
    )


def to_manifest(tfjob) -> dict:
    """The JSON the API server receives (camelCase keys, no nulls)."""
    from kubernetes.client import ApiClient

    return ApiClient().sanitize_for_serialization(tfjob)
