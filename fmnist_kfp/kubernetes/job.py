"""``batch/v1`` Jobs with ``completionMode: Indexed``: one pod per shard of a batch prediction.

Built from the ``kubernetes`` client's models, so every field is one the API knows. What the
API server requires of such a Job: ``completions`` set when ``completionMode`` is ``Indexed``
and ``parallelism`` at most 10^5; ``template.spec.restartPolicy`` ``Never`` or ``OnFailure``.
Each pod gets its index in ``JOB_COMPLETION_INDEX`` and hostname ``<job>-<index>``, so the name
leaves room for the index in a 63-character label. Pods run with
``sidecar.istio.io/inject: "false"`` as a label and as an annotation, as TFJob pods do
(``fmnist_kfp.kubernetes.tfjob``): a Job pod whose Istio sidecar keeps running never completes.
Istio reads the label first and the annotation only without it (istio/istio
``pkg/kube/inject/inject.go`` ``injectRequired``: "The label is the new API; if both are
present we prefer the label"; Kubeflow 26.03 ships Istio 1.28, ``proxyv2:1.28.0`` in
kubeflow/manifests 26.03 ``common/istio/cluster-local-gateway/base/cluster-local-gateway.yaml``),
and its injector webhook's objectSelector skips a pod labelled ``false`` altogether.

upstream: docs/upstream.md#kubernetes, #kubeflow-manifests
"""

from __future__ import annotations

from typing import Any

from fmnist_kfp.kubernetes import keys
from fmnist_kfp.kubernetes.storage import pod_security_context
from fmnist_kfp.scoring.scoring_job import ScoringJobSpec
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.settings.platform import TENSORFLOW_ENV

CONTAINER_NAME = "scorer"
MAX_INDEXED_PARALLELISM = 100_000
SIDECAR_INJECT = "sidecar.istio.io/inject"  # a label (what Istio reads first) and annotation


def build_indexed_job(spec: ScoringJobSpec, settings: KubernetesSettings):
    """The ``V1Job`` scoring ``spec``'s shards, one pod each, on the shared volume. Only
    builds: the spec checked itself as it was made (its name leaves room for the pods'
    index), the settings were checked as the step made them
    (:func:`fmnist_kfp.settings.jobs.cluster_settings`)."""
    from kubernetes import client

    limits = {"cpu": settings.cpu, "memory": settings.memory}
    env = [client.V1EnvVar(name=name, value=value) for name, value in TENSORFLOW_ENV.items()]
    env_from = None
    if settings.object_store_secret:
        env_from = [client.V1EnvFromSource(
            secret_ref=client.V1SecretEnvSource(name=settings.object_store_secret))]
    volumes, mounts = None, None
    if settings.pvc_name:
        volumes = [client.V1Volume(
            name="fmnist-data",
            persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(
                claim_name=settings.pvc_name))]
        mounts = [client.V1VolumeMount(name="fmnist-data", mount_path=settings.mount_path)]
    container = client.V1Container(
        name=CONTAINER_NAME,
        image=settings.image,
        # No --shard-index: each pod reads JOB_COMPLETION_INDEX.
        command=spec.worker_command(python="python"),
        env=env,
        env_from=env_from,
        resources=client.V1ResourceRequirements(requests=dict(limits), limits=limits),
        volume_mounts=mounts,
    )
    labels = {**keys.PART_OF,
              "app.kubernetes.io/component": "batch-prediction"}
    scheduling = settings.scheduling_settings
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels={**labels, SIDECAR_INJECT: "false"},
                                     annotations={SIDECAR_INJECT: "false"}),
        spec=client.V1PodSpec(containers=[container], volumes=volumes, restart_policy="Never",
                              service_account_name=settings.service_account or None,
                              # Writes its shard on the shared volume: see
                              # fmnist_kfp.kubernetes.storage.
                              security_context=pod_security_context(
                                  with_volume=bool(settings.pvc_name)),
                              priority_class_name=scheduling.priority_class or None),
    )
    return client.V1Job(
        api_version="batch/v1",
        kind="Job",
        # Kueue's labels on the Job only: Kueue manages the Job, not its pods.
        metadata=client.V1ObjectMeta(name=spec.name, namespace=settings.target_namespace,
                                     labels={**labels, **scheduling.job_labels()}),
        spec=client.V1JobSpec(
            completion_mode="Indexed",
            completions=spec.num_shards,
            parallelism=spec.num_shards,
            backoff_limit=spec.retries,
            active_deadline_seconds=settings.active_deadline_seconds or None,
            ttl_seconds_after_finished=settings.ttl_seconds_after_finished,
            template=template,
        ),
    )


def job_state(job: dict[str, Any]) -> tuple[bool, bool, str, str]:
    """``(done, failed, progress, reason)`` from a Job's status: finished when its ``Complete``
    or ``Failed`` condition is true (k8s.io/api v0.36.3 ``batch/v1/types.go``,
    ``JobConditionType``)."""
    status = job.get("status") or {}
    spec = job.get("spec") or {}
    progress = (f"{status.get('succeeded', 0)}/{spec.get('completions', '?')} shards done, "
                f"{status.get('active', 0)} running, {status.get('failed', 0)} failed pods")
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return True, False, progress, ""
        if condition.get("type") == "Failed":
            reason = f"{condition.get('reason', '')}: {condition.get('message', '')}".strip(": ")
            return True, True, progress, reason
    return False, False, progress, ""
