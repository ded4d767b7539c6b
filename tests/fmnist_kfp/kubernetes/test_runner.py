"""The remote-job runner (fmnist_kfp/kubernetes/runner.py) with a scripted job and a fake clock:
no HTTP, no real waiting. The launchers' tests run it against the API stand-ins."""

from __future__ import annotations

import os
import signal

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from fmnist_kfp.kubernetes.runner import (
    DEADLINE,
    ERROR,
    FAILED,
    TERMINATED,
    ApiUnreachable,
    DeadlineExceeded,
    JobFailed,
    JobRefused,
    JobStatus,
    JobVanished,
    ReadRefused,
    RemoteJob,
    RemoteJobError,
    RemoteJobRunner,
    Terminated,
    left_as_is_status,
)
from tests.fmnist_kfp.kubernetes.test_api_errors import api_error, sdk_wrapped


class Clock:
    def __init__(self):
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Script:
    """A job whose reads play back ``reads`` (states or exceptions), the last one repeating."""

    def __init__(self, reads, create_errors=()):
        self.reads = list(reads)
        self.create_errors = list(create_errors)
        self.calls: list[str] = []

    def create(self):
        self.calls.append("create")
        if self.create_errors:
            raise self.create_errors.pop(0)

    def read(self):
        self.calls.append("read")
        item = self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]
        if isinstance(item, BaseException):
            raise item
        if callable(item):
            return item()
        return item

    @staticmethod
    def status(state: str) -> JobStatus:
        return JobStatus(done=state in ("Succeeded", "Failed"), failed=state == "Failed",
                         progress=state, reason="TFJobFailed: 1 Worker replica(s) failed"
                         if state == "Failed" else "")

    def cleanup(self, why: str):
        self.calls.append(f"cleanup:{why}")

    def job(self, create: bool = True) -> RemoteJob:
        return RemoteJob(kind="TFJob", namespace="team-a", name="job", read=self.read,
                         status=self.status, cleanup=self.cleanup,
                         create=self.create if create else None, describe_created="2 workers")


def _runner(clock: Clock, lines: list[str], **kwargs) -> RemoteJobRunner:
    return RemoteJobRunner(poll_seconds=5, clock=clock, sleep=clock.sleep, log=lines.append,
                           **kwargs)


def test_creates_polls_and_prints_a_line_per_change():
    clock, lines = Clock(), []
    script = Script(["Created", "Running", "Running", "Running", "Succeeded"])
    assert _runner(clock, lines).run(script.job()) == "Succeeded"
    assert lines == ["created TFJob team-a/job (2 workers)", "TFJob team-a/job: Created",
                     "TFJob team-a/job: Running", "TFJob team-a/job: Succeeded"]
    assert script.calls == ["create"] + ["read"] * 5  # no cleanup after a success
    assert clock.sleeps == [5] * 4


@pytest.mark.parametrize("conflict", [
    api_error(409, 'tfjobs.kubeflow.org "job" already exists'),
    sdk_wrapped(api_error(409)),
    Exception("A Katib Experiment with the name team-a/job already exists."),  # KatibClient
])
def test_a_conflict_on_create_reattaches(conflict):
    clock, lines = Clock(), []
    script = Script(["Succeeded"], create_errors=[conflict])
    _runner(clock, lines).run(script.job())
    assert lines[0] == "re-attaching to the existing TFJob team-a/job"
    assert script.calls == ["create", "read"]


@pytest.mark.parametrize("transient", [
    api_error(500), api_error(503), api_error(429), api_error(408),
    sdk_wrapped(api_error(502)),
    TimeoutError("Timeout to get TFJob: team-a/job"),  # the SDK's client-side timeout
    sdk_wrapped(urllib3.exceptions.MaxRetryError(None, "/", "connection refused")),
    sdk_wrapped(ConnectionResetError("reset by peer")),
])
def test_transient_read_errors_are_retried_and_never_clean_up(transient):
    clock, lines = Clock(), []
    script = Script(["Running", transient, transient, transient, "Succeeded"])
    assert _runner(clock, lines).run(script.job()) == "Succeeded"
    assert not any(call.startswith("cleanup") for call in script.calls)
    assert clock.sleeps == [5, 1, 2, 4]  # a poll, then the backoff doubling from 1 s
    assert sum("failed transiently" in line for line in lines) == 3


def test_the_backoff_is_bounded():
    clock, lines = Clock(), []
    script = Script([api_error(503)] * 9 + ["Succeeded"])
    _runner(clock, lines, retry_seconds=(1, 8)).run(script.job(create=False))
    assert clock.sleeps == [1, 2, 4, 8, 8, 8, 8, 8, 8]


def test_an_api_unreachable_for_too_long_fails_the_step_but_leaves_the_job():
    clock, lines = Clock(), []
    script = Script(["Running", api_error(503)])
    with pytest.raises(ApiUnreachable, match="TFJob team-a/job.*re-attaches"):
        _runner(clock, lines, unreachable_seconds=60).run(script.job())
    assert not any(call.startswith("cleanup") for call in script.calls)
    assert 60 <= clock.now - 1000 - 5 < 60 + 30  # bounded by the budget plus one backoff


def test_a_job_that_vanished_is_an_error_naming_it():
    clock, lines = Clock(), []
    script = Script(["Running", sdk_wrapped(api_error(404))])
    with pytest.raises(JobVanished, match="TFJob team-a/job vanished.*404"):
        _runner(clock, lines).run(script.job())
    assert not any(call.startswith("cleanup") for call in script.calls)


def test_a_failed_job_fails_with_its_reason_and_is_cleaned_up():
    clock, lines = Clock(), []
    script = Script(["Running", "Failed"])
    with pytest.raises(JobFailed, match="TFJob team-a/job failed: TFJobFailed: 1 Worker"):
        _runner(clock, lines).run(script.job())
    assert script.calls[-1] == f"cleanup:{FAILED}"


def test_a_permanent_read_error_names_the_api_servers_answer_and_cleans_up():
    clock, lines = Clock(), []
    script = Script(["Running", sdk_wrapped(api_error(422, "unprocessable"))])
    with pytest.raises(RemoteJobError, match="HTTP 422 Unprocessable Entity: unprocessable"):
        _runner(clock, lines).run(script.job())
    assert script.calls[-1] == f"cleanup:{ERROR}"


@pytest.mark.parametrize("status", [401, 403, 410])
@pytest.mark.parametrize("wrap", [False, True])
def test_an_auth_or_gone_error_while_waiting_leaves_the_job_for_a_retry(status, wrap):
    """401 and 403 speak of the step's access and 410 of what the server still keeps, not of
    the job (Kubernetes API conventions, "HTTP Status codes": kubernetes/community
    contributors/devel/sig-architecture/api-conventions.md lines 1514-1530 and 1562-1566 at
    24e7d8f). Until the fix the runner took them for a permanent error and deleted a job that
    a retried step could have re-attached to."""
    clock, lines = Clock(), []
    error = api_error(status, "denied")
    script = Script(["Running", sdk_wrapped(error) if wrap else error])
    with pytest.raises(ReadRefused) as refused:
        _runner(clock, lines).run(script.job())
    assert refused.value.status == status
    assert not any(call.startswith("cleanup") for call in script.calls)
    message = str(refused.value)
    assert message.startswith(f"reading TFJob team-a/job was refused (HTTP {status} ")
    assert message.endswith("The job is left as it is, still running and not deleted, and a "
                            "retry of this step re-attaches to it")
    assert script.calls == ["create", "read", "read"]  # not retried: it would not change


def test_an_auth_error_in_the_status_callbacks_own_read_leaves_the_job_too():
    """A KServe rollout's status callback reads the Deployment; its 403 is classified as the
    job's read is (it rolled the rollout back before the fix)."""
    clock, lines = Clock(), []
    script = Script(["Running"])
    job = script.job()
    job.status = lambda state: _raise(
        sdk_wrapped(api_error(403, "deployments.apps is forbidden")))
    with pytest.raises(ReadRefused, match="HTTP 403 Forbidden: deployments.apps is forbidden"):
        _runner(clock, lines).run(job)
    assert not any(call.startswith("cleanup") for call in script.calls)


def test_a_transient_error_in_the_status_callback_is_retried():
    clock, lines = Clock(), []
    script = Script(["Running", "Running", "Succeeded"])
    failures = [api_error(503)]

    def status(state):
        if state == "Running" and failures:
            raise failures.pop()
        return Script.status(state)

    job = script.job()
    job.status = status
    assert _runner(clock, lines).run(job) == "Succeeded"
    assert not any(call.startswith("cleanup") for call in script.calls)
    assert sum("failed transiently" in line for line in lines) == 1


def test_other_errors_of_the_status_callback_pass_as_they_are_and_clean_up():
    class Verdict(Exception):
        pass

    clock, lines = Clock(), []
    script = Script(["Running"])
    job = script.job()
    job.status = lambda state: _raise(Verdict("wrong mode"))
    with pytest.raises(Verdict):
        _runner(clock, lines).run(job)
    assert script.calls[-1] == f"cleanup:{ERROR}"


def test_a_401_or_403_on_create_stays_a_refusal():
    for status in (401, 403):
        script = Script(["Running"], create_errors=[api_error(status, "no")])
        with pytest.raises(JobRefused) as refused:
            _runner(Clock(), []).run(script.job())
        assert refused.value.status == status and script.calls == ["create"]


def _raise(error: BaseException):
    raise error


def test_a_refused_create_names_the_api_servers_answer_and_creates_nothing():
    clock, lines = Clock(), []
    refusal = sdk_wrapped(api_error(422, 'TFJob.kubeflow.org "job" is invalid: kind'))
    script = Script(["Running"], create_errors=[refusal])
    with pytest.raises(JobRefused, match="HTTP 422 Unprocessable Entity: TFJob") as refused:
        _runner(clock, lines).run(script.job())
    assert refused.value.status == 422
    assert script.calls == ["create"]


def test_a_transient_create_error_is_retried_and_a_conflict_then_reattaches():
    clock, lines = Clock(), []
    script = Script(["Succeeded"], create_errors=[api_error(504), api_error(409)])
    _runner(clock, lines).run(script.job())
    assert script.calls == ["create", "create", "read"]
    assert lines[-2:] == ["re-attaching to the existing TFJob team-a/job",
                          "TFJob team-a/job: Succeeded"]


def test_the_deadline_cleans_up_and_is_a_timeout():
    clock, lines = Clock(), []
    script = Script(["Running"])
    with pytest.raises(DeadlineExceeded, match="within the step's 12 s"):
        _runner(clock, lines, timeout_seconds=12).run(script.job())
    assert script.calls[-1] == f"cleanup:{DEADLINE}"
    assert clock.now - 1000 == 12  # the last pause is cut to the deadline
    assert isinstance(DeadlineExceeded("x"), TimeoutError)


def test_the_deadline_holds_while_the_api_is_down():
    clock, lines = Clock(), []
    script = Script(["Running", api_error(500)])
    with pytest.raises(DeadlineExceeded):
        _runner(clock, lines, timeout_seconds=20).run(script.job())
    assert clock.now - 1000 == 20 and script.calls[-1] == f"cleanup:{DEADLINE}"


class _Unhandled(Exception):
    """Raised by the test's own SIGTERM handler: the runner did not install one."""


@pytest.fixture
def sigterm_sentinel():
    def sentinel(signum, frame):
        raise _Unhandled("SIGTERM reached the handler that was there before the runner")

    previous = signal.signal(signal.SIGTERM, sentinel)
    yield sentinel
    signal.signal(signal.SIGTERM, previous)


def test_sigterm_while_waiting_cleans_up_and_exits_143(sigterm_sentinel):
    clock, lines = Clock(), []

    def terminated():
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before this returns
        return "Running"

    script = Script(["Running", terminated])
    with pytest.raises(Terminated) as exit_info:
        _runner(clock, lines).run(script.job())
    assert exit_info.value.code == 128 + signal.SIGTERM
    assert script.calls[-1] == f"cleanup:{TERMINATED}"
    assert signal.getsignal(signal.SIGTERM) is sigterm_sentinel  # restored


def test_sigterm_while_the_create_call_is_in_flight_cleans_up_what_it_created(
        sigterm_sentinel):
    clock, lines = Clock(), []
    script = Script(["Running"])

    def create():
        script.calls.append("create")
        os.kill(os.getpid(), signal.SIGTERM)  # arrives mid-call; the call still completes
        script.calls.append("created")

    job = script.job()
    job.create = create
    with pytest.raises(Terminated):
        _runner(clock, lines).run(job)
    assert script.calls == ["create", "created", f"cleanup:{TERMINATED}"]
    assert "SIGTERM while creating TFJob team-a/job" in lines[0]


def test_a_second_sigterm_during_cleanup_lets_the_cleanup_finish(sigterm_sentinel):
    clock, lines = Clock(), []
    script = Script([lambda: os.kill(os.getpid(), signal.SIGTERM)])

    def cleanup(why):
        os.kill(os.getpid(), signal.SIGTERM)
        script.calls.append(f"cleanup:{why}")

    job = script.job(create=False)
    job.cleanup = cleanup
    with pytest.raises(Terminated):
        _runner(clock, lines).run(job)
    assert script.calls[-1] == f"cleanup:{TERMINATED}"
    assert lines[-1] == "SIGTERM again: finishing the cleanup of TFJob team-a/job first"


def test_a_failing_cleanup_does_not_hide_the_original_error():
    clock, lines = Clock(), []
    script = Script(["Failed"])

    def cleanup(why):  # as the SDK's delete_job raises it: while handling the ApiException
        try:
            raise api_error(500)
        except ApiException:
            raise RuntimeError("Failed to delete TFJob: team-a/job")  # noqa: B904

    job = script.job()
    job.cleanup = cleanup
    with pytest.raises(JobFailed):
        _runner(clock, lines).run(job)
    assert lines[-1].startswith("could not clean up TFJob team-a/job (failed): HTTP 500")


def test_reads_refused_so_leave_the_job_as_it_is():
    # Reading the error itself: tests/fmnist_kfp/kubernetes/test_api_errors.py.
    assert [left_as_is_status(sdk_wrapped(api_error(code))) for code in
            (401, 403, 404, 409, 410, 422, 500)] == [401, 403, None, None, 410, None, None]
    assert left_as_is_status(ValueError("no API here")) is None


# ---------------------------------------------------------------------------------------------
# What the step's log and error say, word for word: users read them to know what happened.


def _cleanup_answers(*answers):
    """A cleanup hook that plays back ``answers`` (an exception raises, None succeeds) and
    counts its calls."""
    calls = []

    def cleanup(why):
        calls.append(why)
        answer = answers[min(len(calls), len(answers)) - 1]
        if answer is not None:
            raise answer

    return cleanup, calls


def test_a_transient_answer_to_the_cleanup_is_retried_before_the_job_is_left_behind():
    """Before: one 504 on the Experiment's DELETE past the deadline left it running with its
    trials (the stand-ins' fault mode, seed 11)."""
    clock, lines = Clock(), []
    job = Script(["Running"]).job()
    job.cleanup, calls = _cleanup_answers(api_error(504), None)
    with pytest.raises(DeadlineExceeded):
        _runner(clock, lines, timeout_seconds=12).run(job)
    assert calls == [DEADLINE, DEADLINE]
    assert lines[-1] == ("cleaning up TFJob team-a/job failed transiently (HTTP 504); "
                         "retrying in 1 s")


def test_a_lost_answer_to_a_delete_that_went_through_is_not_an_error():
    clock, lines = Clock(), []
    job = Script(["Failed"]).job()
    job.cleanup, calls = _cleanup_answers(api_error(503), api_error(404))
    with pytest.raises(JobFailed):
        _runner(clock, lines).run(job)
    assert len(calls) == 2
    assert lines[-1] == "TFJob team-a/job is gone: the cleanup's earlier try went through"


def test_the_cleanups_retries_are_few_and_short_and_a_404_at_first_is_reported():
    """After SIGTERM the pod has its grace period (30 s by default) for the cleanup."""
    clock, lines = Clock(), []
    job = Script(["Failed"]).job()
    job.cleanup, calls = _cleanup_answers(api_error(500))
    start = clock.now
    with pytest.raises(JobFailed):
        _runner(clock, lines).run(job)
    assert len(calls) == 4 and clock.now - start == 1 + 2 + 4
    assert lines[-1].startswith("could not clean up TFJob team-a/job (failed): HTTP 500")
    # A 404 on the first try: gone already (deleted by someone else, or by the HTTP client's
    # own repeat of a DELETE whose answer was lost: test_faults_on_the_cluster.py), no failure.
    job = Script(["Failed"]).job()
    job.cleanup, calls = _cleanup_answers(api_error(404), None)
    with pytest.raises(JobFailed):
        _runner(Clock(), lines).run(job)
    assert calls == [FAILED] and lines[-1] == "TFJob team-a/job is already gone"


def test_every_line_the_runner_prints_and_every_error_it_raises():
    clock, lines = Clock(), []
    busy = api_error(503, "etcd is busy")
    busy.reason = "Service Unavailable"
    script = Script(["Running", sdk_wrapped(busy), "Succeeded"])
    _runner(clock, lines).run(script.job())
    assert lines == [
        "created TFJob team-a/job (2 workers)",
        "TFJob team-a/job: Running",
        "reading TFJob team-a/job failed transiently (HTTP 503 Service Unavailable: etcd is "
        "busy); retrying in 1 s",
        "TFJob team-a/job: Succeeded",
    ]

    lines.clear()
    with pytest.raises(JobVanished) as vanished:
        _runner(Clock(), lines).run(Script([api_error(404)]).job(create=False))
    assert str(vanished.value) == (
        "TFJob team-a/job vanished: the API server answers 404 Not Found for it. Someone "
        "deleted it, or its namespace, while this step waited")

    with pytest.raises(ApiUnreachable) as unreachable:
        _runner(Clock(), [], unreachable_seconds=7).run(Script([busy]).job(create=False))
    assert str(unreachable.value) == (
        "reading TFJob team-a/job kept failing for 7 s (last: HTTP 503 Service Unavailable: "
        "etcd is busy); the job is left as it is, and a retry of this step re-attaches to it")

    script = Script(["Running"], create_errors=[ValueError("Job kind must be one of ...")])
    with pytest.raises(JobRefused) as refused:
        _runner(Clock(), []).run(script.job())
    assert str(refused.value) == ("could not create TFJob team-a/job: ValueError: Job kind "
                                  "must be one of ...")
    assert refused.value.status is None

    with pytest.raises(JobFailed) as failed:
        _runner(Clock(), []).run(Script(["Failed"]).job())
    assert str(failed.value) == "TFJob team-a/job failed: TFJobFailed: 1 Worker replica(s) failed"

    job = Script(["Failed"]).job()
    job.status = lambda state: JobStatus(done=True, failed=True, progress="Failed (no reason)")
    with pytest.raises(JobFailed, match=r"^TFJob team-a/job failed: Failed \(no reason\)$"):
        _runner(Clock(), []).run(job)


def test_the_api_unreachable_budget_is_measured_from_the_first_error():
    clock, lines = Clock(), []
    busy = api_error(503)
    script = Script(["Running", busy, busy, busy, busy, "Succeeded"])
    # Errors at t=5, 6, 8, 12: 7 s after the first, the budget is spent at the fourth.
    with pytest.raises(ApiUnreachable, match="kept failing for 7 s"):
        _runner(clock, lines, unreachable_seconds=7).run(script.job(create=False))
    assert clock.sleeps == [5, 1, 2, 4]


def test_a_read_that_recovers_resets_the_backoff_and_the_budget():
    clock, lines = Clock(), []
    busy = api_error(503)
    script = Script([busy, busy, "Running", busy, busy, "Succeeded"])
    _runner(clock, lines, unreachable_seconds=3.5).run(script.job(create=False))
    assert clock.sleeps == [1, 2, 5, 1, 2]


def test_the_sigterm_lines(sigterm_sentinel):
    lines: list[str] = []
    script = Script([lambda: os.kill(os.getpid(), signal.SIGTERM)])
    with pytest.raises(Terminated):
        _runner(Clock(), lines).run(script.job(create=False))
    assert lines == ["SIGTERM: cleaning up TFJob team-a/job"]

    lines.clear()
    job = Script(["Running"]).job()
    job.create = lambda: os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(Terminated):
        _runner(Clock(), lines).run(job)
    assert lines == ["SIGTERM while creating TFJob team-a/job: cleaning it up once the create "
                     "call returns"]


def test_a_sigterm_during_a_transient_create_error_cleans_up(sigterm_sentinel):
    """The create may have gone through before the error: the name is cleaned up."""
    script = Script(["Running"])

    def create():
        script.calls.append("create")
        os.kill(os.getpid(), signal.SIGTERM)
        raise api_error(504)

    job = script.job()
    job.create = create
    with pytest.raises(Terminated):
        _runner(Clock(), []).run(job)
    assert script.calls == ["create", f"cleanup:{TERMINATED}"]
