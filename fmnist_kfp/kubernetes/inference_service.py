"""KServe manifests for the Fashion-MNIST classifier, built from the kserve SDK's models.

Two runtimes serve the exported SavedModel (``<model>/1/``):

* ``fmnist-predictor``: our predictor image (``python -m fmnist_kfp.serving.model_server.server``),
  declared by the namespaced ``ServingRuntime`` that
  :func:`fmnist_kfp.kubernetes.serving_runtime.build_serving_runtime` writes. It
  speaks the V1 and V2 protocols and batches requests itself (``--max_batch_size``,
  ``--max_batch_latency_ms``).
* ``tensorflow``: KServe's TF Serving ``ClusterServingRuntime`` ``kserve-tensorflow-serving``
  (V1 only, as the reference book deploys it); batching goes through KServe's batcher sidecar.

KServe's storage initializer fetches ``storageUri`` into ``/mnt/models``. Object-store
credentials come from the Secret of the predictor's ServiceAccount (``service_account``); they
never go into the spec.

The spec depends on the deployment mode
(``fmnist_kfp.kubernetes.inference_service_status.DeploymentMode``): Serverless scales with
Knative's autoscaler (concurrency or rps) and splits traffic with
``canaryTrafficPercent``; Standard (raw) mode scales with an HPA (cpu or memory, annotation
``serving.kserve.io/autoscalerClass: hpa``), replaces pods with ``maxUnavailable: 0`` and checks
them with an HTTP readiness probe on the model, so old pods serve until new ones have loaded
it (KServe's own default probe is a TCP check).

The InferenceService carries the model it serves in annotations (see ``ANNOTATION_*``), which
the rollout (``fmnist_kfp.serving.deploy.kserve_deployer``) reads to bless a candidate against the
serving model. In Serverless mode KServe copies InferenceService annotations into the Knative
revision template, so changing them rolls a new revision (KServe's canary guide notes the same for
tag routing).

upstream: docs/upstream.md#kserve
"""

from __future__ import annotations

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kubernetes import keys
from fmnist_kfp.kubernetes.inference_service_status import (
    AUTOSCALER_CLASS_ANNOTATION,
    MODE_ANNOTATION,
    SERVERLESS,
    DeploymentMode,
)
from fmnist_kfp.settings.serving import (
    HPA_SCALE_METRICS,
    KPA_SCALE_METRICS,
    TENSORFLOW_RUNTIME,
    KServeSettings,
    ServingSettings,
    check_storage_uri,
)

API_VERSION = "serving.kserve.io/v1beta1"
KIND = "InferenceService"
RUNTIME_API_VERSION = "serving.kserve.io/v1alpha1"

CONTAINER_NAME = "kserve-container"
MODEL_MOUNT = "/mnt/models"  # where KServe's storage initializer puts the model
HTTP_PORT = 8080
PART_OF_LABEL = keys.PART_OF

TAG_ROUTING_ANNOTATION = "serving.kserve.io/enable-tag-routing"
# Standard mode: a candidate InferenceService "<name>-c<5 hex digits of the model's URI>" is
# verified before the main one changes (see fmnist_kfp.serving.deploy.rollout_standard). Each
# model gets its own, so two promotions racing never delete each other's candidate (issue 29).
# The suffix is 7 characters, as long as the "-canary" that MAX_SERVICE_NAME_LENGTH
# (fmnist_kfp.settings.serving) was derived for, so every name derived from it still fits.
CANDIDATE_SUFFIX = "-canary"
CANDIDATE_MARK = "-c"
CANDIDATE_HASH_DIGITS = len(CANDIDATE_SUFFIX) - len(CANDIDATE_MARK)
ROLE_LABEL = keys.key("role")
# Defaults of the autoscaling target when serving.scale_target is 0: in-flight requests per
# replica (Knative), CPU utilization percent (HPA).
DEFAULT_SCALE = {"Serverless": ("concurrency", 8), "Standard": ("cpu", 80)}
SERVERLESS_MODE = DeploymentMode(SERVERLESS, None, "default")
# The model the stable (rolled-out) revision serves.
ANNOTATION_TEST_ACCURACY = keys.key("test-accuracy")
ANNOTATION_MODEL_URI = keys.key("model-uri")
# Set only while a canary is in progress.
ANNOTATION_CANDIDATE_TEST_ACCURACY = keys.key("candidate-test-accuracy")
ANNOTATION_CANDIDATE_MODEL_URI = keys.key("candidate-model-uri")
ANNOTATION_PREVIOUS_MODEL_URI = keys.key("previous-model-uri")
CANARY_ANNOTATIONS = (
    ANNOTATION_CANDIDATE_TEST_ACCURACY,
    ANNOTATION_CANDIDATE_MODEL_URI,
    ANNOTATION_PREVIOUS_MODEL_URI,
)
# Set by a Serverless rollback: the rejected model and the generation of its canary write. It
# makes the rollback's revision template differ from every earlier one (rollout_serverless).
ANNOTATION_ROLLED_BACK = keys.key("rolled-back")
# serve_early's claim as the previous version wrote it, on the InferenceService: read only where
# no claim ConfigMap exists (serving/deploy/kserve_promotion). Annotations reach the revision and
# pod templates, so a claim written there restarted the model: the claim is a ConfigMap now.
ANNOTATION_EARLY_VALIDATION_ACCURACY = keys.key("early-validation-accuracy")
ANNOTATION_EARLY_MODEL_URI = keys.key("early-model-uri")
ANNOTATION_EARLY_MODEL_TYPE = keys.key("early-model-type")
MODEL_ANNOTATIONS = (ANNOTATION_TEST_ACCURACY, ANNOTATION_MODEL_URI, *CANARY_ANNOTATIONS,
                     ANNOTATION_ROLLED_BACK)


def scale(settings: ServingSettings, mode: DeploymentMode) -> tuple[str, int]:
    """The scale metric and target the mode gets: the settings', else the mode's default."""
    metric, target = DEFAULT_SCALE[mode.mode]
    return settings.scale_metric or metric, settings.scale_target or target


def scale_problems(settings: ServingSettings, mode: DeploymentMode) -> list[str]:
    """What KServe's webhook would refuse in the scaling settings, in this mode.

    The webhook picks the rules by the annotations alone (``validateAutoScalingCompExtension``,
    kserve v0.15.2 ``pkg/apis/serving/v1beta1/inference_service_validation.go`` L210-230;
    v0.20.0 L446-466): Serverless → Knative's KPA (L406-428: concurrency or rps, rps needs a
    target of at least 1); Standard with ``autoscalerClass: hpa``, which we set → the HPA
    (L291-329: cpu or memory; ``metric == cpu && target < 1 || target > 100`` fails, so a
    memory target above 100 fails too; memory below 1 fails)."""
    metric, target = scale(settings, mode)
    if mode.serverless:
        if metric not in KPA_SCALE_METRICS:
            return [f"scale_metric={metric!r} cannot scale a Serverless InferenceService: "
                    f"Knative's autoscaler takes {' or '.join(KPA_SCALE_METRICS)} (KServe's "
                    f"webhook answers '[{metric}] is not a supported metric'); use "
                    "concurrency, or run in Standard mode (deployment_mode)"]
        return []
    if metric not in HPA_SCALE_METRICS:
        return [f"scale_metric={metric!r} cannot scale a Standard-mode InferenceService: its "
                f"HPA takes {' or '.join(HPA_SCALE_METRICS)} (KServe's webhook answers "
                f"'[{metric}] is not a supported metric'); use cpu, or leave it empty"]
    if (metric == "cpu" and target < 1) or target > 100:
        return [f"scale_target={target} for {metric}: KServe's webhook wants a utilization "
                "percentage in 1..100 ('the target utilization percentage should be a "
                "[1-100] integer'); e.g. 80"]
    return []


def container_resources(settings: KServeSettings):
    """Requests equal to limits (Guaranteed QoS) for the predictor container."""
    from kubernetes import client

    limits = {"cpu": settings.cpu, "memory": settings.memory}
    return client.V1ResourceRequirements(requests=dict(limits), limits=limits)


def readiness_path(settings: KServeSettings, model_name: str) -> str:
    """Where a replica says its model is loaded: V2 ``/v2/models/<name>/ready`` on our runtime
    (503 until then: kserve SDK 0.21 ``protocol/rest/v2_endpoints.py`` L274-285), TF Serving's
    model status ``/v1/models/<name>`` on the other."""
    if settings.runtime == TENSORFLOW_RUNTIME:
        return f"/v1/models/{model_name}"
    return f"/v2/models/{model_name}/ready"


def candidate_name(name: str, storage_uri: str) -> str:
    """The Standard-mode candidate of the model at ``storage_uri`` on InferenceService
    ``name``: ``<name>-c`` and the first hex digits of the URI's SHA-256, as long as
    ``<name>-canary`` (a DNS-1035 label: it ends in a hex digit)."""
    import hashlib

    digest = hashlib.sha256(storage_uri.encode()).hexdigest()[:CANDIDATE_HASH_DIGITS]
    return f"{name}{CANDIDATE_MARK}{digest}"


def build_inference_service(
    settings: KServeSettings,
    *,
    storage_uri: str,
    annotations: dict[str, str] | None = None,
    canary_traffic_percent: int | None = None,
    mode: DeploymentMode = SERVERLESS_MODE,
    name: str | None = None,
):
    """The ``V1beta1InferenceService`` serving ``storage_uri`` in ``mode``, named ``name``
    (default: ``settings.name``; the Standard-mode candidate is another name).

    ``canary_traffic_percent`` (Serverless only): None rolls the model out to all traffic (and
    promotes a canary); 1..99 sends that share to it and the rest to the last rolled-out
    revision; 0 pins all traffic to the last rolled-out revision (a rollback).
    """
    import kserve
    from kubernetes import client

    settings.validate()
    storage_uri = check_storage_uri(storage_uri)
    name = name or settings.name
    if canary_traffic_percent is not None and not 0 <= canary_traffic_percent <= 99:
        raise UserInputError(
            f"canary traffic percent {canary_traffic_percent} must be in 0..99 (0 rolls back, "
            "None promotes)"
        )
    if canary_traffic_percent is not None and not mode.serverless:
        raise UserInputError("canaryTrafficPercent is read only in Serverless mode (kserve "
                             "#5335); Standard mode rolls out through a candidate")
    problems = scale_problems(settings, mode)
    if problems:
        raise UserInputError("; ".join(problems))
    scale_metric, scale_target = scale(settings, mode)
    batcher = None
    if settings.runtime == TENSORFLOW_RUNTIME:
        batcher = kserve.V1beta1Batcher(max_batch_size=settings.max_batch_size,
                                        max_latency=int(settings.max_batch_latency_ms))
    probe = strategy = None
    kind_annotations: dict[str, str] = {}
    if mode.serverless:
        kind_annotations[TAG_ROUTING_ANNOTATION] = "true"
    else:
        kind_annotations[AUTOSCALER_CLASS_ANNOTATION] = "hpa"
        probe = client.V1Probe(
            http_get=client.V1HTTPGetAction(path=readiness_path(settings, name),
                                            port=HTTP_PORT),
            period_seconds=5, failure_threshold=3)
        strategy = client.V1DeploymentStrategy(
            type="RollingUpdate",
            rolling_update=client.V1RollingUpdateDeployment(max_unavailable=0, max_surge=1))
    if mode.annotation:
        kind_annotations[MODE_ANNOTATION] = mode.annotation
    model = kserve.V1beta1ModelSpec(
        name=None,  # the runtime's container name
        model_format=kserve.V1beta1ModelFormat(name="tensorflow", version="2"),
        runtime=settings.runtime_name,
        protocol_version="v1",  # what the book's clients call; our runtime also serves v2
        storage_uri=storage_uri,
        resources=container_resources(settings),
        readiness_probe=probe,
    )
    predictor = kserve.V1beta1PredictorSpec(
        min_replicas=settings.min_replicas,
        max_replicas=settings.max_replicas,
        scale_metric=scale_metric,
        scale_target=scale_target,
        canary_traffic_percent=canary_traffic_percent,
        deployment_strategy=strategy,
        service_account_name=settings.service_account or None,
        batcher=batcher,
        model=model,
    )
    labels = dict(PART_OF_LABEL)
    if name != settings.name:
        labels[ROLE_LABEL] = "candidate"
    return kserve.V1beta1InferenceService(
        api_version=API_VERSION,
        kind=KIND,
        metadata=client.V1ObjectMeta(
            name=name,
            namespace=settings.target_namespace,
            labels=labels,
            annotations={**kind_annotations, **(annotations or {})},
        ),
        spec=kserve.V1beta1InferenceServiceSpec(predictor=predictor),
    )


# -- what our annotations say about a served InferenceService ---------------------------------


def annotations_of(isvc: dict) -> dict[str, str]:
    return dict((isvc.get("metadata") or {}).get("annotations") or {})


def model_uri_of(isvc: dict) -> str | None:
    """The model the stable (rolled-out) revision serves: our annotation, else the spec (when
    no canary is out)."""
    annotated = annotations_of(isvc).get(ANNOTATION_MODEL_URI)
    if annotated:
        return annotated
    predictor = ((isvc.get("spec") or {}).get("predictor")) or {}
    if predictor.get("canaryTrafficPercent") is None:
        return (predictor.get("model") or {}).get("storageUri")
    return None


def served_accuracy(isvc: dict) -> tuple[float | None, str]:
    """The served model's test accuracy and, when it is unknown, why."""
    value = annotations_of(isvc).get(ANNOTATION_TEST_ACCURACY)
    if value is None:
        return None, f"annotation {ANNOTATION_TEST_ACCURACY} is missing"
    try:
        accuracy = float(value)
    except ValueError:
        return None, f"annotation {ANNOTATION_TEST_ACCURACY}={value!r} is not a number"
    if not 0.0 <= accuracy <= 1.0:
        return None, f"annotation {ANNOTATION_TEST_ACCURACY}={value!r} is not in [0, 1]"
    return accuracy, ""


def format_accuracy(value: float) -> str:
    return f"{value:.6f}"


def merged_metadata(current: dict, built: dict) -> dict:
    """``current``'s metadata (resourceVersion, finalizers, others' labels and annotations)
    with our labels and annotations laid over it; our model annotations are replaced as a
    set."""
    metadata = {key: value for key, value in (current.get("metadata") or {}).items()
                if key != "managedFields"}
    annotations = {key: value for key, value in (metadata.get("annotations") or {}).items()
                   if key not in MODEL_ANNOTATIONS}
    metadata["annotations"] = {**annotations, **(built.get("annotations") or {})}
    metadata["labels"] = {**(metadata.get("labels") or {}), **(built.get("labels") or {})}
    return metadata
