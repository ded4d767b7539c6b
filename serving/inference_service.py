"""KServe manifests for the Fashion-MNIST classifier, built from the kserve SDK's models.

Two runtimes serve the exported SavedModel (``<model>/1/``):

* ``fmnist-predictor``: our predictor image (``python -m serving.server``), declared by the
  namespaced ``ServingRuntime`` :func:`build_serving_runtime` writes. It speaks the V1 and V2
  protocols and batches requests itself (``--max_batch_size``/``--max_batch_latency_ms``).
* ``tensorflow``: KServe's TF Serving ``ClusterServingRuntime`` ``kserve-tensorflow-serving``
  (V1 only, as the reference book deploys it); batching goes through KServe's batcher sidecar.

KServe's storage initializer fetches ``storageUri`` into ``/mnt/models``. Object-store
credentials come from the Secret of the predictor's ServiceAccount (``service_account``); they
never go into the spec.

The InferenceService carries the model it serves in annotations (see ``ANNOTATION_*``), which the
rollout (``serving.kserve_rollout``) reads to bless a candidate against the serving model. In
Serverless mode KServe copies InferenceService annotations into the Knative revision template,
so changing them rolls a new revision (KServe's canary guide notes the same for tag routing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fmnist.errors import UserInputError

API_VERSION = "serving.kserve.io/v1beta1"
KIND = "InferenceService"
RUNTIME_API_VERSION = "serving.kserve.io/v1alpha1"

FMNIST_RUNTIME = "fmnist-predictor"  # our ServingRuntime, and the settings value choosing it
TENSORFLOW_RUNTIME = "tensorflow"  # the settings value choosing KServe's TF Serving runtime
TF_SERVING_RUNTIME = "kserve-tensorflow-serving"  # KServe's ClusterServingRuntime for it
RUNTIMES = {FMNIST_RUNTIME: FMNIST_RUNTIME, TENSORFLOW_RUNTIME: TF_SERVING_RUNTIME}
SCALE_METRICS = ("concurrency", "rps", "cpu", "memory")
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

# "latest-<name>-predictor" (the canary's tag host) must fit a 63-character DNS label.
MAX_NAME_LENGTH = 45
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]*[a-z0-9]$")  # S3 and GCS bucket names
# The pattern Kubernetes CRDs give resource quantities.
_QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_STORAGE_SCHEMES = ("pvc://", "s3://", "gs://")


@dataclass
class KServeSettings:
    """Where and how the InferenceService runs."""

    name: str = "fashion-mnist"
    namespace: str = ""  # empty: the namespace this process runs in (or "default")
    runtime: str = FMNIST_RUNTIME  # or "tensorflow" (TF Serving, V1 protocol only)
    image: str = ""  # our predictor image; empty: the component image
    cpu: str = "1"
    memory: str = "2Gi"
    min_replicas: int = 1
    max_replicas: int = 3
    scale_metric: str = "concurrency"
    scale_target: int = 8
    canary_traffic_percent: int = 10
    service_account: str = ""  # whose Secret holds the s3/gs credentials
    max_batch_size: int = 32
    max_batch_latency_ms: int = 1
    ready_timeout_seconds: float = 600

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

    @property
    def predictor_image(self) -> str:
        if self.image:
            return self.image
        from fmnist.settings import component_image

        return component_image()

    def validate(self) -> KServeSettings:
        self._validate_names()
        self._validate_runtime()
        self._validate_scaling()
        self._validate_batching()
        if not self.ready_timeout_seconds > 0:
            raise UserInputError(
                f"ready_timeout_seconds={self.ready_timeout_seconds} must be positive; pulling "
                "the image and the model can take minutes, so 600 is a sensible value"
            )
        return self

    def _validate_names(self) -> None:
        if len(self.name) > MAX_NAME_LENGTH or not _DNS_1035.match(self.name):
            raise UserInputError(
                f"InferenceService name {self.name!r} must be a DNS-1035 label of at most "
                f"{MAX_NAME_LENGTH} characters (lowercase letters, digits and '-', starting with "
                "a letter), so that KServe's 'latest-<name>-predictor' host fits a DNS label; "
                "e.g. 'fashion-mnist'"
            )
        if self.namespace and (len(self.namespace) > 63
                               or not _DNS_1123_LABEL.match(self.namespace)):
            raise UserInputError(
                f"namespace {self.namespace!r} is not a Kubernetes namespace name (lowercase "
                "letters, digits and '-', at most 63 characters); leave it empty to use the "
                "namespace this step runs in"
            )
        if self.service_account and (len(self.service_account) > 253
                                     or not _DNS_1123_SUBDOMAIN.match(self.service_account)):
            raise UserInputError(
                f"service account {self.service_account!r} is not a Kubernetes object name; "
                "give the name of the ServiceAccount whose Secret holds the storage credentials"
            )

    def _validate_runtime(self) -> None:
        if self.runtime not in RUNTIMES:
            raise UserInputError(
                f"unknown serving runtime {self.runtime!r}; use {FMNIST_RUNTIME!r} (our "
                f"predictor, V1 and V2 protocols) or {TENSORFLOW_RUNTIME!r} (TF Serving, V1 only)"
            )
        for what, value in (("cpu", self.cpu), ("memory", self.memory)):
            if not _QUANTITY.match(str(value)):
                raise UserInputError(
                    f"{what} {value!r} is not a Kubernetes quantity; use e.g. cpu '1' or '500m', "
                    "memory '2Gi'"
                )
        if self.runtime == FMNIST_RUNTIME:
            image = self.predictor_image
            if ":" not in image.rsplit("/", 1)[-1] and "@sha256:" not in image:
                raise UserInputError(
                    f"predictor image {image!r} has no tag; pin one (e.g. {image}:0.1.0) so "
                    "every replica serves with the same code"
                )

    def _validate_scaling(self) -> None:
        if self.scale_metric not in SCALE_METRICS:
            raise UserInputError(
                f"unknown scale metric {self.scale_metric!r}; KServe accepts "
                f"{', '.join(SCALE_METRICS)} (concurrency: in-flight requests per replica)"
            )
        if self.scale_target < 1:
            raise UserInputError(
                f"scale_target={self.scale_target} must be at least 1 (e.g. 8 concurrent "
                "requests per replica)"
            )
        if self.min_replicas < 0 or self.max_replicas < 1:
            raise UserInputError(
                f"replicas min={self.min_replicas} max={self.max_replicas}: min_replicas must be "
                ">= 0 (0 lets the predictor scale to zero) and max_replicas >= 1"
            )
        if self.min_replicas > self.max_replicas:
            raise UserInputError(
                f"min_replicas={self.min_replicas} is greater than max_replicas="
                f"{self.max_replicas}; raise max_replicas or lower min_replicas"
            )
        if not 1 <= self.canary_traffic_percent <= 99:
            raise UserInputError(
                f"canary_traffic_percent={self.canary_traffic_percent} must be in 1..99: the "
                "share of traffic the new model gets while it is verified (0 would send it "
                "nothing, 100 would skip the canary); e.g. 10"
            )

    def _validate_batching(self) -> None:
        if self.max_batch_size < 1:
            raise UserInputError(
                f"max_batch_size={self.max_batch_size} must be at least 1 (1: no batching)"
            )
        if self.max_batch_latency_ms < 0:
            raise UserInputError(
                f"max_batch_latency_ms={self.max_batch_latency_ms} must not be negative; "
                "it is how long a request may wait for others to fill a batch, e.g. 2"
            )
        if self.runtime == TENSORFLOW_RUNTIME and (
            self.max_batch_latency_ms < 1 or int(self.max_batch_latency_ms)
            != self.max_batch_latency_ms
        ):
            raise UserInputError(
                f"max_batch_latency_ms={self.max_batch_latency_ms}: KServe's batcher takes a "
                "whole number of milliseconds, at least 1"
            )


def check_storage_uri(uri: str) -> str:
    """The model's URI if KServe's storage initializer can fetch it for us, else UserInputError.

    Accepted: ``pvc://<claim>/<path>``, ``s3://<bucket>[/<path>]``, ``gs://<bucket>[/<path>]``.
    """
    text = (uri or "").strip()
    if not text.startswith(_STORAGE_SCHEMES) or any(c.isspace() for c in text):
        hint = ""
        if text.startswith("/"):
            hint = ("; a model on the pipeline's volume is pvc://<claim>/<its path inside the "
                    "claim>, without the mount path")
        raise UserInputError(
            f"storage URI {uri!r} cannot be served: use pvc://<claim>/<path> for a model on a "
            "PersistentVolumeClaim, or s3://<bucket>/<path> / gs://<bucket>/<path> with the "
            f"credentials in a ServiceAccount (service_account=...){hint}"
        )
    scheme, rest = text.split("://", 1)
    holder, _, path = rest.partition("/")
    pattern = _DNS_1123_SUBDOMAIN if scheme == "pvc" else _BUCKET
    if not pattern.match(holder):
        what = "claim" if scheme == "pvc" else "bucket"
        raise UserInputError(
            f"storage URI {uri!r} names no valid {what}; expected {scheme}://<{what}>/<path>"
        )
    if scheme == "pvc" and not path.strip("/"):
        raise UserInputError(
            f"storage URI {uri!r} has no path inside the claim; expected "
            f"pvc://{holder}/<path to the exported model>, e.g. pvc://{holder}/models/fmnist"
        )
    return text


def _resources(settings: KServeSettings):
    from kubernetes import client

    limits = {"cpu": settings.cpu, "memory": settings.memory}
    return client.V1ResourceRequirements(requests=dict(limits), limits=limits)


def predictor_args(settings: KServeSettings) -> list[str]:
    """The arguments ``python -m serving.server`` gets in our runtime's container."""
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
        command=["python", "-m", "serving.server"],
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
