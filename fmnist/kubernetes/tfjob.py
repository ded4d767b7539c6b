"""TFJob manifests, built from the kubeflow-training SDK's models.

One replica spec per role: ``Worker`` × N (and an optional ``Chief``), each pod running the same
trainer module the local backend runs, with the dataset and the model on shared storage (a PVC
mount or an object-store URI) so the export outlives the pods. ``restartPolicy: ExitCode``
brings back preempted workers (exit codes ≥ 128) to resume from the epoch checkpoint, while a
bug or bad input (1–127) fails the job at once.
"""

from __future__ import annotations

from fmnist.errors import UserInputError
from fmnist.settings.jobs import GPU_RESOURCE, KubernetesSettings
from fmnist.training.job import TrainingJobSpec

CONTAINER_NAME = "tensorflow"  # the name the training operator expects for TFJob containers


def build_tfjob(spec: TrainingJobSpec, settings: KubernetesSettings):
    """The ``KubeflowOrgV1TFJob`` for a training job."""
    from kubeflow.training import models
    from kubernetes import client

    spec.validate()
    settings.validate()
    if spec.gpus_per_worker and spec.num_workers < 1:
        raise UserInputError("GPUs were asked for but the job has no workers")
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
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(annotations={"sidecar.istio.io/inject": "false"}),
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
        backoff_limit=settings.backoff_limit,
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
