"""TrainJob manifests (Kubeflow Trainer v2), built from the ``kubeflow-trainer-api`` models.

A TrainJob references the ClusterTrainingRuntime ``fmnist-tensorflow`` (``kubectl apply -k
manifests/trainer-runtime``): a JobSet template with one replicated job ``node``, container
``node``, and no torch/MPI ML policy, so Trainer's PlainML plugin sets that job's node count
from ``spec.trainer.numNodes`` and upserts ``spec.trainer.env`` into the ``node`` container
(kubeflow/trainer v2.1.0 pkg/runtime/framework/plugins/plainml/plainml.go lines 45-67); the
JobSet plugin puts ``spec.trainer``'s image, command and ``resourcesPerNode`` on that container
(plugins/jobset/builder.go lines 113-172). Each node builds its ``TF_CONFIG`` from the JobSet's
names and its completion index (:mod:`fmnist_kfp.training.jobset_cluster`), so the TrainJob
only says how many nodes, what they run and where the shared volume is.

What a TrainJob can say besides, and how it differs between the Trainer releases we support:

* **Pod settings** (the shared claim and its mount, service account, GPU node selector and
  tolerations, the pods' security context): Trainer 2.1.0 takes them as
  ``spec.podTemplateOverrides`` (strategically merged into the targeted job's pod template:
  pkg/runtime/core/trainingruntime.go lines 190-238), Trainer 2.2.0 dropped that field for
  ``spec.runtimePatches`` (keyed by ``manager``, merged into the replicated job's template:
  v2.2.0 trainingruntime.go lines 203-240; pkg/apis/trainer/v1alpha1/trainjob_types.go lines
  284-480). The two are not interchangeable: an API server prunes the field its CRD lacks
  (silently, without strict field validation), so the shape is chosen by what the cluster
  serves (:func:`fmnist_kfp.kubernetes.training_operators.trainjob_api`). 2.1's overrides
  have no ``securityContext`` (v2.1.0 trainjob_types.go lines 291-340): there the runtime
  sets the image's user and group itself.
* **Kueue** reads ``kueue.x-k8s.io/queue-name`` and ``kueue.x-k8s.io/priority-class`` on the
  TrainJob, suspends it at creation and unsuspends it once admitted, writing its own entry of
  ``spec.runtimePatches`` (manager ``kueue.x-k8s.io/manager``) first: kubernetes-sigs/kueue
  v0.19.2 pkg/controller/jobs/trainjob/trainjob_controller.go lines 76, 116-136, 243-290,
  built against Trainer v2.2.1 (go.mod line 14). Against Trainer 2.1 it has nowhere to write
  that, so a queue is refused there (:func:`trainjob_problems`).
* **The deadline**: Trainer 2.2's ``spec.activeDeadlineSeconds`` (trainjob_types.go lines
  131-139); on 2.1 the launcher's own deadline stands alone.

What a TrainJob cannot express is refused before any work (:func:`trainjob_problems`).
"""

from __future__ import annotations

from typing import Any

from fmnist_kfp.kubernetes import keys
from fmnist_kfp.kubernetes.storage import pod_security_context
from fmnist_kfp.settings.jobs import GPU_RESOURCE, KubernetesSettings
from fmnist_kfp.settings.platform import TENSORFLOW_ENV
from fmnist_kfp.training.jobset_cluster import NUM_NODES, cluster_problems, node_hostname
from fmnist_kfp.training.training_job import TrainingJobSpec

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TrainJob"
PLURAL = "trainjobs"
RUNTIME_KIND = "ClusterTrainingRuntime"
RUNTIME_PLURAL = "clustertrainingruntimes"
RUNTIME_NAME = "fmnist-tensorflow"  # manifests/trainer-runtime
RUNTIME_APPLY = "kubectl apply -k manifests/trainer-runtime"
# The runtime's JobSet failurePolicy.maxRestarts (manifests/trainer-runtime, a test holds them
# equal): past it JobSet fails the JobSet, and so the TrainJob, with ReachedMaxRestarts
# (jobset v0.10.1 pkg/controllers/failure_policy.go 219-227), whatever the job's max_restarts.
RUNTIME_MAX_RESTARTS = 5
# The event Trainer records, instead of any condition, while a TrainJob's JobSet cannot be made.
CREATION_FAILED = "TrainJobResourcesCreationFailed"
# The replicated job and container of the runtime that Trainer treats as the trainer:
# pkg/constants/constants.go (v2.1.0) Node = "node", AncestorTrainer = "trainer".
REPLICATED_JOB = "node"
CONTAINER_NAME = "node"
# The two shapes of the pod settings, by the TrainJob field each Trainer release serves.
OVERRIDES = "podTemplateOverrides"  # Trainer 2.1 (Kubeflow 26.03)
PATCHES = "runtimePatches"  # Trainer 2.2 and later (Kubeflow 26.03.1)
SHAPES = (OVERRIDES, PATCHES)
# Our entry of runtimePatches: a domain-prefixed path, as Trainer v2.2.0's JobSet plugin
# checks (plugins/jobset/jobset.go line 129, IsDomainPrefixedPath).
PATCH_MANAGER = "fmnist-kfp.io/train-step"
DNS_LABEL_MAX = 63
# JobSet's webhook checks the longest pod name of an Indexed job with a 5-character random
# suffix (kubernetes-sigs/jobset v0.10.1 pkg/webhooks/jobset_webhook.go lines 230-243).
POD_NAME_SUFFIX = "-abcde"
# The labels JobSet puts on every pod (jobset v0.10.1 api/jobset/v1alpha2/jobset_types.go).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"  # pkg/constants/constants.go 29
NUM_NODES_ENV = NUM_NODES  # read by fmnist_kfp.training.jobset_cluster
# Defaults of the TFJob-only settings: any other value is a wish a TrainJob cannot keep.
TFJOB_ONLY_DEFAULTS = {"restart_policy": "ExitCode", "clean_pod_policy": "Running",
                       "ttl_seconds_after_finished": 3600}


def pod_name(job_name: str, node: int) -> str:
    """The deterministic part of node ``node``'s pod name, also its hostname:
    ``<trainjob>-node-0-<node>`` (:func:`fmnist_kfp.training.jobset_cluster.node_hostname`, the
    one place that spells it; the JobSet is named as the TrainJob)."""
    return node_hostname(job_name, node, REPLICATED_JOB)


def trainjob_problems(spec: TrainingJobSpec, settings: KubernetesSettings,
                      shape: str = OVERRIDES) -> list[str]:
    """What a TrainJob with the ``fmnist-tensorflow`` runtime cannot do of ``spec`` and
    ``settings``, each with its reason and fix (empty: nothing). ``shape``: which of
    :data:`SHAPES` the cluster serves. :class:`fmnist_kfp.kubernetes.training_operators.
    ClusterJob` refuses with these, for the train step and Katib's trial template, before any
    work."""
    problems = []
    scheduling = settings.scheduling_settings
    # The roles the runtime's one `node` job cannot take (the TF_CONFIG module says why).
    problems += cluster_problems(spec.strategy, spec.use_chief, spec.evaluator)
    if scheduling.gang:
        problems.append(
            f"scheduling.gang {scheduling.gang}: a TrainJob is gang-scheduled by its runtime's "
            "podGroupPolicy (Trainer's coscheduling or volcano plugin), which a TrainJob cannot "
            "set: drop gang, or use kubernetes.operator tfjob")
    if scheduling.priority_class and not scheduling.queue:
        problems.append(
            f"scheduling.priority_class {scheduling.priority_class}: a TrainJob cannot set its "
            "pods' priorityClassName (Trainer's pod overrides and runtime patches have no such "
            "field); only Kueue's priority applies, with a queue: set scheduling.queue, or drop "
            "priority_class, or use kubernetes.operator tfjob")
    if scheduling.queue and shape == OVERRIDES:
        problems.append(
            f"scheduling.queue {scheduling.queue}: Kueue's TrainJob integration (0.19) writes "
            "the TrainJob's spec.runtimePatches, which this cluster's Trainer (2.1, "
            "podTemplateOverrides) does not serve: upgrade Trainer to 2.2 (Kubeflow 26.03.1), "
            "drop the queue, or use kubernetes.operator tfjob")
    if settings.object_store_secret:
        problems.append(
            f"object_store_secret {settings.object_store_secret}: a TrainJob cannot give the "
            "trainer a Secret's keys as its environment (spec.trainer.env and the container "
            "overrides take single variables, no envFrom): put the data on the shared claim, "
            "or use kubernetes.operator tfjob")
    for key, default in TFJOB_ONLY_DEFAULTS.items():
        value = getattr(settings, key)
        if value != default:
            problems.append(
                f"{key} {value}: a TFJob setting; a TrainJob's restarts and clean-up are its "
                "runtime's JobSet failure policy (restarts bounded by max_restarts, counted by "
                f"the launcher; a failed job deleted): leave {key} at {default!r}, or use "
                "kubernetes.operator tfjob")
    if spec.max_restarts > RUNTIME_MAX_RESTARTS:
        problems.append(
            f"max_restarts {spec.max_restarts}: the runtime {RUNTIME_NAME} lets JobSet restart "
            f"a TrainJob at most {RUNTIME_MAX_RESTARTS} times (its failurePolicy.maxRestarts, "
            "which a TrainJob cannot change) and then fails it: set max_restarts to "
            f"{RUNTIME_MAX_RESTARTS} or less, or use kubernetes.operator tfjob")
    longest = pod_name(spec.name, spec.num_workers - 1) + POD_NAME_SUFFIX
    if len(longest) > DNS_LABEL_MAX:
        problems.append(
            f"job name {spec.name!r} is too long for a TrainJob: its JobSet's pods would be "
            f"named like {longest!r}, over {DNS_LABEL_MAX} characters, which JobSet's webhook "
            "refuses after Trainer has accepted the TrainJob; shorten the name by "
            f"{len(longest) - DNS_LABEL_MAX}")
    return problems


def _pod_template_patch(spec: TrainingJobSpec, settings: KubernetesSettings, shape: str):
    """The pod settings of the ``node`` job as Trainer 2.2's ``PodTemplatePatch`` model (2.1's
    override takes the same fields but ``securityContext``)."""
    from kubeflow_trainer_api import models
    from kubernetes.client import ApiClient

    def core(model_class, value):
        # The kubernetes client's models (as tfjob.py and storage.py build them), as the
        # trainer models' own corev1 classes.
        return model_class.from_dict(ApiClient().sanitize_for_serialization(value))

    from kubernetes import client

    gpus = bool(spec.gpus_per_worker)
    volumes, containers = None, None
    if settings.pvc_name:
        volumes = [core(models.IoK8sApiCoreV1Volume, client.V1Volume(
            name="fmnist-data", persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(
                claim_name=settings.pvc_name)))]
        containers = [models.TrainerV1alpha1ContainerPatch(
            name=CONTAINER_NAME,
            volume_mounts=[models.IoK8sApiCoreV1VolumeMount(name="fmnist-data",
                                                            mount_path=settings.mount_path)])]
    security = None
    if shape == PATCHES:
        security = core(models.IoK8sApiCoreV1PodSecurityContext,
                        pod_security_context(with_volume=bool(settings.pvc_name)))
    pod_spec = models.TrainerV1alpha1PodSpecPatch(
        volumes=volumes, containers=containers,
        service_account_name=settings.service_account or None,
        node_selector=dict(settings.gpu_node_selector) if gpus else None,
        tolerations=[models.IoK8sApiCoreV1Toleration.from_dict(
            ApiClient().sanitize_for_serialization(client.V1Toleration(**t)))
            for t in settings.gpu_tolerations] if gpus else None,
        security_context=security)
    # No Istio sidecar in training pods, as on the TFJob's (tfjob.py says why).
    metadata = models.IoK8sApimachineryPkgApisMetaV1ObjectMeta(
        labels={"sidecar.istio.io/inject": "false"},
        annotations={"sidecar.istio.io/inject": "false"})
    return models.TrainerV1alpha1PodTemplatePatch(metadata=metadata, spec=pod_spec)


def build_trainjob(spec: TrainingJobSpec, settings: KubernetesSettings,
                   shape: str = OVERRIDES) -> dict[str, Any]:
    """The TrainJob the API server receives (camelCase keys, no nulls) for a training job,
    its pod settings in ``shape`` (:data:`OVERRIDES` for Trainer 2.1, :data:`PATCHES` for 2.2
    and later). It only builds: ``spec``, ``settings`` and ``shape`` as a
    :class:`~fmnist_kfp.kubernetes.training_operators.ClusterJob` checked them
    (:func:`trainjob_problems`)."""
    from kubeflow_trainer_api import models
    from kubernetes.client import ApiClient

    scheduling = settings.scheduling_settings
    limits = {"cpu": settings.cpu, "memory": settings.memory}
    if spec.gpus_per_worker:
        limits[GPU_RESOURCE] = str(spec.gpus_per_worker)
    quantities = {name: models.IoK8sApimachineryPkgApiResourceQuantity(value)
                  for name, value in limits.items()}
    env = [*(models.IoK8sApiCoreV1EnvVar(name=name, value=value)
             for name, value in TENSORFLOW_ENV.items()),
           # The node count again for TF_CONFIG (numNodes itself never reaches the pods).
           models.IoK8sApiCoreV1EnvVar(name=NUM_NODES_ENV, value=str(spec.num_workers))]
    trainer = models.TrainerV1alpha1Trainer(
        # Nodes with GPUs run the GPU image, the rest the lighter CPU image (see tfjob.py).
        image=settings.gpu_image if spec.gpus_per_worker else settings.image,
        command=spec.trainer_command(python="python"),  # the image's interpreter
        num_nodes=spec.num_workers,
        resources_per_node=models.IoK8sApiCoreV1ResourceRequirements(
            requests=quantities, limits=dict(quantities)),
        env=env)
    patch = _pod_template_patch(spec, settings, shape)
    runtime_patches = None
    if shape == PATCHES:
        runtime_patches = [models.TrainerV1alpha1RuntimePatch(
            manager=PATCH_MANAGER,
            training_runtime_spec=models.TrainerV1alpha1TrainingRuntimeSpecPatch(
                template=models.TrainerV1alpha1JobSetTemplatePatch(
                    spec=models.TrainerV1alpha1JobSetSpecPatch(replicated_jobs=[
                        models.TrainerV1alpha1ReplicatedJobPatch(
                            name=REPLICATED_JOB,
                            template=models.TrainerV1alpha1JobTemplatePatch(
                                spec=models.TrainerV1alpha1JobSpecPatch(template=patch)))]))))]
    trainjob = models.TrainerV1alpha1TrainJob(
        api_version=API_VERSION, kind=KIND,
        metadata=models.IoK8sApimachineryPkgApisMetaV1ObjectMeta(
            name=spec.name, namespace=settings.target_namespace,
            labels={**keys.PART_OF, keys.MODEL_TYPE: spec.config.model_type,
                    **scheduling.job_labels()}),
        spec=models.TrainerV1alpha1TrainJobSpec(
            runtime_ref=models.TrainerV1alpha1RuntimeRef(
                name=RUNTIME_NAME, api_group=GROUP, kind=RUNTIME_KIND),
            trainer=trainer,
            runtime_patches=runtime_patches,
            active_deadline_seconds=(settings.active_deadline_seconds or None)
            if shape == PATCHES else None))
    manifest = ApiClient().sanitize_for_serialization(trainjob.to_dict())
    if shape == OVERRIDES:
        # Trainer 2.1's PodTemplateOverride: the targeted jobs, then the same metadata and pod
        # spec fields (v2.1.0 trainjob_types.go lines 266-340).
        manifest["spec"]["podTemplateOverrides"] = [
            {"targetJobs": [{"name": REPLICATED_JOB}], **patch.to_dict()}]
    return manifest
