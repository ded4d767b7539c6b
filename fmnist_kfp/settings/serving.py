"""Serving settings: the deploy decision (blessing, verification, prediction) and the
InferenceService (the ``serving`` parameter; batching also applies to the local predictor)."""

from __future__ import annotations

from dataclasses import dataclass

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.settings.names import (
    DNS_1123_SUBDOMAIN,
    image_problem,
    is_dns_1035_label,
    is_dns_1123_subdomain,
    namespace_rule,
    quantity_rule,
)
from fmnist_kfp.settings.schema import Settings, at_least, raising, setting

FMNIST_RUNTIME = "fmnist-predictor"  # our ServingRuntime, and the settings value choosing it
TENSORFLOW_RUNTIME = "tensorflow"  # the settings value choosing KServe's TF Serving runtime
SERVING_RUNTIMES = (FMNIST_RUNTIME, TENSORFLOW_RUNTIME)
TF_SERVING_RUNTIME = "kserve-tensorflow-serving"  # KServe's ClusterServingRuntime for it
# The ServingRuntime (or ClusterServingRuntime) each settings value names.
RUNTIMES = {FMNIST_RUNTIME: FMNIST_RUNTIME, TENSORFLOW_RUNTIME: TF_SERVING_RUNTIME}
SCALE_METRICS = ("concurrency", "rps", "cpu", "memory")
# KServe's webhook: Knative's autoscaler (KPA) takes concurrency or rps, the HPA of Standard
# mode cpu or memory (kserve v0.15.2 pkg/constants/constants.go L215-232).
KPA_SCALE_METRICS = ("concurrency", "rps")
HPA_SCALE_METRICS = ("cpu", "memory")
# Derived, not a KServe rule (KServe's webhook has no length limit): in Serverless mode the
# canary's tag host "latest-<name>-predictor" must fit a 63-character DNS label (62 at 45), and
# in Standard mode each promotion's candidate "<name>-c<5 hex digits>" (7 characters, as
# fmnist_kfp.kubernetes.inference_service.candidate_name makes it) gets the Deployment label
# value "isvc.<candidate>-predictor" (kserve v0.15.2 pkg/constants/constants.go L538-540), which
# must fit the 63 characters of a label value: 41 keeps both.
MAX_SERVICE_NAME_LENGTH = 41
# How KServe spells its modes: "Serverless"/"RawDeployment" up to 0.15, "Knative"/"Standard"
# from 0.16 (which still reads the old names; kserve v0.20.0 pkg/constants/constants.go
# L561-587). Empty: the InferenceService's own mode, else the cluster's default.
DEPLOYMENT_MODES = ("", "Serverless", "Knative", "RawDeployment", "Standard")
# The ServiceAccount (and its Secret) that manifests/serving-credentials creates: KServe's
# storage initializer reads KFP's object store with it.
KFP_STORE_SERVICE_ACCOUNT = "fmnist-serving"
STORAGE_SCHEMES = ("pvc://", "s3://", "gs://")
_BUCKET_NAME = r"^[a-z0-9][a-z0-9._-]*[a-z0-9]$"  # S3 and GCS bucket names
# What the local backend uses.
LOCAL_SERVING_KEYS = ("max_batch_size", "max_batch_latency_ms", "uncertain_margin")
TOP_CLASSES = 3  # how many classes each answer lists, most probable first


def _service_name(name: str, value: str) -> str | None:
    if not is_dns_1035_label(value, MAX_SERVICE_NAME_LENGTH):
        return (f"InferenceService name {value!r} must be a DNS-1035 label of at most "
                f"{MAX_SERVICE_NAME_LENGTH} characters (lowercase letters, digits and '-', "
                "starting with a letter), so that the names KServe derives from it (the "
                "canary's 'latest-<name>-predictor' host, a candidate's "
                "'isvc.<name>-c<5 hex digits>-predictor' label) fit; e.g. 'fashion-mnist'")
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
    serve_early: bool = setting(
        False, help="Serve the first model to finish training at once, and replace it with "
                    "each later one that is better on the validation split (an atomic "
                    "promotion: a worse model never replaces a better one); the final "
                    "selection then confirms the best, read once on the test split.")


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
    if value and value not in SCALE_METRICS:
        return (f"unknown scale metric {value!r}; KServe accepts {', '.join(SCALE_METRICS)} "
                "(concurrency or rps in Serverless mode, cpu or memory in Standard mode), or "
                "leave it empty for the mode's default")
    return None


def _scale_target(name: str, value: int) -> str | None:
    if value < 0:
        return (f"scale_target={value} must be at least 1 (e.g. 8 concurrent requests per "
                "replica), or 0 for the mode's default")
    return None


def _deployment_mode(name: str, value: str) -> str | None:
    if value not in DEPLOYMENT_MODES:
        return (f"unknown deployment mode {value!r}; use Serverless (Knative, KServe's and "
                "Kubeflow's default), RawDeployment (Standard mode on KServe up to 0.15, as "
                "Kubeflow 1.10 and 1.11 ship) or Standard (KServe 0.16 and later), or leave it "
                "empty to follow the InferenceService or the cluster's default")
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


def _margin(name: str, value: float) -> str | None:
    if not 0 <= value <= 1:
        return (f"uncertain_margin={value:g} must be in [0, 1]: it is a difference of two "
                "probabilities (0 flags nothing, 1 flags every answer)")
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
    image: str = setting("", help="Predictor image of our runtime; empty: the deploy step's "
                                  "`image` (the image the component was compiled with).")
    cpu: str = setting("1", help="CPU request and limit of each predictor replica.",
                       rules=[quantity_rule])
    memory: str = setting("2Gi", help="Memory request and limit of each predictor replica.",
                          rules=[quantity_rule])
    min_replicas: int = setting(1, help="Fewest predictor replicas (0: scale to zero).")
    max_replicas: int = setting(3, help="Most predictor replicas.")
    scale_metric: str = setting(
        "", help="Autoscaling metric: concurrency or rps (Serverless), cpu or memory (Standard);"
                 " empty: concurrency in Serverless, cpu in Standard.", rules=[_scale_metric])
    scale_target: int = setting(
        0, help="Autoscaling target per replica (in-flight requests for concurrency, percent "
                "for cpu); 0: 8 in Serverless, 80 in Standard.", rules=[_scale_target])
    deployment_mode: str = setting(
        "", help="KServe deployment mode: Serverless, RawDeployment or Standard (raw mode's "
                 "names before and from KServe 0.16); empty: the InferenceService's own, else "
                 "the cluster's default.", rules=[_deployment_mode])
    canary_traffic_percent: int = setting(
        10, help="Share of traffic a new model gets while it is verified.", rules=[_canary])
    service_account: str = setting(
        "", help="ServiceAccount whose Secret holds the storage credentials; empty: "
                 "`fmnist-serving` for models in KFP's object store, none otherwise.",
        rules=[_service_account])
    max_batch_size: int = setting(32, help="Most instances per model call (adaptive "
                                  "batching; locally too).", rules=[_batch_size])
    max_batch_latency_ms: float = setting(
        1.0, help="Longest a request waits for others to fill a batch (locally too).",
        rules=[_batch_latency])
    uncertain_margin: float = setting(
        0.2, help="An answer whose two most probable classes are closer than this is flagged "
                  "`uncertain`, for a client to route the image to a person (locally too).",
        rules=[_margin])
    ready_timeout_seconds: float = setting(
        600.0, help="How long a new revision (or candidate) may take to become Ready.",
        rules=[_ready_timeout])

    @property
    def predictor_image(self) -> str:
        """The ServingRuntime's image: ``image``, into which the deploy step merges its own
        ``image`` input when the ``serving`` parameter names none."""
        if not self.image:
            raise UserInputError(
                "no predictor image: give the deploy step's image input (a compiled component "
                "defaults it to the image it was compiled with) or serving.image")
        return self.image

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
        problem = self.image and image_problem(self.image)
        if self.runtime == FMNIST_RUNTIME and problem:
            problems.append(f"predictor image {self.image!r} {problem}")
        if self.runtime == TENSORFLOW_RUNTIME and (
                self.max_batch_latency_ms < 1
                or int(self.max_batch_latency_ms) != self.max_batch_latency_ms):
            problems.append(
                f"max_batch_latency_ms={self.max_batch_latency_ms:g}: KServe's batcher takes a "
                "whole number of milliseconds, at least 1")
        return problems

    def local_problems(self) -> list[str]:
        """What the local backend uses of these settings: the batching, the margin."""
        return [p for p in (_batch_size("", self.max_batch_size),
                            _batch_latency("", self.max_batch_latency_ms),
                            _margin("", self.uncertain_margin)) if p]

    def local_server_args(self, given: dict) -> list[str]:
        """The local predictor's flags for the batching keys the user gave."""
        return [f"--{key}={getattr(self, key):g}" for key in LOCAL_SERVING_KEYS if key in given]


@dataclass
class KServeSettings(ServingSettings):
    """One InferenceService: its name (the pipeline's ``model_name``) and the ``serving``
    settings."""

    name: str = DeploySettings().model_name

    @property
    def target_namespace(self) -> str:
        """``namespace``, else the namespace this step's pod runs in, else ``default`` (off a
        cluster): KServe's rule (``kserve.utils.utils.get_default_target_namespace``), read
        without importing KServe, which the settings may not."""
        from fmnist_kfp.settings.jobs import step_namespace

        return self.namespace or step_namespace() or "default"

    @property
    def runtime_name(self) -> str:
        """The ServingRuntime (or ClusterServingRuntime) the predictor names."""
        return RUNTIMES[self.runtime]

    def cross_problems(self) -> list[str]:
        named = DeploySettings(model_name=self.name).problems()
        return named + super().cross_problems()
