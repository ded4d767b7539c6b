"""Serving settings: the deploy decision (blessing, verification, prediction) and the
InferenceService (the ``serving`` parameter; batching also applies to the local predictor)."""

from __future__ import annotations

from dataclasses import dataclass

from fmnist.errors import UserInputError
from fmnist.settings.names import (
    DNS_1123_SUBDOMAIN,
    has_tag,
    is_dns_1035_label,
    is_dns_1123_subdomain,
    namespace_rule,
    quantity_rule,
)
from fmnist.settings.schema import Settings, at_least, raising, setting

FMNIST_RUNTIME = "fmnist-predictor"  # our ServingRuntime, and the settings value choosing it
TENSORFLOW_RUNTIME = "tensorflow"  # the settings value choosing KServe's TF Serving runtime
SERVING_RUNTIMES = (FMNIST_RUNTIME, TENSORFLOW_RUNTIME)
SCALE_METRICS = ("concurrency", "rps", "cpu", "memory")
# "latest-<name>-predictor" (the canary's tag host) must fit a 63-character DNS label.
MAX_SERVICE_NAME_LENGTH = 45
STORAGE_SCHEMES = ("pvc://", "s3://", "gs://")
_BUCKET_NAME = r"^[a-z0-9][a-z0-9._-]*[a-z0-9]$"  # S3 and GCS bucket names
LOCAL_SERVING_KEYS = ("max_batch_size", "max_batch_latency_ms")  # what the local backend uses


def _service_name(name: str, value: str) -> str | None:
    if not is_dns_1035_label(value, MAX_SERVICE_NAME_LENGTH):
        return (f"InferenceService name {value!r} must be a DNS-1035 label of at most "
                f"{MAX_SERVICE_NAME_LENGTH} characters (lowercase letters, digits and '-', "
                "starting with a letter), so that KServe's 'latest-<name>-predictor' host fits a "
                "DNS label; e.g. 'fashion-mnist'")
    return None


def _tolerance(name: str, value: float) -> str | None:
    if not 0.0 <= value <= 1.0:
        return (f"blessing tolerance {value} is not an accuracy difference in [0, 1]; use e.g. "
                "0.005 to accept a model at most half a point worse than the served one")
    return None


def check_tolerance(tolerance: float) -> None:
    problem = _tolerance("blessing_tolerance", tolerance)
    if problem:
        raise UserInputError(problem)


@dataclass
class DeploySettings(Settings):
    """What the deploy and predict steps decide and measure."""

    WHAT = "deploy settings"

    model_name: str = setting("fashion-mnist", help="The served model's (and its "
                              "InferenceService's) name.", rules=[_service_name])
    blessing_tolerance: float = setting(
        0.005, help="Deploy only when the new model's test accuracy is at least the serving "
                    "model's minus this.", rules=[_tolerance])
    verification_images: int = setting(
        200, help="Test images a new server must answer as the model does before it takes "
                  "traffic.", rules=[at_least(1)])
    prediction_images: int = setting(
        1000, help="Test images the predict step sends to the served model over HTTP.",
        rules=[at_least(1)])


def check_storage_uri(uri: str) -> str:
    """The model's URI if KServe's storage initializer can fetch it for us, else UserInputError.

    Accepted: ``pvc://<claim>/<path>``, ``s3://<bucket>[/<path>]``, ``gs://<bucket>[/<path>]``.
    """
    import re

    text = (uri or "").strip()
    if not text.startswith(STORAGE_SCHEMES) or any(c.isspace() for c in text):
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
    pattern = DNS_1123_SUBDOMAIN if scheme == "pvc" else re.compile(_BUCKET_NAME)
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


def _storage_uri(name: str, value: str) -> str | None:
    return raising(check_storage_uri)(name, value) if value else None


def _runtime(name: str, value: str) -> str | None:
    if value not in SERVING_RUNTIMES:
        return (f"unknown serving runtime {value!r}; use {FMNIST_RUNTIME!r} (our predictor, V1 "
                f"and V2 protocols) or {TENSORFLOW_RUNTIME!r} (TF Serving, V1 only)")
    return None


def _service_account(name: str, value: str) -> str | None:
    if value and not is_dns_1123_subdomain(value):
        return (f"service account {value!r} is not a Kubernetes object name; give the name of "
                "the ServiceAccount whose Secret holds the storage credentials")
    return None


def _scale_metric(name: str, value: str) -> str | None:
    if value not in SCALE_METRICS:
        return (f"unknown scale metric {value!r}; KServe accepts {', '.join(SCALE_METRICS)} "
                "(concurrency: in-flight requests per replica)")
    return None


def _scale_target(name: str, value: int) -> str | None:
    if value < 1:
        return (f"scale_target={value} must be at least 1 (e.g. 8 concurrent requests per "
                "replica)")
    return None


def _canary(name: str, value: int) -> str | None:
    if not 1 <= value <= 99:
        return (f"canary_traffic_percent={value} must be in 1..99: the share of traffic the new "
                "model gets while it is verified (0 would send it nothing, 100 would skip the "
                "canary); e.g. 10")
    return None


def _batch_size(name: str, value: int) -> str | None:
    return f"max_batch_size={value} must be at least 1 (1: no batching)" if value < 1 else None


def _batch_latency(name: str, value: float) -> str | None:
    if value < 0:
        return (f"max_batch_latency_ms={value:g} must not be negative; it is how long a request "
                "may wait for others to fill a batch, e.g. 2")
    return None


def _ready_timeout(name: str, value: float) -> str | None:
    if not value > 0:
        return (f"ready_timeout_seconds={value:g} must be positive; pulling the image and the "
                "model can take minutes, so 600 is a sensible value")
    return None


@dataclass
class ServingSettings(Settings):
    """Where and how the InferenceService runs: the ``serving`` parameter."""

    WHAT = "serving settings"

    runtime: str = setting(
        FMNIST_RUNTIME, help=f"`{FMNIST_RUNTIME}` (our predictor: V1 and V2, our batching) or "
                             f"`{TENSORFLOW_RUNTIME}` (TF Serving, V1, KServe's batcher).",
        rules=[_runtime])
    storage_uri: str = setting(
        "", help="Where KServe fetches the model (`pvc://`, `s3://`, `gs://`); empty: the model "
                 "artifact's own URI.", rules=[_storage_uri])
    namespace: str = setting("", help="Namespace of the InferenceService; empty: the step's.",
                             rules=[namespace_rule])
    image: str = setting("", help="Predictor image of our runtime; empty: the component image.")
    cpu: str = setting("1", help="CPU request and limit of each predictor replica.",
                       rules=[quantity_rule])
    memory: str = setting("2Gi", help="Memory request and limit of each predictor replica.",
                          rules=[quantity_rule])
    min_replicas: int = setting(1, help="Fewest predictor replicas (0: scale to zero).")
    max_replicas: int = setting(3, help="Most predictor replicas.")
    scale_metric: str = setting("concurrency", help="Autoscaling metric: " +
                                ", ".join(SCALE_METRICS) + ".", rules=[_scale_metric])
    scale_target: int = setting(8, help="Autoscaling target per replica (e.g. in-flight "
                                "requests for concurrency).", rules=[_scale_target])
    canary_traffic_percent: int = setting(
        10, help="Share of traffic a new model gets while it is verified.", rules=[_canary])
    service_account: str = setting(
        "", help="ServiceAccount whose Secret holds the storage credentials.",
        rules=[_service_account])
    max_batch_size: int = setting(32, help="Most instances per model call (adaptive "
                                  "batching; locally too).", rules=[_batch_size])
    max_batch_latency_ms: float = setting(
        1.0, help="Longest a request waits for others to fill a batch (locally too).",
        rules=[_batch_latency])
    ready_timeout_seconds: float = setting(
        600.0, help="How long a new revision may take to become Ready.", rules=[_ready_timeout])

    @property
    def predictor_image(self) -> str:
        if self.image:
            return self.image
        from fmnist.settings.platform import component_image

        return component_image()

    def cross_problems(self) -> list[str]:
        problems = []
        if self.min_replicas < 0 or self.max_replicas < 1:
            problems.append(
                f"replicas min={self.min_replicas} max={self.max_replicas}: min_replicas must be "
                ">= 0 (0 lets the predictor scale to zero) and max_replicas >= 1")
        elif self.min_replicas > self.max_replicas:
            problems.append(
                f"min_replicas={self.min_replicas} is greater than max_replicas="
                f"{self.max_replicas}; raise max_replicas or lower min_replicas")
        if self.runtime == FMNIST_RUNTIME and not has_tag(self.predictor_image):
            image = self.predictor_image
            problems.append(f"predictor image {image!r} has no tag; pin one (e.g. {image}:0.1.0)"
                            " so every replica serves with the same code")
        if self.runtime == TENSORFLOW_RUNTIME and (
                self.max_batch_latency_ms < 1
                or int(self.max_batch_latency_ms) != self.max_batch_latency_ms):
            problems.append(
                f"max_batch_latency_ms={self.max_batch_latency_ms:g}: KServe's batcher takes a "
                "whole number of milliseconds, at least 1")
        return problems

    def local_problems(self) -> list[str]:
        """What the local backend uses of these settings: the batching."""
        return [p for p in (_batch_size("", self.max_batch_size),
                            _batch_latency("", self.max_batch_latency_ms)) if p]

    def local_server_args(self, given: dict) -> list[str]:
        """The local predictor's flags for the batching keys the user gave."""
        return [f"--{key}={getattr(self, key):g}" for key in LOCAL_SERVING_KEYS if key in given]
