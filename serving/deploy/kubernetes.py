"""Deploy a model to KServe: create, or bless and roll out through a verified canary.

:func:`deploy_with_kserve` drives one InferenceService:

1. **Absent** → create it (all traffic), wait until Ready, verify ``status.url``. A model that
   fails verification there has nothing to roll back to, so that raises.
2. **Present** → bless the candidate against the accuracy the serving model was deployed with
   (annotation ``fmnist.kubeflow.org/test-accuracy``). Same model URI → ``unchanged`` (still
   verified); not blessed → ``rejected`` (no write).
3. **Blessed** → canary: replace the spec with the new ``storageUri`` and
   ``canaryTrafficPercent`` (KServe sends that share to the new revision, the rest to the last
   rolled-out one), wait Ready, verify the canary through its ``latest`` tag URL (tag routing
   is on), then either **promote** (drop ``canaryTrafficPercent``: KServe's way to roll out the
   latest revision) or **roll back** (``canaryTrafficPercent: 0``: KServe pins all traffic to
   the previously rolled-out revision).

A failed canary is *returned* (``action == "rolled_back"``), not raised: the serving model is
untouched and the caller decides whether that fails its step. A canary that cannot be judged
(readiness timeout, SIGTERM, an API error while it runs) is rolled back and then raised as
:class:`KServeRolloutError`, with the result dict in ``error.result``.

Every write is a PUT of the whole object with the ``resourceVersion`` just read (the controller
updates status, so a conflict is retried with a fresh read); labels, annotations and finalizers
that others set are kept.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from fmnist.errors import UserInputError
from fmnist.settings.serving import FMNIST_RUNTIME, check_storage_uri, check_tolerance
from serving.deploy.blessing import BlessingDecision, bless
from serving.deploy.inference_service import (
    ANNOTATION_CANDIDATE_MODEL_URI,
    ANNOTATION_CANDIDATE_TEST_ACCURACY,
    ANNOTATION_MODEL_URI,
    ANNOTATION_PREVIOUS_MODEL_URI,
    ANNOTATION_TEST_ACCURACY,
    MODEL_ANNOTATIONS,
    KServeSettings,
    build_inference_service,
    build_serving_runtime,
    to_manifest,
)

GROUP = "serving.kserve.io"
ISVC_VERSION = "v1beta1"
ISVC_PLURAL = "inferenceservices"
RUNTIME_VERSION = "v1alpha1"
RUNTIME_PLURAL = "servingruntimes"
CANARY_TAG = "latest"
REQUEST_TIMEOUT_SECONDS = 30
CONFLICT_RETRIES = 5

Verify = Callable[[str], dict]
Log = Callable[[str], None]


class KServeRolloutError(RuntimeError):
    """The deployment could not complete; ``result`` holds what was done (or None)."""

    def __init__(self, message: str, result: dict | None = None):
        super().__init__(message)
        self.result = result


class ReadinessTimeout(KServeRolloutError):
    """The InferenceService did not become Ready in ``ready_timeout_seconds``."""


class _Terminated(BaseException):
    """SIGTERM arrived while a canary was out (a BaseException so no library swallows it)."""


def deploy_with_kserve(
    settings: KServeSettings,
    *,
    storage_uri: str,
    test_accuracy: float,
    tolerance: float,
    verify: Verify,
    client=None,
    poll_seconds: float = 5.0,
    log: Log = print,
) -> dict:
    """Serves ``storage_uri`` (whose test accuracy is ``test_accuracy``) on KServe.

    ``verify(url)`` sends real test images to ``url`` (a base URL) and returns at least
    ``{"ok": bool, "accuracy": float}``; a model passes when ``ok`` and its accuracy is at least
    ``expected_accuracy - tolerance`` (what the verifier says the model scores on its sample;
    default ``test_accuracy``). ``client`` is a ``kserve.KServeClient`` (None: one from the
    in-cluster or kubeconfig credentials).

    Returns ``{"action", "blessing", "url", "canary_url", "verification", "namespace", "name",
    "runtime", "storage_uri", "canary_traffic_percent", "reason"}`` with ``action`` one of
    ``created``, ``unchanged``, ``rejected``, ``promoted``, ``rolled_back``. Raises
    :class:`KServeRolloutError` when a created or unchanged service fails verification, on a
    readiness timeout and when a canary is interrupted (after rolling it back).
    """
    settings.validate()
    storage_uri = check_storage_uri(storage_uri)
    check_tolerance(tolerance)
    if not 0.0 <= test_accuracy <= 1.0:
        raise UserInputError(f"test accuracy {test_accuracy} is not in [0, 1]")
    if client is None:
        from kserve import KServeClient

        client = KServeClient()
    run = _Rollout(settings, _Api(client.api_instance, settings.target_namespace, settings.name),
                   storage_uri, test_accuracy, tolerance, verify, poll_seconds, log)
    return run.deploy()


# ---------------------------------------------------------------------------------------------
# The Kubernetes API calls


@dataclass
class _Api:
    """The custom-object calls for one InferenceService (and our ServingRuntime)."""

    custom: object  # kubernetes.client.CustomObjectsApi
    namespace: str
    name: str

    @property
    def where(self) -> str:
        return f"InferenceService {self.namespace}/{self.name}"

    def get(self) -> dict | None:
        """The InferenceService, or None when there is none."""
        return self._call(
            "read", self.custom.get_namespaced_custom_object, GROUP, ISVC_VERSION,
            self.namespace, ISVC_PLURAL, self.name, absent_ok=True,
        )

    def create(self, body: dict) -> dict:
        return self._call(
            "create", self.custom.create_namespaced_custom_object, GROUP, ISVC_VERSION,
            self.namespace, ISVC_PLURAL, body,
        )

    def replace(self, body: dict) -> dict:
        return self._call(
            "replace", self.custom.replace_namespaced_custom_object, GROUP, ISVC_VERSION,
            self.namespace, ISVC_PLURAL, self.name, body, conflict_raises=True,
        )

    def get_runtime(self, name: str) -> dict | None:
        return self._call(
            "read", self.custom.get_namespaced_custom_object, GROUP, RUNTIME_VERSION,
            self.namespace, RUNTIME_PLURAL, name, absent_ok=True,
        )

    def create_runtime(self, body: dict) -> dict:
        return self._call(
            "create", self.custom.create_namespaced_custom_object, GROUP, RUNTIME_VERSION,
            self.namespace, RUNTIME_PLURAL, body,
        )

    def _call(self, verb, method, *args, absent_ok=False, conflict_raises=False):
        from kubernetes.client.rest import ApiException

        try:
            return method(*args, _request_timeout=REQUEST_TIMEOUT_SECONDS)
        except ApiException as error:
            status = _status_body(error)
            if error.status == 404 and absent_ok and status.get("reason") == "NotFound":
                return None
            if error.status == 409 and conflict_raises:
                raise _Conflict(_api_message(error)) from error
            raise KServeRolloutError(self._explain(verb, args, error)) from error

    def _explain(self, verb: str, args: tuple, error) -> str:
        version, plural = args[1], args[3]
        what = f"{plural}.{GROUP}/{version} in namespace {self.namespace}"
        message = f"could not {verb} {what}: HTTP {error.status} {_api_message(error)}"
        if error.status == 404 and not _status_body(error):
            message += f"; the API server does not know {plural}.{GROUP}: is KServe installed?"
        elif error.status in (401, 403):
            message += (f"; the step's ServiceAccount needs get, create and update on "
                        f"{plural}.{GROUP} in namespace {self.namespace}")
        elif error.status == 409:
            message += "; another client created it at the same time: run the step again"
        return message


class _Conflict(Exception):
    """A PUT carried a stale resourceVersion."""


def _status_body(error) -> dict:
    try:
        body = json.loads(error.body or "")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) and body.get("kind") == "Status" else {}


def _api_message(error) -> str:
    return _status_body(error).get("message") or str(error.reason or "").strip()


# ---------------------------------------------------------------------------------------------
# Reading an InferenceService


def _annotations(isvc: dict) -> dict[str, str]:
    return dict((isvc.get("metadata") or {}).get("annotations") or {})


def _predictor(isvc: dict) -> dict:
    return ((isvc.get("spec") or {}).get("predictor")) or {}


def _served_uri(isvc: dict) -> str | None:
    """The model the stable revision serves: our annotation, else the spec (when no canary)."""
    annotated = _annotations(isvc).get(ANNOTATION_MODEL_URI)
    if annotated:
        return annotated
    predictor = _predictor(isvc)
    if predictor.get("canaryTrafficPercent") is None:
        return (predictor.get("model") or {}).get("storageUri")
    return None


def _served_accuracy(isvc: dict) -> tuple[float | None, str]:
    """The served model's test accuracy and, when it is unknown, why."""
    value = _annotations(isvc).get(ANNOTATION_TEST_ACCURACY)
    if value is None:
        return None, f"annotation {ANNOTATION_TEST_ACCURACY} is missing"
    try:
        accuracy = float(value)
    except ValueError:
        return None, f"annotation {ANNOTATION_TEST_ACCURACY}={value!r} is not a number"
    if not 0.0 <= accuracy <= 1.0:
        return None, f"annotation {ANNOTATION_TEST_ACCURACY}={value!r} is not in [0, 1]"
    return accuracy, ""


def _ready_condition(isvc: dict) -> dict:
    for condition in (isvc.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition
    return {}


def _is_ready(isvc: dict, generation: int) -> bool:
    status = isvc.get("status") or {}
    return (_ready_condition(isvc).get("status") == "True"
            and int(status.get("observedGeneration") or 0) >= generation)


def _generation(isvc: dict) -> int:
    return int((isvc.get("metadata") or {}).get("generation") or 0)


def _status_url(isvc: dict) -> str | None:
    return (isvc.get("status") or {}).get("url")


def _canary_url(isvc: dict, log: Log) -> str:
    """The URL that reaches only the latest revision: its ``latest`` tag, else a fallback."""
    predictor = ((isvc.get("status") or {}).get("components") or {}).get("predictor") or {}
    for target in predictor.get("traffic") or []:
        if target.get("tag") == CANARY_TAG and target.get("url"):
            return target["url"]
    for source, url in (("status.components.predictor.url", predictor.get("url")),
                        ("status.url", _status_url(isvc))):
        if url:
            log(f"[kserve] no '{CANARY_TAG}' tag in the predictor's traffic (is the annotation "
                f"serving.kserve.io/enable-tag-routing honoured?); verifying through {source}, "
                "which splits traffic between the canary and the stable revision")
            return url
    raise KServeRolloutError("the InferenceService reports no URL for its canary")


def _format_accuracy(value: float) -> str:
    return f"{value:.6f}"


# ---------------------------------------------------------------------------------------------
# SIGTERM while a canary is out


class _SigtermGuard:
    """While active, the first SIGTERM raises :class:`_Terminated` so the canary gets rolled
    back; once rolling back (``hold()``), further SIGTERMs only get logged."""

    def __init__(self, log: Log):
        self.log = log
        self.holding = False

    def hold(self) -> None:
        self.holding = True

    def __call__(self, signum, frame):
        if self.holding:
            self.log("[kserve] SIGTERM: finishing the rollback first")
            return
        self.holding = True
        self.log("[kserve] SIGTERM: rolling the canary back before exiting")
        raise _Terminated()


@contextlib.contextmanager
def _sigterm_guard(log: Log):
    guard = _SigtermGuard(log)
    if threading.current_thread() is not threading.main_thread():
        yield guard  # signal handlers can only be set from the main thread
        return
    previous = signal.signal(signal.SIGTERM, guard)
    try:
        yield guard
    finally:
        signal.signal(signal.SIGTERM, previous)


# ---------------------------------------------------------------------------------------------
# The rollout


class _Rollout:
    def __init__(self, settings: KServeSettings, api: _Api, storage_uri: str,
                 test_accuracy: float, tolerance: float, verify: Verify, poll_seconds: float,
                 log: Log):
        self.settings = settings
        self.api = api
        self.storage_uri = storage_uri
        self.test_accuracy = test_accuracy
        self.tolerance = tolerance
        self.verify_url = verify
        self.poll_seconds = poll_seconds
        self.log = log

    def deploy(self) -> dict:
        current = self.api.get()
        if current is None:
            return self.create()
        decision = self.blessing(current)
        self.log(f"[kserve] blessing: {decision.reason}")
        served = _served_uri(current)
        if served == self.storage_uri:
            return self.unchanged(current, decision)
        if not decision.blessed:
            return self.result("rejected", decision, url=_status_url(current),
                               reason=decision.reason)
        return self.canary(current, decision, served)

    # -- the decision ------------------------------------------------------------------------

    def blessing(self, current: dict) -> BlessingDecision:
        serving_accuracy, unknown = _served_accuracy(current)
        decision = bless(self.test_accuracy, serving_accuracy, self.tolerance)
        if serving_accuracy is None:
            decision = replace(decision, reason=f"the serving model's accuracy is unknown "
                               f"({unknown}): blessed without a comparison")
        canary = _annotations(current).get(ANNOTATION_CANDIDATE_MODEL_URI)
        if canary:
            self.log(f"[kserve] warning: an earlier rollout left canary {canary} in place; "
                     "this one replaces it")
        return decision

    def passes(self, verification: dict) -> bool:
        # A verifier that scores a sample says what the model should score on that sample
        # (``expected_accuracy``); the test-split accuracy is the yardstick otherwise.
        accuracy = verification.get("accuracy")
        expected = verification.get("expected_accuracy", self.test_accuracy)
        return (verification.get("ok") is True and isinstance(accuracy, int | float)
                and accuracy >= expected - self.tolerance)

    def verify(self, url: str, what: str) -> dict:
        self.log(f"[kserve] verifying the {what} at {url}")
        try:
            verification = dict(self.verify_url(url))
        except Exception as error:  # a verifier that cannot reach the model is a failure
            verification = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        verification["passed"] = self.passes(verification)
        self.log(f"[kserve] verification of the {what}: {verification}")
        return verification

    # -- the actions -------------------------------------------------------------------------

    def create(self) -> dict:
        decision = bless(self.test_accuracy, None, self.tolerance)
        self.ensure_serving_runtime()
        annotations = self.stable_annotations(self.storage_uri, self.test_accuracy)
        body = to_manifest(build_inference_service(
            self.settings, storage_uri=self.storage_uri, annotations=annotations))
        self.log(f"[kserve] creating {self.api.where} serving {self.storage_uri}")
        created = self.api.create(body)
        isvc = self.wait_ready(_generation(created), "new InferenceService")
        url = self.require_url(isvc)
        verification = self.verify(url, "new InferenceService")
        result = self.result("created", decision, url=url, verification=verification,
                             reason=f"nothing was served; created {self.api.where}")
        if not verification["passed"]:
            raise KServeRolloutError(
                f"{self.api.where} was created but its model {self.storage_uri} failed "
                f"verification at {url}: {self.describe(verification)}. There is no earlier "
                "model to roll back to; fix the model or the predictor and deploy again, or "
                f"delete it (kubectl delete inferenceservice -n {self.api.namespace} "
                f"{self.api.name})", result)
        return result

    def unchanged(self, current: dict, decision: BlessingDecision) -> dict:
        url = self.require_url(current)
        verification = self.verify(url, "served model")
        result = self.result("unchanged", decision, url=url, verification=verification,
                             reason=f"{self.storage_uri} is already served")
        if not verification["passed"]:
            raise KServeRolloutError(
                f"{self.api.where} already serves {self.storage_uri}, but it failed "
                f"verification at {url}: {self.describe(verification)}; nothing was changed",
                result)
        return result

    def canary(self, current: dict, decision: BlessingDecision, served: str | None) -> dict:
        percent = self.settings.canary_traffic_percent
        stable = {key: value for key, value in _annotations(current).items()
                  if key in (ANNOTATION_TEST_ACCURACY, ANNOTATION_MODEL_URI)}
        candidate = {**stable, ANNOTATION_CANDIDATE_TEST_ACCURACY:
                     _format_accuracy(self.test_accuracy),
                     ANNOTATION_CANDIDATE_MODEL_URI: self.storage_uri}
        if served:
            candidate[ANNOTATION_PREVIOUS_MODEL_URI] = served
        previous = served or "the previous model"
        self.ensure_serving_runtime()
        written = None
        with _sigterm_guard(self.log) as guard:
            try:
                self.log(f"[kserve] canary: {percent}% of traffic to {self.storage_uri}, the "
                         f"rest to the revision serving {previous}")
                written = self.write(candidate, percent)
                isvc = self.wait_ready(_generation(written), "canary")
                canary_url = _canary_url(isvc, self.log)
                verification = self.verify(canary_url, "canary")
                passed = verification["passed"]
            except BaseException as error:
                guard.hold()
                self.interrupted(error, written is not None, stable, decision, percent)
            if not passed:
                guard.hold()
                isvc = self.rollback(stable)
                return self.result(
                    "rolled_back", decision, url=_status_url(isvc), canary_url=canary_url,
                    verification=verification, canary_percent=percent,
                    reason=f"the canary failed verification ({self.describe(verification)}); "
                           f"all traffic is pinned to the revision serving {previous}")
        return self.promote(decision, verification, canary_url, percent)

    def interrupted(self, error: BaseException, written: bool, stable: dict[str, str],
                    decision: BlessingDecision, percent: int):
        """Rolls back a canary that could not be judged, then raises."""
        why = "SIGTERM" if isinstance(error, _Terminated) else f"{type(error).__name__}: {error}"
        if not written:
            if isinstance(error, _Terminated):
                raise KServeRolloutError(f"interrupted by SIGTERM before the canary was "
                                         f"written; {self.api.where} is unchanged") from None
            raise error
        try:
            isvc = self.rollback(stable)
        except Exception as failure:
            raise KServeRolloutError(
                f"the canary of {self.storage_uri} on {self.api.where} was interrupted ({why}) "
                f"and rolling it back failed ({failure}); pin the previous model by hand: "
                f"kubectl patch inferenceservice -n {self.api.namespace} {self.api.name} "
                "--type=merge -p '{\"spec\":{\"predictor\":{\"canaryTrafficPercent\":0}}}'"
            ) from error
        result = self.result("rolled_back", decision, url=_status_url(isvc),
                             canary_percent=percent, reason=f"canary interrupted: {why}")
        raise KServeRolloutError(
            f"the canary of {self.storage_uri} on {self.api.where} was interrupted ({why}); it "
            "was rolled back and the previous model keeps all traffic", result) from error

    def promote(self, decision, verification: dict, canary_url: str, percent: int) -> dict:
        stable = self.stable_annotations(self.storage_uri, self.test_accuracy)
        self.log(f"[kserve] promoting {self.storage_uri} to all traffic")
        written = self.write(stable, None)
        isvc = self.wait_ready(_generation(written), "promoted model")
        return self.result(
            "promoted", decision, url=_status_url(isvc), canary_url=canary_url,
            verification=verification, canary_percent=percent,
            reason=f"the canary passed verification ({self.describe(verification)}) and was "
                   "promoted to all traffic")

    def rollback(self, stable: dict[str, str]) -> dict:
        """Pins all traffic to the last rolled-out revision (``canaryTrafficPercent: 0``).

        The latest revision may never become Ready (a broken canary), so this waits only for
        the controller to observe the change, and logs rather than raises if it does not."""
        self.log(f"[kserve] rolling back: canaryTrafficPercent 0 pins traffic to the previous "
                 f"revision ({stable.get(ANNOTATION_MODEL_URI, 'model unknown')})")
        written = self.write(stable, 0)
        try:
            return self.wait_observed(_generation(written))
        except ReadinessTimeout as error:
            self.log(f"[kserve] warning: {error}")
            return written

    # -- writes and waits --------------------------------------------------------------------

    def stable_annotations(self, uri: str, accuracy: float) -> dict[str, str]:
        return {ANNOTATION_TEST_ACCURACY: _format_accuracy(accuracy), ANNOTATION_MODEL_URI: uri}

    def write(self, model_annotations: dict[str, str], canary_percent: int | None) -> dict:
        """PUTs the spec built from the settings, with ``model_annotations`` as the whole set of
        our model annotations; others' metadata is kept. Conflicts are retried."""
        built = to_manifest(build_inference_service(
            self.settings, storage_uri=self.storage_uri,
            annotations=model_annotations, canary_traffic_percent=canary_percent))
        for attempt in range(1, CONFLICT_RETRIES + 1):
            current = self.api.get()
            if current is None:
                raise KServeRolloutError(f"{self.api.where} disappeared during the rollout")
            body = {**built, "metadata": _merged_metadata(current, built["metadata"])}
            try:
                return self.api.replace(body)
            except _Conflict as conflict:
                self.log(f"[kserve] {self.api.where} changed while it was updated ({conflict});"
                         f" retrying ({attempt}/{CONFLICT_RETRIES})")
        raise KServeRolloutError(
            f"{self.api.where} kept changing under this update ({CONFLICT_RETRIES} conflicts); "
            "is another deployment running at the same time?")

    def wait_ready(self, generation: int, what: str) -> dict:
        return self._wait(generation, what, require_ready=True)

    def wait_observed(self, generation: int) -> dict:
        return self._wait(generation, "rollback", require_ready=False)

    def _wait(self, generation: int, what: str, *, require_ready: bool) -> dict:
        """Polls until the controller has observed ``generation`` (and, if asked, reports
        Ready); logs each change of state; raises :class:`ReadinessTimeout` at the deadline."""
        timeout = self.settings.ready_timeout_seconds
        deadline = time.monotonic() + timeout
        last = None
        while True:
            isvc = self.api.get()
            if isvc is None:
                raise KServeRolloutError(f"{self.api.where} disappeared while waiting for it")
            observed = int((isvc.get("status") or {}).get("observedGeneration") or 0)
            if (_is_ready(isvc, generation) if require_ready else observed >= generation):
                done = "ready" if require_ready else "observed by the controller"
                self.log(f"[kserve] {what}: {done} (generation {generation})")
                return isvc
            condition = _ready_condition(isvc)
            state = (observed, condition.get("status"), condition.get("reason"),
                     condition.get("message"))
            if state != last:
                self.log(f"[kserve] waiting for the {what}: observed generation {observed}/"
                         f"{generation}, Ready={condition.get('status', 'Unknown')}"
                         + (f" ({condition.get('reason')}: {condition.get('message')})"
                            if condition.get("reason") else ""))
                last = state
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ReadinessTimeout(
                    f"{self.api.where}: the {what} was not ready after {timeout:g} s (observed "
                    f"generation {observed}/{generation}, Ready="
                    f"{condition.get('status', 'Unknown')}: {condition.get('message', '')}). "
                    f"Look at kubectl describe inferenceservice -n {self.api.namespace} "
                    f"{self.api.name} and the predictor pods' logs, or raise "
                    "ready_timeout_seconds")
            time.sleep(min(self.poll_seconds, remaining))

    def ensure_serving_runtime(self) -> None:
        """Creates our ServingRuntime when it is missing; a different one is left alone."""
        if self.settings.runtime != FMNIST_RUNTIME:
            return
        wanted = to_manifest(build_serving_runtime(self.settings))
        existing = self.api.get_runtime(FMNIST_RUNTIME)
        if existing is None:
            self.log(f"[kserve] creating ServingRuntime {self.api.namespace}/{FMNIST_RUNTIME}")
            self.api.create_runtime(wanted)
            return
        have = ((existing.get("spec") or {}).get("containers") or [{}])[0]
        want = wanted["spec"]["containers"][0]
        if (have.get("image"), have.get("args")) != (want["image"], want["args"]):
            self.log(f"[kserve] warning: ServingRuntime {self.api.namespace}/{FMNIST_RUNTIME} "
                     f"runs {have.get('image')} {have.get('args')}, not {want['image']} "
                     f"{want['args']}; it is left as it is (changing it restarts every model "
                     "it serves): apply build_serving_runtime's manifest to update it")

    # -- results -----------------------------------------------------------------------------

    def require_url(self, isvc: dict) -> str:
        url = _status_url(isvc)
        if not url:
            raise KServeRolloutError(f"{self.api.where} is Ready but reports no status.url")
        return url

    @staticmethod
    def describe(verification: dict) -> str:
        if "error" in verification:
            return str(verification["error"])
        return (f"ok={verification.get('ok')}, accuracy={verification.get('accuracy')}, "
                f"failures={verification.get('failures')}/{verification.get('requests')}")

    def result(self, action: str, decision: BlessingDecision, *, url: str | None,
               canary_url: str | None = None, verification: dict | None = None,
               canary_percent: int | None = None, reason: str = "") -> dict:
        return {
            "action": action,
            "blessing": decision.as_dict(),
            "url": url,
            "canary_url": canary_url,
            "verification": verification,
            "namespace": self.api.namespace,
            "name": self.api.name,
            "runtime": self.settings.runtime,
            "storage_uri": self.storage_uri,
            "canary_traffic_percent": canary_percent,
            "reason": reason,
        }


def _merged_metadata(current: dict, built: dict) -> dict:
    """``current``'s metadata (resourceVersion, finalizers, others' labels and annotations) with
    our labels and annotations laid over it; our model annotations are replaced as a set."""
    metadata = {key: value for key, value in (current.get("metadata") or {}).items()
                if key != "managedFields"}
    annotations = {key: value for key, value in (metadata.get("annotations") or {}).items()
                   if key not in MODEL_ANNOTATIONS}
    metadata["annotations"] = {**annotations, **(built.get("annotations") or {})}
    metadata["labels"] = {**(metadata.get("labels") or {}), **(built.get("labels") or {})}
    return metadata
