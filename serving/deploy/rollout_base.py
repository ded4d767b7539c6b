"""What both KServe rollouts share: blessing, verification, whole-object writes, the waits,
the ServingRuntime and the result
(:class:`~fmnist_kfp.serving.deploy.rollout_result.RolloutResult`).

Every write is a PUT of the whole object with the ``resourceVersion`` just read (the controller
updates status, so a conflict is retried with a fresh read); labels, annotations and finalizers
that others set are kept.

Every wait is a job on the one remote-job runner (``fmnist_kfp.kubernetes.runner``): it makes the
write, polls with progress, retries transient reads (5xx, 429, timeouts), stops at
``ready_timeout_seconds``, and on SIGTERM, at the deadline or when the job fails (a model that
fails verification) calls the rollout's cleanup — the rollback — before it raises.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kubernetes.inference_service import (
    ANNOTATION_CANDIDATE_MODEL_URI,
    ANNOTATION_MODEL_URI,
    ANNOTATION_TEST_ACCURACY,
    annotations_of,
    build_inference_service,
    format_accuracy,
    merged_metadata,
    model_uri_of,
    served_accuracy,
)
from fmnist_kfp.kubernetes.inference_service_status import (
    DeploymentMode,
    canonical_mode,
    cluster_local_url,
    external_url,
)
from fmnist_kfp.kubernetes.manifest import to_manifest
from fmnist_kfp.kubernetes.serving_runtime import build_serving_runtime
from fmnist_kfp.serving.deploy.blessing import BlessingDecision, bless
from fmnist_kfp.serving.deploy.kserve_api import (
    Conflict,
    CreatedMeanwhile,
    KServeApi,
    KServeRolloutError,
    ReadinessTimeout,
    RolloutLeftAsIs,
    TransientApiError,
)
from fmnist_kfp.serving.deploy.rollout_result import Action, RolloutResult, Verification
from fmnist_kfp.settings.serving import (
    FMNIST_RUNTIME,
    KServeSettings,
    check_storage_uri,
    check_tolerance,
)

__all__ = ["Acceptance", "Candidate", "Check", "Log", "Rollout", "Verify", "Written"]

# A verifier: (base URL, model name) -> its report, a Comparison or a mapping with at least
# ``ok`` and ``accuracy``.
Verify = Callable[[str, str], Mapping[str, Any] | Any]
Log = Callable[[str], None]
CONFLICT_RETRIES = 5


@dataclass(frozen=True)
class Candidate:
    """The model a rollout serves: where KServe's storage initializer fetches it, the accuracy
    its blessing compares with the serving model's (the test split's when deployed, the
    validation split's when promoted early), whether KServe needs KFP's object-store
    credentials to fetch it, and its model type (the name an early promotion's claim gives
    it). Checked as it is made, before any call to the cluster."""

    storage_uri: str
    accuracy: float
    needs_credentials: bool = False
    model_type: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "storage_uri", check_storage_uri(self.storage_uri))
        if not 0.0 <= self.accuracy <= 1.0:
            raise UserInputError(f"test accuracy {self.accuracy} is not in [0, 1]")


@dataclass(frozen=True)
class Acceptance:
    """How a rollout accepts its candidate: blessed when its accuracy is at least the serving
    model's minus ``tolerance``, then served only once ``verify`` (real test images sent to
    where it answers) passes within the same tolerance. Checked as it is made."""

    tolerance: float
    verify: Verify

    def __post_init__(self) -> None:
        check_tolerance(self.tolerance)


@dataclass
class Check:
    """One read judged: ``done``; ``failed`` (with ``reason``) ends the job as a failure."""

    done: bool
    progress: str
    failed: bool = False
    reason: str = ""


@dataclass
class Written:
    """The API server's answer to a rollout's write, once sent: the object a wait judges."""

    response: dict = field(default_factory=dict)

    def record(self, response: dict) -> None:
        self.response = response


@dataclass
class VerifiedRead:
    """What a verified job saw when its write was rolled out: the InferenceService read, the
    address verified and the verification (None until one ran)."""

    isvc: dict
    url: str = ""
    verification: Verification | None = None


class Rollout:
    """One deployment of ``storage_uri`` on the InferenceService ``settings.name``."""

    def __init__(self, settings: KServeSettings, api: KServeApi, mode: DeploymentMode,
                 candidate: Candidate, acceptance: Acceptance, poll_seconds: float, log: Log):
        self.settings = settings
        self.api = api
        self.mode = mode
        self.name = settings.name
        self.storage_uri = candidate.storage_uri
        self.test_accuracy = candidate.accuracy
        self.tolerance = acceptance.tolerance
        self.verify_url = acceptance.verify
        self.poll_seconds = poll_seconds
        self.log = log

    @property
    def where(self) -> str:
        return self.api.where(self.name)

    # -- the flow both modes share -------------------------------------------------------

    def deploy(self, current: dict | None) -> RolloutResult:
        if current is None:
            return self.create()
        decision = self.blessing(current)
        self.log(f"[kserve] blessing: {decision.reason}")
        served = model_uri_of(current)
        if served == self.storage_uri:
            return self.unchanged(current, decision)
        if not decision.blessed:
            return self.result(Action.REJECTED, decision, current, reason=decision.reason)
        return self.update(current, decision, served)

    def update(self, current: dict, decision: BlessingDecision,
               served: str | None) -> RolloutResult:
        raise NotImplementedError

    def blessing(self, current: dict) -> BlessingDecision:
        serving_accuracy, unknown = served_accuracy(current)
        decision = bless(self.test_accuracy, serving_accuracy, self.tolerance)
        if serving_accuracy is None:
            decision = replace(decision, reason=f"the serving model's accuracy is unknown "
                               f"({unknown}): blessed without a comparison")
        canary = annotations_of(current).get(ANNOTATION_CANDIDATE_MODEL_URI)
        if canary:
            self.log(f"[kserve] warning: an earlier rollout left candidate {canary} in place; "
                     "this one replaces it")
        return decision

    def create(self) -> RolloutResult:
        decision = bless(self.test_accuracy, None, self.tolerance)
        self.ensure_serving_runtime()
        body = self.build(self.stable_annotations(self.storage_uri, self.test_accuracy))
        self.log(f"[kserve] creating {self.where} ({self.mode.mode} mode, from "
                 f"{self.mode.source}) serving {self.storage_uri}")
        written = Written()
        isvc, url, verification = self.verified_job(
            "new InferenceService", self.name,
            create=lambda: written.record(self.create_object(body)),
            rolled_out=lambda isvc: self.rolled_out(isvc, written.response, self.name))
        result = self.result(Action.CREATED, decision, isvc, verification=verification,
                             reason=f"nothing was served; created {self.where}")
        if not verification.passed:
            raise KServeRolloutError(
                f"{self.where} was created but its model {self.storage_uri} failed "
                f"verification at {url}: {verification.describe()}. There is no earlier "
                "model to roll back to; fix the model or the predictor and deploy again, or "
                f"delete it (kubectl delete inferenceservice -n {self.api.namespace} "
                f"{self.name})", result)
        return result

    def unchanged(self, current: dict, decision: BlessingDecision) -> RolloutResult:
        url = self.require_address(current)
        verification = self.verify(url, self.name, "served model")
        result = self.result(Action.UNCHANGED, decision, current, verification=verification,
                             reason=f"{self.storage_uri} is already served")
        if not verification.passed:
            raise KServeRolloutError(
                f"{self.where} already serves {self.storage_uri}, but it failed "
                f"verification at {url}: {verification.describe()}; nothing was changed",
                result)
        return result

    def rolled_out(self, isvc: dict, written: dict, name: str) -> Check:
        """Whether ``written`` (of InferenceService ``name``) is rolled out: the mode's rule."""
        raise NotImplementedError

    def verified_job(self, what: str, name: str, *, create: Callable[[], object],
                     rolled_out: Callable[[dict], Check],
                     url_of: Callable[[dict], str] | None = None,
                     cleanup: Callable[[str], None] | None = None
                     ) -> tuple[dict, str, Verification]:
        """A job that writes, waits until rolled out, then verifies at ``url_of(isvc)`` (the
        cluster-local address by default). A failed verification fails the job, so the runner
        calls ``cleanup("failed")``. Returns ``(isvc, url, verification)``."""
        from fmnist_kfp.kubernetes.runner import JobFailed

        url_of = url_of or self.require_address
        seen = VerifiedRead(isvc={})

        def check(isvc: dict) -> Check:
            verdict = rolled_out(isvc)
            if not verdict.done:
                return verdict
            url = url_of(isvc)
            verification = self.verify(url, name, what)
            seen.isvc, seen.url, seen.verification = isvc, url, verification
            if verification.passed:
                return Check(True, f"{verdict.progress}; verified at {url}")
            return Check(True, verdict.progress, failed=True,
                         reason=f"verification failed ({verification.describe()})")

        try:
            isvc = self.run_job(what, read=self.reader(name), check=check, create=create,
                                cleanup=cleanup, name=name)
        except JobFailed:
            if seen.verification is None:
                raise
            return seen.isvc, seen.url, seen.verification
        assert seen.verification is not None  # the job is done only once verified
        return isvc, seen.url, seen.verification

    # -- verification ----------------------------------------------------------------------

    def verify(self, url: str, model_name: str, what: str) -> Verification:
        """The model served at ``url`` verified and judged by the one rule
        (:meth:`~fmnist_kfp.serving.deploy.rollout_result.Verification.of`)."""
        self.log(f"[kserve] verifying the {what} at {url}")
        verification = Verification.of(lambda: self.verify_url(url, model_name),
                                       self.test_accuracy, self.tolerance)
        self.log(f"[kserve] verification of the {what}: "
                 f"{'passed' if verification.passed else 'FAILED'} "
                 f"({verification.describe()})")
        return verification

    # -- writes ------------------------------------------------------------------------------

    def stable_annotations(self, uri: str, accuracy: float) -> dict[str, str]:
        return {ANNOTATION_TEST_ACCURACY: format_accuracy(accuracy), ANNOTATION_MODEL_URI: uri}

    def build(self, model_annotations: dict[str, str], *, storage_uri: str | None = None,
              canary_percent: int | None = None, name: str | None = None) -> dict:
        return to_manifest(build_inference_service(
            self.settings, storage_uri=storage_uri or self.storage_uri,
            annotations=model_annotations, canary_traffic_percent=canary_percent,
            mode=self.mode, name=name))

    def create_object(self, body: dict) -> dict:
        """POSTs ``body`` (once :meth:`guard` allows it); after a transient failure the object
        may exist: then it is read. A 409 raises :class:`CreatedMeanwhile`, carrying neither
        the 409 nor the words "already exists": the remote-job runner re-attaches to a job whose
        create error says so (``fmnist_kfp.kubernetes.runner._already_exists``, which walks
        ``__cause__`` and ``__context__`` alike, ``from None`` notwithstanding), and this object
        is someone else's, or one being deleted."""
        name = body["metadata"]["name"]
        self.guard()
        for attempt in (1, 2):
            try:
                return self.api.create(body)
            except TransientApiError as error:
                if attempt == 2:
                    raise
                self.log(f"[kserve] {error}; checking whether it was created")
                existing = self.retrying(lambda: self.api.get(name), f"read {name}")
                if existing is not None:
                    return existing
            except Conflict:
                break  # raised below, outside this handler: no __context__ to the 409
        raise CreatedMeanwhile(
            f"{self.api.where(name)} was created by someone else meanwhile, or is still being "
            "deleted (HTTP 409 on create)")

    def write(self, body: dict) -> dict:
        """PUTs ``body`` (ours) over the current object, keeping others' metadata; conflicts
        and transient failures are retried with a fresh read."""
        name = body["metadata"]["name"]
        for attempt in range(1, CONFLICT_RETRIES + 1):
            current = self.retrying(lambda: self.api.get(name), f"read {name}")
            if current is None:
                raise KServeRolloutError(f"{self.api.where(name)} disappeared during the "
                                         "rollout")
            self.check_current(current)
            merged = {**body, "metadata": merged_metadata(current, body["metadata"])}
            try:
                return self.api.replace(merged)
            except (Conflict, TransientApiError) as error:
                self.log(f"[kserve] {self.api.where(name)} could not be updated ({error}); "
                         f"retrying ({attempt}/{CONFLICT_RETRIES})")
        raise KServeRolloutError(
            f"{self.api.where(name)} kept changing under this update ({CONFLICT_RETRIES} "
            "tries); is another deployment running at the same time?")

    def check_current(self, current: dict) -> None:
        """Called with the object each write is about to replace (the read its
        ``resourceVersion`` comes from), *after* that read; raises to stop the write. An early
        promotion (:mod:`fmnist_kfp.serving.deploy.kserve_promotion`) stops once another one
        has claimed the InferenceService."""
        self.guard()

    def guard(self) -> None:
        """Called before every create and write of the rollout and on every read a wait
        judges; raises to stop the rollout (an early promotion that was overtaken)."""

    def retrying(self, call: Callable, what: str, attempts: int = 5):
        """``call()``, retried on transient API errors with a growing pause."""
        for attempt in range(1, attempts + 1):
            try:
                return call()
            except TransientApiError as error:
                if attempt == attempts:
                    raise
                self.log(f"[kserve] {error}; retrying ({attempt}/{attempts})")
                time.sleep(self.poll_seconds * attempt)
        raise AssertionError("unreachable")

    # -- waits: jobs on the remote-job runner ----------------------------------------------

    def run_job(self, what: str, *, read: Callable[[], dict], check: Callable[[dict], Check],
                create: Callable[[], object] | None = None,
                cleanup: Callable[[str], None] | None = None, name: str | None = None,
                timeout: float | None = None) -> dict:
        """Makes ``create`` (the write) and polls ``read`` until ``check`` says done, on the
        runner. SIGTERM, the deadline, a failed check or an error call ``cleanup(why)`` first;
        then the runner's error is raised (a deadline as :class:`ReadinessTimeout`; SIGTERM
        exits the step with 143 after the cleanup). A read the API server refuses (401, 403,
        410) or that stays unanswered calls no cleanup: :class:`RolloutLeftAsIs`."""
        from fmnist_kfp.kubernetes.runner import (
            DeadlineExceeded,
            JobLeftAsIs,
            JobRefused,
            JobStatus,
            RemoteJob,
            RemoteJobRunner,
        )

        timeout = self.settings.ready_timeout_seconds if timeout is None else timeout
        last = Check(False, "nothing read yet")  # the latest verdict, for the timeout's message

        def status(isvc: dict) -> JobStatus:
            nonlocal last
            self.guard()
            self.check_mode(isvc)
            self.check_not_deleted(isvc, name or self.name)
            last = check(isvc)
            self.observed(isvc)
            return JobStatus(done=last.done or last.failed, failed=last.failed,
                             progress=last.progress, reason=last.reason)

        runner = RemoteJobRunner(
            poll_seconds=self.poll_seconds, timeout_seconds=timeout,
            retry_seconds=(self.poll_seconds, 8 * self.poll_seconds),
            unreachable_seconds=timeout, log=self.log)
        job = RemoteJob(kind="InferenceService", namespace=self.api.namespace,
                        name=name or self.name, read=read, status=status,
                        cleanup=cleanup or (lambda why: None), create=create,
                        describe_created=what, created_verb="applied")
        try:
            return runner.run(job)
        except DeadlineExceeded as error:
            raise ReadinessTimeout(
                f"{self.api.where(name or self.name)}: the {what} was not ready after "
                f"{timeout:g} s ({last.progress}). Look at kubectl describe "
                f"inferenceservice -n {self.api.namespace} {name or self.name} and the "
                "predictor pods' logs, or raise ready_timeout_seconds") from error
        except JobRefused as error:
            cause = error.__cause__
            raise (cause if isinstance(cause, KServeRolloutError)
                   else KServeRolloutError(str(error))) from error
        except JobLeftAsIs as error:  # no cleanup ran: the callers say where things stand
            raise RolloutLeftAsIs(f"the {what} on {self.api.where(name or self.name)} was left "
                                  f"as it is ({error})") from error

    def observed(self, isvc: dict) -> None:
        """Called with every read a wait judges (after judging it)."""

    def reader(self, name: str | None = None) -> Callable[[], dict]:
        """Reads the InferenceService; a 404 raises (the runner: it vanished)."""
        name = name or self.name

        def read() -> dict:
            isvc = self.api.get(name, absent_ok=False)
            assert isvc is not None, "absent_ok=False: a 404 raises"
            return isvc
        return read

    def check_not_deleted(self, isvc: dict, name: str) -> None:
        """Stops a wait on an InferenceService being deleted (``metadata.deletionTimestamp``:
        it persists until KServe's controller removes its finalizer, kserve v0.15.2
        ``pkg/controller/v1beta1/inferenceservice/controller.go`` L162-195) instead of waiting
        for it to vanish."""
        if ((isvc or {}).get("metadata") or {}).get("deletionTimestamp"):
            raise KServeRolloutError(
                f"{self.api.where(name)} is being deleted (deletionTimestamp "
                f"{isvc['metadata']['deletionTimestamp']}); run the step again once it is gone")

    def check_mode(self, isvc) -> None:
        """Stops a wait for the wrong mode: the status says which mode KServe chose (0.15.1+);
        it differs when the cluster's default could not be read."""
        recorded = canonical_mode(((isvc or {}).get("status") or {}).get("deploymentMode"))
        if recorded and recorded != self.mode.mode:
            raise KServeRolloutError(
                f"{self.where} runs in {recorded} mode, not {self.mode.mode} ({self.mode.source})"
                f"; set serving.deployment_mode to {recorded} and run the step again")

    # -- the ServingRuntime ------------------------------------------------------------------

    def ensure_serving_runtime(self) -> None:
        """Creates our ServingRuntime when it is missing; a different one is left alone."""
        if self.settings.runtime != FMNIST_RUNTIME:
            return
        wanted = to_manifest(build_serving_runtime(self.settings))
        def read() -> dict | None:
            return self.retrying(lambda: self.api.get_runtime(FMNIST_RUNTIME),
                                 f"read ServingRuntime {FMNIST_RUNTIME}")

        existing = read()
        if existing is None:
            self.log(f"[kserve] creating ServingRuntime {self.api.namespace}/{FMNIST_RUNTIME}")
            try:
                self.create_runtime(wanted)
                return
            except Conflict:
                # Created meanwhile by another step (409 AlreadyExists): it exists; read it
                # and judge it as one found there.
                self.log(f"[kserve] ServingRuntime {self.api.namespace}/{FMNIST_RUNTIME} was "
                         "created meanwhile by another step; using it")
                existing = read()
                if existing is None:
                    raise KServeRolloutError(
                        f"ServingRuntime {self.api.namespace}/{FMNIST_RUNTIME}: the create was "
                        "answered 409 AlreadyExists, but it cannot be read") from None
        have = ((existing.get("spec") or {}).get("containers") or [{}])[0]
        want = wanted["spec"]["containers"][0]
        if (have.get("image"), have.get("args")) != (want["image"], want["args"]):
            self.log(f"[kserve] warning: ServingRuntime {self.api.namespace}/{FMNIST_RUNTIME} "
                     f"runs {have.get('image')} {have.get('args')}, not {want['image']} "
                     f"{want['args']}; it is left as it is (changing it restarts every model "
                     "it serves): apply build_serving_runtime's manifest to update it")

    def create_runtime(self, body: dict) -> None:
        """POSTs the ServingRuntime; a transient failure (5xx, 429, a timeout: it may have
        been created) is retried after a read says it is still absent. A 409 raises
        :class:`Conflict`."""
        for attempt in range(1, CONFLICT_RETRIES + 1):
            try:
                self.api.create_runtime(body)
                return
            except TransientApiError as error:
                if attempt == CONFLICT_RETRIES:
                    raise
                self.log(f"[kserve] {error}; retrying ({attempt}/{CONFLICT_RETRIES})")
                time.sleep(self.poll_seconds * attempt)
                if self.retrying(lambda: self.api.get_runtime(FMNIST_RUNTIME),
                                 f"read ServingRuntime {FMNIST_RUNTIME}") is not None:
                    return

    # -- results -----------------------------------------------------------------------------

    def require_address(self, isvc: dict) -> str:
        url = cluster_local_url(isvc)
        if not url:
            raise KServeRolloutError(f"{self.where} is Ready but reports no cluster-local "
                                     "address (status.address.url)")
        return url

    def result(self, action: Action, decision: BlessingDecision, isvc: dict | None, *,
               canary_url: str | None = None, verification: Verification | None = None,
               canary_percent: int | None = None, reason: str = "") -> RolloutResult:
        """How this rollout ended, ``isvc`` being the InferenceService as last read."""
        return RolloutResult(
            action=action, blessing=decision, url=cluster_local_url(isvc or {}),
            external_url=external_url(isvc or {}), canary_url=canary_url,
            verification=verification, namespace=self.api.namespace, name=self.name,
            mode=self.mode.mode, runtime=self.settings.runtime, storage_uri=self.storage_uri,
            service_account=self.settings.service_account or None,
            canary_traffic_percent=canary_percent, reason=reason)
