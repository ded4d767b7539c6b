"""KServe manifests for the Fashion-MNIST classifier, built from the kserve SDK's models.

Two runtimes serve the exported SavedModel (``<model>/1/``):

* ``fmnist-predictor``: our predictor image (``python -m serving.model_server.server``),
  declared by the namespaced ``ServingRuntime`` that :func:`build_serving_runtime` writes. It
  speaks the V1 and V2 protocols and batches requests itself (``--max_batch_size``,
  ``--max_batch_latency_ms``).
* ``tensorflow``: KServe's TF Serving ``ClusterServingRuntime`` ``kserve-tensorflow-serving``
  (V1 only, as the reference book deploys it); batching goes through KServe's batcher sidecar.

KServe's storage initializer fetches ``storageUri`` into ``/mnt/models``. Object-store
credentials come from the Secret of the predictor's ServiceAccount (``service_account``); they
never go into the spec.

The InferenceService carries the model it serves in annotations (see ``ANNOTATION_*``), which the
rollout (``serving.deploy.kubernetes``) reads to bless a candidate against the serving model. In
Serverless mode KServe copies InferenceService annotations into the Knative revision template,
so changing them rolls a new revision (KServe's canary guide notes the same for tag routing).
"""

from __future__ import annotations

from dataclasses import dataclass

from fmnist.errors import UserInputError
from fmnist.settings.serving import (
    FMNIST_RUNTIME,
    TENSORFLOW_RUNTIME,
    DeploySettings,
    ServingSettings,
    check_storage_uri,
)

API_VERSION = "serving.kserve.io/v1beta1"
KIND = "InferenceService"
RUNTIME_API_VERSION = "serving.kserve.io/v1alpha1"

TF_SERVING_RUNTIME = "kserve-tensorflow-serving"  # KServe's ClusterServingRuntime for it
RUNTIMES = {FMNIST_RUNTIME: FMNIST_RUNTIME, TENSORFLOW_RUNTIME: TF_SERVING_RUNTIME}
CONTAINER_NAME = "kserve-container"
MODEL_MOUNT = "/mnt/models"  # where KServe's storage initializer puts the model
HTTP_PORT = 8080
PART_OF_LABEL = {"app.kubernetes.io/part-of": "fmnist-kfp"}

TAG_ROUTING_ANNOTATION = "serving.kserve.io/enable-tag-routing"
# The model the stable (rolled-out) revision serves.
ANNOTATION_TEST_ACCURACY = "fmnist.kubeflow.org/test-accuracy"
ANNOTATION_MODEL_URI = "fmnist.kubeflow.org/model-uri"
# Set only while a canary is in progress.
ANNOTATION_CANDIDATE_TEST_ACCURACY = "fmnist.kubeflow.org/candidate-test-accuracy"
ANNOTATION_CANDIDATE_MODEL_URI = "fmnist.kubeflow.org/candidate-model-uri"
ANNOTATION_PREVIOUS_MODEL_URI = "fmnist.kubeflow.org/previous-model-uri"
CANARY_ANNOTATIONS = (
    ANNOTATION_CANDIDATE_TEST_ACCURACY,
    ANNOTATION_CANDIDATE_MODEL_URI,
    ANNOTATION_PREVIOUS_MODEL_URI,
)
MODEL_ANNOTATIONS = (ANNOTATION_TEST_ACCURACY, ANNOTATION_MODEL_URI, *CANARY_ANNOTATIONS)


@dataclass
class KServeSettings(ServingSettings):
    """One InferenceService: its name (the pipeline's ``model_name``) and the ``serving``
    settings."""

    name: str = DeploySettings().model_name

    @property
    def target_namespace(self) -> str:
        if self.namespace:
            return self.namespace
        from kserve.utils.utils import get_default_target_namespace

        return get_default_target_namespace()

    @property
    def runtime_name(self) -> str:
        """The ServingRuntime (or ClusterServingRuntime) the predictor names."""
        return RUNTIMES[self.runtime]

    def cross_problems(self) -> list[str]:
        named = DeploySettings(model_name=self.name).problems()
        return named + super().cross_problems()


def _resources(settings: KServeSettings):
    from kubernetes import client

    limits = {"cpu": settings.cpu, "memory": settings.memory}
    return client.V1ResourceRequirements(requests=dict(limits), limits=limits)


def predictor_args(settings: KServeSettings) -> list[str]:
    """The arguments ``python -m serving.model_server.server`` gets in our runtime's container."""
    return [
        f"--model_dir={MODEL_MOUNT}",
        "--model_name={{.Name}}",  # KServe fills in the InferenceService's name
        "--host=0.0.0.0",
        f"--http_port={HTTP_PORT}",
        f"--max_batch_size={settings.max_batch_size}",
        f"--max_batch_latency_ms={settings.max_batch_latency_ms:g}",
    ]


def build_serving_runtime(settings: KServeSettings):
    """The namespaced ``ServingRuntime`` ``fmnist-predictor``: our predictor image serving
    TensorFlow SavedModels over the V1 and V2 protocols."""
    import kserve
    from kubernetes import client

    settings.validate()
    container = client.V1Container(
        name=CONTAINER_NAME,
        image=settings.predictor_image,
        command=["python", "-m", "serving.model_server.server"],
        args=predictor_args(settings),
        resources=_resources(settings),
        ports=[client.V1ContainerPort(container_port=HTTP_PORT, protocol="TCP")],
    )
    return kserve.V1alpha1ServingRuntime(
        api_version=RUNTIME_API_VERSION,
        kind="ServingRuntime",
        metadata=client.V1ObjectMeta(
            name=FMNIST_RUNTIME, namespace=settings.target_namespace, labels=dict(PART_OF_LABEL)
        ),
        spec=kserve.V1alpha1ServingRuntimeSpec(
            supported_model_formats=[
                kserve.V1alpha1SupportedModelFormat(name="tensorflow", version="2",
                                                    auto_select=False)
            ],
            protocol_versions=["v1", "v2"],
            containers=[container],
        ),
    )


def build_inference_service(
    settings: KServeSettings,
    *,
    storage_uri: str,
    annotations: dict[str, str] | None = None,
    canary_traffic_percent: int | None = None,
):
    """The ``V1beta1InferenceService`` serving ``storage_uri``.

    ``canary_traffic_percent``: None rolls the model out to all traffic (and promotes a canary);
    1..99 sends that share to it and the rest to the last rolled-out revision; 0 pins all
    traffic to the last rolled-out revision (a rollback).
    """
    import kserve
    from kubernetes import client

    settings.validate()
    storage_uri = check_storage_uri(storage_uri)
    if canary_traffic_percent is not None and not 0 <= canary_traffic_percent <= 99:
        raise UserInputError(
            f"canary traffic percent {canary_traffic_percent} must be in 0..99 (0 rolls back, "
            "None promotes)"
        )
    batcher = None
    if settings.runtime == TENSORFLOW_RUNTIME:
        batcher = kserve.V1beta1Batcher(max_batch_size=settings.max_batch_size,
                                        max_latency=int(settings.max_batch_latency_ms))
    model = kserve.V1beta1ModelSpec(
        name=None,  # the runtime's container name
        model_format=kserve.V1beta1ModelFormat(name="tensorflow", version="2"),
        runtime=settings.runtime_name,
        protocol_version="v1",  # what the book's clients call; our runtime also serves v2
        storage_uri=storage_uri,
        resources=_resources(settings),
    )
    predictor = kserve.V1beta1PredictorSpec(
        min_replicas=settings.min_replicas,
        max_replicas=settings.max_replicas,
        scale_metric=settings.scale_metric,
        scale_target=settings.scale_target,
        canary_traffic_percent=canary_traffic_percent,
        service_account_name=settings.service_account or None,
        batcher=batcher,
        model=model,
    )
    return kserve.V1beta1InferenceService(
        api_version=API_VERSION,
        kind=KIND,
        metadata=client.V1ObjectMeta(
            name=settings.name,
            namespace=settings.target_namespace,
            labels=dict(PART_OF_LABEL),
            annotations={TAG_ROUTING_ANNOTATION: "true", **(annotations or {})},
        ),
        spec=kserve.V1beta1InferenceServiceSpec(predictor=predictor),
    )


def to_manifest(obj) -> dict:
    """The JSON the API server receives (camelCase keys, no nulls)."""
    from kubernetes.client import ApiClient

    return ApiClient().sanitize_for_serialization(obj)
