"""The one way a step runs something on the cluster and waits for it: create (or re-attach to)
a remote job by a stable name, poll it until it finishes, and clean up when the step is
terminated, runs past its deadline, or the job really failed.

It follows google-cloud-pipeline-components' ``job_remote_runner``:

* **create or re-attach.** The job's name is stable per pipeline task, so a retried step pod
  calls create again and gets HTTP 409: the job exists, and the runner re-attaches to it.
* **SIGTERM first.** The SIGTERM handler is installed *before* the create call. A SIGTERM that
  arrives while the create call is in flight is held until the call returns, then the job is
  cleaned up; a SIGTERM during the wait stops the wait at once and cleans up. Either way the
  process then exits with 128 + 15, as a terminated KFP step should. (Off the main thread no
  handler can be installed; the runner then only cleans up on the other causes.)
* **Transient read errors are not failures.** HTTP 5xx, 429 and 408, client timeouts and
  connection errors are retried with a bounded backoff; they never fail the job or delete it.
  The kubeflow SDKs wrap the ``ApiException`` in a ``RuntimeError`` with the original as
  ``__context__`` (the Katib calls, :class:`fmnist_kfp.katib.experiment_launcher.KatibApi`, raise it
  as it is); :func:`fmnist_kfp.kubernetes.api_errors.api_status` looks through the chain.
  Should the API stay unreachable for ``unreachable_seconds``, the step fails and the job is
  left running: a retry of the step re-attaches to it.
* **A read the API server refuses leaves the job alone.** HTTP 401 (the step's credentials are
  no longer accepted: an expired or revoked token), 403 (its ServiceAccount may no longer read
  the job) and 410 Gone while waiting say nothing about the job, only about this step's access
  to it: the step fails with :class:`ReadRefused`, naming the status, and the job is left
  running for a retry of the step to re-attach to. Deleting it would throw away work a retry
  could have kept (and with the same credentials the delete would likely fail anyway). The
  same holds for reads the ``status`` callback makes (a KServe rollout reads the
  InferenceService's Deployment there). A 401 or 403 on *create* stays a refusal
  (:class:`JobRefused`): nothing was created.
* **A job that vanished** (404 after it existed) is an error naming it; nothing is cleaned up.
* **A failed job fails the step** with the reason its controller gave (:class:`JobFailed`), and
  is cleaned up so that a retried step starts afresh instead of re-attaching to the failure.
* **Cleanup** is the caller's hook, told why: ``"terminated"``, ``"deadline"``, ``"failed"`` or
  ``"error"`` (an unexpected exception while waiting). A TFJob or an Experiment is deleted; a
  KServe rollout rolls back. A transient answer to it is retried three times within 7 s (a
  job left behind keeps its pods, and GPUs, busy); another error is logged, and the step
  reports the error that started the cleanup.

The clock and the sleep are injectable, so tests drive the poll loop without real waiting.

Usage::

    runner = RemoteJobRunner(poll_seconds=10, timeout_seconds=3600)
    final = runner.run(RemoteJob(
        kind="TFJob", namespace="team-a", name="fmnist-basic-3f2a9c",
        create=lambda: api.create(body),   # None: the caller created it; only wait
        read=lambda: api.get(name),        # raise on errors; the runner classifies them
        status=lambda obj: JobStatus(...), # done? failed? a progress line
        cleanup=lambda why: api.delete(name),
    ))
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fmnist_kfp.errors import FmnistError
from fmnist_kfp.kubernetes.api_errors import (
    api_message,
    api_status,
    is_transient,
)

TERMINATED = "terminated"  # SIGTERM: the run was terminated or the step pod deleted
DEADLINE = "deadline"  # the step's own timeout passed
FAILED = "failed"  # the job's controller says it failed (or the caller's budget ran out)
ERROR = "error"  # an unexpected error while waiting (a permanent API error, a bug)

# Answers to a read that speak of this step's access, not of the job (see ReadRefused):
# 401 StatusUnauthorized, 403 StatusForbidden and 410 StatusGone in the Kubernetes API
# conventions (kubernetes/community contributors/devel/sig-architecture/api-conventions.md,
# "HTTP Status codes", lines 1514-1530 and 1562-1566 at 24e7d8f: for 410, "no longer available
# at the server"). The API server answers 410 with reason Expired when a resourceVersion is too
# old (kubernetes/apimachinery v0.31.3 pkg/api/errors/errors.go lines 270-279,
# NewResourceExpired).
LEFT_AS_IS_STATUSES = frozenset({401, 403, 410})


class RemoteJobError(FmnistError, RuntimeError):
    """The remote job could not be run to success; the message names the job and why."""


class JobFailed(RemoteJobError):
    """The job's controller reports it failed (or the caller's restart budget ran out)."""


class JobVanished(RemoteJobError):
    """The job existed, then the API server answered 404 for it."""


class JobRefused(RemoteJobError):
    """The API server refused to create the job (4xx other than 409); nothing was created."""

    def __init__(self, message: str, status: int | None):
        super().__init__(message)
        self.status = status


class JobLeftAsIs(RemoteJobError):
    """The step could not follow the job and left it running: a retry of the step
    re-attaches to it. Nothing is cleaned up."""


class ApiUnreachable(JobLeftAsIs):
    """Reads kept failing transiently for ``unreachable_seconds``; the job was left running."""


class ReadRefused(JobLeftAsIs):
    """The API server answered a read while waiting with 401, 403 or 410
    (:data:`LEFT_AS_IS_STATUSES`); the job was left running."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class DeadlineExceeded(FmnistError, TimeoutError):
    """The step's deadline passed; the job was cleaned up."""


class StartDeadlineExceeded(DeadlineExceeded):
    """The job stayed queued past the start deadline; it was cleaned up."""


class Terminated(SystemExit):
    """SIGTERM: raised once the job is cleaned up; exits the process with 128 + signal."""


@dataclass(frozen=True)
class JobStatus:
    """What one read of the job says: whether it is finished, whether it failed (and why, in
    its controller's words), and a one-line progress the runner prints whenever it changes."""

    done: bool = False
    failed: bool = False
    progress: str = ""
    reason: str = ""
    # Not started yet because a queue holds it (Kueue keeps it suspended until admission):
    # the time counts against the runner's start deadline, not against its run deadline.
    queued: bool = False


@dataclass
class RemoteJob:
    """One remote job: its name and the calls that create, read, judge and clean it up.

    ``create`` is None when the caller already wrote the object (the runner only waits).
    ``read`` raises on errors (SDK-wrapped or raw ``ApiException``); ``status`` maps what it
    returned to a :class:`JobStatus`; ``cleanup`` gets one of ``TERMINATED``, ``DEADLINE``,
    ``FAILED``, ``ERROR``. ``describe_created`` is printed after a successful create, as
    ``<created_verb> <kind> <namespace>/<name> (<describe_created>)``: "applied" where ``create``
    may update an object that exists (a rollout)."""

    kind: str
    namespace: str
    name: str
    read: Callable[[], Any]
    status: Callable[[Any], JobStatus]
    cleanup: Callable[[str], None]
    create: Callable[[], Any] | None = None
    describe_created: str = ""
    created_verb: str = "created"

    @property
    def where(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


# ---------------------------------------------------------------------------------------------
# Reading API errors: fmnist_kfp.kubernetes.api_errors (through the chain: the SDKs wrap the
# ApiException); what follows is the runner's own rule on top of it.


def left_as_is_status(error: BaseException) -> int | None:
    """401, 403 or 410 when ``error`` carries one of them (:data:`LEFT_AS_IS_STATUSES`): a
    read that failed so while waiting leaves the job as it is. None otherwise."""
    status = api_status(error)
    return status if status in LEFT_AS_IS_STATUSES else None


_REFUSED_BECAUSE = {
    401: "the API server no longer accepts this step's credentials (an expired or revoked "
         "ServiceAccount token)",
    403: "this step's ServiceAccount may no longer read it (its permissions changed while it "
         "waited; `fmnist-kfp preflight` lists the permissions the steps need)",
    410: "what was asked is no longer available at the API server (StatusGone in the "
         "Kubernetes API conventions: a resourceVersion too old to serve)",
}


def _already_exists(error: BaseException) -> bool:
    # An SDK may word a 409 so, without the ApiException (kubeflow-katib's KatibClient did).
    return api_status(error) == 409 or "already exists" in str(error)


# ---------------------------------------------------------------------------------------------
# SIGTERM


class _SigtermGuard:
    """SIGTERM while the create call is in flight: remembered, acted on once it returns (so the
    job it may have created is cleaned up). While waiting: raises :class:`Terminated` at once.
    While cleaning up: only logged, so the cleanup completes."""

    def __init__(self, where: str, log: Callable[[str], None]):
        self.where = where
        self.log = log
        self.requested: int | None = None
        self.deferring = False
        self.cleaning = False

    def __call__(self, signum, frame) -> None:
        if self.cleaning:
            self.log(f"SIGTERM again: finishing the cleanup of {self.where} first")
            return
        self.requested = signum
        if self.deferring:
            self.log(f"SIGTERM while creating {self.where}: cleaning it up once the create "
                     "call returns")
            return
        self.log(f"SIGTERM: cleaning up {self.where}")
        raise Terminated(128 + signum)

    def check(self) -> None:
        if self.requested is not None:
            raise Terminated(128 + self.requested)


# ---------------------------------------------------------------------------------------------
# The runner


def load_cluster_config() -> None:
    """Points the ``kubernetes`` client at the step's cluster: the pod's ServiceAccount (in a
    pipeline pod), else the kubeconfig (a laptop)."""
    from kubernetes import config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()


def default_api_client():
    """A ``kubernetes`` ``ApiClient`` for the step's cluster (:func:`load_cluster_config`)."""
    from kubernetes import client

    load_cluster_config()
    return client.ApiClient()


class RemoteJobRunner:
    """Creates (or re-attaches to) a :class:`RemoteJob` and waits for it; see the module
    docstring. ``timeout_seconds`` 0 waits as long as the job runs. Time the job spends
    queued (:attr:`JobStatus.queued`) does not count against ``timeout_seconds`` but against
    ``start_timeout_seconds`` (0: no limit), summed over every time it is queued (a preempted
    job is queued again)."""

    @classmethod
    def for_job(cls, settings, *, timeout_seconds: float = 0.0, **options) -> RemoteJobRunner:
        """A runner for a job of ``settings`` (:class:`fmnist_kfp.settings.jobs.KubernetesSettings`
        or alike): unless ``timeout_seconds`` is given, the step's own deadline is the job's
        ``active_deadline_seconds`` plus ten minutes for its pods to be scheduled and cleaned
        up (none without one); the start deadline is its scheduling's."""
        deadline = settings.active_deadline_seconds
        return cls(timeout_seconds=timeout_seconds or (deadline + 600 if deadline else 0.0),
                   start_timeout_seconds=settings.scheduling_settings.start_deadline_seconds,
                   **options)

    def __init__(self, *, poll_seconds: float = 10.0, timeout_seconds: float = 0.0,
                 start_timeout_seconds: float = 0.0,
                 retry_seconds: tuple[float, float] = (1.0, 30.0),
                 unreachable_seconds: float = 600.0,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 log: Callable[[str], None] | None = None):
        self.poll_seconds = poll_seconds
        self.timeout_seconds = timeout_seconds
        self.start_timeout_seconds = start_timeout_seconds
        self.retry_seconds = retry_seconds
        self._queued_seconds = 0.0  # of the job being waited for
        self.unreachable_seconds = unreachable_seconds
        self.clock = clock
        self.sleep = sleep
        self.log = log or (lambda message: print(message, file=sys.stdout, flush=True))

    def run(self, job: RemoteJob) -> Any:
        """Runs ``job`` to success and returns its last read; raises :class:`JobFailed`,
        :class:`JobVanished`, :class:`JobRefused`, :class:`ApiUnreachable`,
        :class:`ReadRefused`, :class:`DeadlineExceeded` or :class:`Terminated` (after cleaning
        up where that applies)."""
        guard = _SigtermGuard(job.where, self.log)
        previous = self._install(guard)
        started = self.clock()
        try:
            self._create(job, guard, started)
            return self._wait(job, started)
        except (JobVanished, JobRefused, JobLeftAsIs):
            raise  # nothing to clean up: gone, never created, or left for a retry to re-attach
        except BaseException as error:
            guard.cleaning = True
            why = (TERMINATED if isinstance(error, Terminated | KeyboardInterrupt)
                   else DEADLINE if isinstance(error, DeadlineExceeded)
                   else FAILED if isinstance(error, JobFailed) else ERROR)
            self._cleanup(job, why)
            raise
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    @staticmethod
    def _install(guard: _SigtermGuard):
        if threading.current_thread() is not threading.main_thread():
            return None
        return signal.signal(signal.SIGTERM, guard)

    # A transient answer to a cleanup (a 5xx, a 429, a dropped connection) is retried, briefly:
    # after SIGTERM the pod has only its grace period (30 s by default) left. The hooks delete
    # or roll back, which is safe to repeat; a 404 on a repeat says the earlier try went
    # through and only its answer was lost.
    CLEANUP_RETRY_SECONDS = (1.0, 2.0, 4.0)

    def _cleanup(self, job: RemoteJob, why: str) -> None:
        retries = iter(self.CLEANUP_RETRY_SECONDS)
        repeated = False
        while True:
            try:
                job.cleanup(why)
                return
            except Exception as error:  # the original error is what the step reports
                # A 404 says the cleanup's goal holds. On a first try too: someone else deleted
                # the job, or the HTTP client repeated our DELETE itself after its answer was
                # lost (urllib3 retries idempotent methods, DELETE among them, by default).
                if api_status(error) == 404:
                    self.log(f"{job.where} is gone: the cleanup's earlier try went through"
                             if repeated else f"{job.where} is already gone")
                    return
                delay = next(retries, None) if is_transient(error) else None
                if delay is None:
                    self.log(f"could not clean up {job.where} ({why}): {api_message(error)}")
                    return
                self.log(f"cleaning up {job.where} failed transiently ({api_message(error)}); "
                         f"retrying in {delay:g} s")
                self.sleep(delay)
                repeated = True

    def _create(self, job: RemoteJob, guard: _SigtermGuard, started: float) -> None:
        if job.create is None:
            return
        delay = self.retry_seconds[0]
        trouble_since = None
        while True:
            guard.deferring = True
            try:
                job.create()
            except Exception as error:
                guard.deferring = False
                guard.check()
                if _already_exists(error):
                    self.log(f"re-attaching to the existing {job.where}")
                    return
                if not is_transient(error):
                    status = api_status(error)
                    by = "the API server refused to" if status else "could not"
                    raise JobRefused(f"{by} create {job.where}: {api_message(error)}",
                                     status) from error
                trouble_since = self._retry(job, "creating", error, started, trouble_since,
                                            delay)
                delay = min(delay * 2, self.retry_seconds[1])
                continue
            guard.deferring = False
            guard.check()
            self.log(f"{job.created_verb} {job.where}" + (f" ({job.describe_created})"
                                               if job.describe_created else ""))
            return

    def _wait(self, job: RemoteJob, started: float) -> Any:
        shown = None
        delay = self.retry_seconds[0]
        trouble_since = None
        self._queued_seconds = 0.0
        queued_since: float | None = None
        while True:
            try:
                current = job.read()
            except Exception as error:
                if api_status(error) == 404:
                    raise JobVanished(
                        f"{job.where} vanished: the API server answers 404 Not Found for it. "
                        "Someone deleted it, or its namespace, while this step waited"
                    ) from error
                self._refused(job, error)
                if not is_transient(error):
                    raise RemoteJobError(f"reading {job.where} failed: {api_message(error)}"
                                         ) from error
                trouble_since = self._retry(job, "reading", error, started, trouble_since,
                                            delay)
                delay = min(delay * 2, self.retry_seconds[1])
                continue
            try:
                status = job.status(current)
            except Exception as error:
                # The callback's own reads (a rollout's Deployment): classified as the job's
                # read is; anything else it raises is the caller's verdict, passed on as is.
                self._refused(job, error)
                if not is_transient(error):
                    raise
                trouble_since = self._retry(job, "reading", error, started, trouble_since,
                                            delay)
                delay = min(delay * 2, self.retry_seconds[1])
                continue
            delay, trouble_since = self.retry_seconds[0], None
            if status.progress and status.progress != shown:
                shown = status.progress
                self.log(f"{job.where}: {status.progress}")
            now = self.clock()
            if queued_since is not None:  # queued since the last read: that time is the queue's
                self._queued_seconds += now - queued_since
            queued_since = now if status.queued and not status.done else None
            if queued_since is not None and self.start_timeout_seconds and \
                    self._queued_seconds >= self.start_timeout_seconds:
                raise StartDeadlineExceeded(
                    f"{job.where} was still queued after {self._queued_seconds / 60:.0f} "
                    f"minute(s), past its start deadline of {self.start_timeout_seconds / 60:g} "
                    f"minute(s) ({status.progress}); it was deleted. Give the queue more "
                    "quota, or raise kubernetes.scheduling.start_deadline_minutes")
            if status.done:
                if status.failed:
                    raise JobFailed(f"{job.where} failed: {status.reason or status.progress}")
                return current
            self._pause(job, started, self.poll_seconds)

    @staticmethod
    def _refused(job: RemoteJob, error: BaseException) -> None:
        """Raises :class:`ReadRefused` for a 401, 403 or 410 while waiting: the job is left
        as it is (see the module docstring)."""
        status = left_as_is_status(error)
        if status is None:
            return
        raise ReadRefused(
            f"reading {job.where} was refused ({api_message(error)}): {_REFUSED_BECAUSE[status]}."
            f" The job is left as it is, still running and not deleted, and a retry of this "
            "step re-attaches to it", status) from error

    def _retry(self, job: RemoteJob, doing: str, error: BaseException, started: float,
               trouble_since: float | None, delay: float) -> float:
        """Logs a transient error and pauses ``delay``; raises :class:`ApiUnreachable` once
        errors have lasted ``unreachable_seconds``. Returns when the trouble began."""
        now = self.clock()
        trouble_since = now if trouble_since is None else trouble_since
        if now - trouble_since >= self.unreachable_seconds:
            raise ApiUnreachable(
                f"{doing} {job.where} kept failing for {now - trouble_since:.0f} s (last: "
                f"{api_message(error)}); the job is left as it is, and a retry of this step "
                "re-attaches to it"
            ) from error
        self.log(f"{doing} {job.where} failed transiently ({api_message(error)}); "
                 f"retrying in {delay:g} s")
        self._pause(job, started, delay)
        return trouble_since

    def _pause(self, job: RemoteJob, started: float, seconds: float) -> None:
        """Sleeps ``seconds``, or raises :class:`DeadlineExceeded` if the deadline comes
        first."""
        if self.timeout_seconds:
            remaining = started + self._queued_seconds + self.timeout_seconds - self.clock()
            if remaining <= 0:
                raise DeadlineExceeded(f"{job.where} did not finish within the step's "
                                       f"{self.timeout_seconds:g} s")
            seconds = min(seconds, remaining)
        self.sleep(seconds)
