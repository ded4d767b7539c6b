"""The Kubernetes API calls of a KServe rollout, and what their failures mean.

Every call carries a timeout. An API server answers a missing object with 404 and a
``NotFound`` Status (an absent *resource type* is a bare 404 page: KServe is not installed), a
stale ``resourceVersion`` with 409 ``Conflict``, an admission webhook's refusal with the
webhook's own code and ``admission webhook "<name>" denied the request: <why>`` (KServe's
validator denies with 403), a missing permission with 403. 5xx, 429, 408, timeouts and dropped
connections are transient (:func:`fmnist_kfp.kubernetes.api_errors.is_transient`, the rule of
every caller of ours): :class:`TransientApiError`, which the rollout's waits retry (the kserve
SDK's own ``get`` retries none of them). A 401, 403 or 410 while a rollout waits leaves it
as it stands (:class:`RolloutLeftAsIs`; the remote-job runner's rule).

upstream: docs/upstream.md#kubernetes
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fmnist_kfp.errors import FmnistError
from fmnist_kfp.kubernetes.api_errors import is_transient, status_message, status_object

if TYPE_CHECKING:  # an annotation only: the result module has no need of this one
    from fmnist_kfp.serving.deploy.rollout_result import RolloutResult

GROUP = "serving.kserve.io"
ISVC_VERSION = "v1beta1"
ISVC_PLURAL = "inferenceservices"
RUNTIME_VERSION = "v1alpha1"
RUNTIME_PLURAL = "servingruntimes"
REQUEST_TIMEOUT_SECONDS = 30


class KServeRolloutError(FmnistError, RuntimeError):
    """The deployment could not complete; ``result`` holds what was done (or None)."""

    def __init__(self, message: str, result: RolloutResult | None = None):
        super().__init__(message)
        self.result = result


class ReadinessTimeout(KServeRolloutError):
    """The InferenceService did not become Ready in ``ready_timeout_seconds``."""


class RolloutLeftAsIs(KServeRolloutError):
    """A wait could not go on (the API server refused this step's reads, or did not answer for
    long) and the rollout was left as it stood, neither finished nor rolled back: the message
    says where things stand (the remote-job runner's ``JobLeftAsIs`` is its cause)."""


class TransientApiError(KServeRolloutError):
    """The API server did not answer this time (5xx, 429, a timeout, a dropped connection)."""


def retrying(read, *args, attempts: int = 5, pause_seconds: float = 1.0):
    """``read(*args)``, asked again (after ``pause_seconds`` × the attempt) while the API server
    answers transiently (:class:`TransientApiError`): for the reads before a rollout has
    anything to wait on (the InferenceService, KServe's configuration, the credentials), where
    one 503 or 429 would otherwise fail the step or be taken for an answer."""
    import time

    for attempt in range(1, attempts + 1):
        try:
            return read(*args)
        except TransientApiError:
            if attempt == attempts:
                raise
            time.sleep(pause_seconds * attempt)
    return None


class CreatedMeanwhile(KServeRolloutError):
    """Creating the InferenceService found it already there: someone else created it."""


class Conflict(FmnistError):
    """A PUT carried a stale resourceVersion, or a POST found the object already there."""


@dataclass
class KServeApi:
    """The calls one rollout makes in ``namespace``."""

    api_client: Any  # kubernetes.client.ApiClient, an untyped library's
    namespace: str

    def __post_init__(self):
        from kubernetes import client

        self.custom = client.CustomObjectsApi(self.api_client)
        self.core = client.CoreV1Api(self.api_client)
        self.apps = client.AppsV1Api(self.api_client)

    def where(self, name: str) -> str:
        return f"InferenceService {self.namespace}/{name}"

    # -- InferenceServices and ServingRuntimes ---------------------------------------------

    def get(self, name: str, *, absent_ok: bool = True) -> dict | None:
        """The InferenceService, or None when there is none (``absent_ok``; else a 404
        raises with the API server's answer in the chain)."""
        return self._call(f"read {ISVC_PLURAL}.{GROUP} {name}",
                          self.custom.get_namespaced_custom_object, GROUP, ISVC_VERSION,
                          self.namespace, ISVC_PLURAL, name, absent_ok=absent_ok)

    def create(self, body: dict) -> dict:
        return self._call(f"create {ISVC_PLURAL}.{GROUP}",
                          self.custom.create_namespaced_custom_object, GROUP, ISVC_VERSION,
                          self.namespace, ISVC_PLURAL, body, conflict_raises=True)

    def replace(self, body: dict) -> dict:
        name = body["metadata"]["name"]
        return self._call(f"update {ISVC_PLURAL}.{GROUP} {name}",
                          self.custom.replace_namespaced_custom_object, GROUP, ISVC_VERSION,
                          self.namespace, ISVC_PLURAL, name, body, conflict_raises=True)

    def delete(self, name: str) -> None:
        """Asks for the deletion; the InferenceService stays, with ``deletionTimestamp`` set,
        until KServe's controller has removed its finalizer (kserve v0.15.2
        ``pkg/controller/v1beta1/inferenceservice/controller.go`` L162-195): wait for
        :meth:`get` to answer None before creating the name again."""
        self._call(f"delete {ISVC_PLURAL}.{GROUP} {name}",
                   self.custom.delete_namespaced_custom_object, GROUP, ISVC_VERSION,
                   self.namespace, ISVC_PLURAL, name, absent_ok=True)

    def get_runtime(self, name: str) -> dict | None:
        return self._call(f"read {RUNTIME_PLURAL}.{GROUP} {name}",
                          self.custom.get_namespaced_custom_object, GROUP, RUNTIME_VERSION,
                          self.namespace, RUNTIME_PLURAL, name, absent_ok=True)

    def create_runtime(self, body: dict) -> dict:
        """POSTs the ServingRuntime; a 409 (another step created it meanwhile) raises
        :class:`Conflict`."""
        return self._call(f"create {RUNTIME_PLURAL}.{GROUP}",
                          self.custom.create_namespaced_custom_object, GROUP, RUNTIME_VERSION,
                          self.namespace, RUNTIME_PLURAL, body, conflict_raises=True)

    # -- the serve_early claim: a ConfigMap (serving/deploy/kserve_promotion) -----------------

    def get_claim(self, name: str) -> dict | None:
        return self.get_config_map(name, self.namespace)

    def create_claim(self, body: dict) -> dict:
        """POSTs the claim ConfigMap; 409 AlreadyExists raises :class:`Conflict`."""
        return self._core_write(f"create configmaps {body['metadata']['name']}",
                                self.core.create_namespaced_config_map, self.namespace, body)

    def replace_claim(self, body: dict) -> dict:
        """PUTs the claim ConfigMap with the ``resourceVersion`` it carries; a stale one (409
        Conflict) raises :class:`Conflict`."""
        name = body["metadata"]["name"]
        return self._core_write(f"update configmaps {name}",
                                self.core.replace_namespaced_config_map, name, self.namespace,
                                body)

    def _core_write(self, what: str, method, *args) -> dict:
        obj = self._call(what, method, *args, conflict_raises=True)
        return self.api_client.sanitize_for_serialization(obj)

    # -- what the rollout reads besides ------------------------------------------------------

    def get_deployment(self, name: str) -> dict | None:
        return self._core_read(f"read deployments.apps {name}",
                               self.apps.read_namespaced_deployment, name, self.namespace)

    def get_service_account(self, name: str) -> dict | None:
        return self._core_read(f"read serviceaccounts {name}",
                               self.core.read_namespaced_service_account, name, self.namespace)

    def get_secret(self, name: str) -> dict | None:
        return self._core_read(f"read secrets {name}", self.core.read_namespaced_secret, name,
                               self.namespace)

    def get_config_map(self, name: str, namespace: str) -> dict | None:
        return self._core_read(f"read configmaps {namespace}/{name}",
                               self.core.read_namespaced_config_map, name, namespace)

    def _core_read(self, what: str, method, *args) -> dict | None:
        obj = self._call(what, method, *args, absent_ok=True)
        return None if obj is None else self.api_client.sanitize_for_serialization(obj)

    # -- errors ------------------------------------------------------------------------------

    def _call(self, what: str, method, *args, absent_ok=False, conflict_raises=False):
        from kubernetes.client.rest import ApiException

        try:
            return method(*args, _request_timeout=REQUEST_TIMEOUT_SECONDS)
        except ApiException as error:
            if error.status == 404 and absent_ok and status_object(error).get("reason") == \
                    "NotFound":
                return None
            if error.status == 409 and conflict_raises:
                raise Conflict(status_message(error)) from error
            if is_transient(error):
                raise TransientApiError(f"could not {what}: HTTP {error.status} "
                                        f"{status_message(error)}") from error
            raise KServeRolloutError(self.explain(what, error)) from error
        except Exception as error:
            if is_transient(error):
                raise TransientApiError(f"could not {what}: {type(error).__name__}: "
                                        f"{error}") from error
            raise

    def explain(self, what: str, error) -> str:
        message = f"could not {what} in namespace {self.namespace}: HTTP {error.status} " \
                  f"{status_message(error)}"
        if error.status == 404 and not status_object(error):
            message += "; the API server does not serve it: is KServe installed? " \
                       "(fmnist-kfp preflight checks the cluster)"
        elif error.status == 403 and "admission webhook" in status_message(error):
            message += "; KServe's webhook refused the InferenceService"
        elif error.status in (401, 403):
            message += ("; the step's ServiceAccount lacks the permission: apply "
                        "manifests/standalone-rbac (standalone KFP) or check the profile's "
                        "default-editor (fmnist-kfp preflight lists every permission)")
        elif error.status == 409:
            message += "; another client created it at the same time: run the step again"
        return message
