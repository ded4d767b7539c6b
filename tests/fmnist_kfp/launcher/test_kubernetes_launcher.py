"""The TFJob launcher through the real TrainingClient against the API stand-in
(tests/standins/kubernetes.py), whose controller acts like the training operator's
(tests/standins/tfjob_operator.py: cumulative conditions, ExitCode restarts, pods with the
operator's labels). Time is fake: every wait is bounded by a deadline in fake seconds, so a
regression fails fast instead of hanging until pytest's timeout."""

from __future__ import annotations

import io
import json
import queue
import signal
import subprocess

import pytest
import requests

from fmnist_kfp.errors import TrainingJobError, UserInputError
from fmnist_kfp.launcher.tfjob_launcher import TFJobLauncher
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.training_job import TrainingJobSpec
from tests.crd_schemas import validate_strict
from tests.launcher_harness import drain, read_until, spawn_script
from tests.standins.kubernetes import FakeTime, KubernetesStandIn

NAME = "fmnist-basic-3f2a9c"
JOBS = "/apis/kubeflow.org/v1/namespaces/kubeflow/tfjobs"
DEADLINE = 600.0  # fake seconds: a launcher that never sees the end fails the test at once


def _spec(tmp_path, **overrides) -> TrainingJobSpec:
    values = dict(name=NAME, config=TrainingConfig(model_type="basic"),
                  data_dir="/mnt/fmnist/dataset", export_dir=str(tmp_path / "model" / "1"),
                  work_dir=str(tmp_path / "model"), num_workers=2)
    values.update(overrides)
    return TrainingJobSpec(**values)


def _launcher(standin, restart_policy: str = "ExitCode", **kwargs) -> TFJobLauncher:
    settings = KubernetesSettings(image="ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0",
                                  namespace="kubeflow", pvc_name="fmnist-pvc",
                                  restart_policy=restart_policy)
    time = FakeTime()
    values = dict(training_client=standin.training_client(), poll_seconds=5,
                  timeout_seconds=DEADLINE, out=io.StringIO(), request_timeout_seconds=2,
                  clock=time, sleep=time.sleep)
    values.update(kwargs)
    return TFJobLauncher(settings, **values)


def _finish(tmp_path) -> None:
    """What the chief leaves on shared storage when the job succeeds."""
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "result.json").write_text(json.dumps({"model_type": "basic"}))


def _conditions(standin) -> list[tuple[str, str]]:
    job = standin.job(NAME)
    return [(c["type"], c["status"]) for c in job["status"]["conditions"]]


def test_creates_a_valid_tfjob_and_returns_the_chiefs_result(tmp_path):
    _finish(tmp_path)
    with KubernetesStandIn() as standin:
        launcher = _launcher(standin)
        outcome = launcher.run(_spec(tmp_path))
        final = _conditions(standin)
    [posted] = standin.posts()
    validate_strict(posted, "tfjob.kubeflow.org_v1.yaml", "v1")
    assert (posted["apiVersion"], posted["kind"]) == ("kubeflow.org/v1", "TFJob")
    assert posted["metadata"]["name"] == NAME
    assert outcome.result == {"model_type": "basic"} and outcome.restarts == 0
    assert ("DELETE", f"{JOBS}/{NAME}") not in standin.methods()
    # kubeflow/trainer v1.9.2 pkg/util/status.go: Running flips to False in place.
    assert final == [("Created", "True"), ("Running", "False"), ("Succeeded", "True")]
    assert outcome.wall_seconds == launcher.runner.clock() > 0  # fake seconds polled
    lines = launcher.out.getvalue().splitlines()
    assert lines[0] == f"created TFJob kubeflow/{NAME} (2 replicas, at most 2 restarts)"
    states = [line.split(": ", 1)[1] for line in lines if line.startswith("TFJob kubeflow/")]
    assert states == ["Pending (no status yet)", f"Created (TFJob {NAME} is created.)",
                      f"Running (TFJob kubeflow/{NAME} is running.)",
                      f"Succeeded (TFJob kubeflow/{NAME} successfully completed.)"]


def test_success_is_read_from_the_conditions_not_their_order(tmp_path):
    """The final list is [Created=True, Running=False, Succeeded=True]: a launcher that took
    the first condition that holds would wait for Created to end, forever."""
    _finish(tmp_path)
    with KubernetesStandIn(running_ticks=1) as standin:
        _launcher(standin).run(_spec(tmp_path))
        assert _conditions(standin)[0] == ("Created", "True")


def test_failed_wins_over_succeeded_when_both_hold(tmp_path):
    """With a Chief, one reconcile can set Succeeded (the chief finished) and then Failed (a
    worker failed): kubeflow/trainer v1.9.2 tfjob_controller.go lines 419-508 visit Chief before
    Worker; pkg/util/status.go keeps both. (Under ExitCode, ReconcilePods sets Failed first;
    with restartPolicy Never it does not.) Katib's failure condition is checked first too."""
    _finish(tmp_path)
    with KubernetesStandIn(scripts={"worker-1": [1]}, running_ticks=1) as standin:
        launcher = _launcher(standin, restart_policy="Never")
        with pytest.raises(TrainingJobError, match="has failed because 1 Worker replica"):
            launcher.run(_spec(tmp_path, use_chief=True))
        assert ("Succeeded", "True") in _conditions(standin)  # both hold
    assert ("DELETE", f"{JOBS}/{NAME}") in standin.methods()


def test_a_failed_tfjob_fails_the_step_with_the_operators_reason_and_is_deleted(tmp_path):
    with KubernetesStandIn(scripts={"worker-0": [2]}, logs={"worker-0": "Traceback: boom\n"}
                           ) as standin:
        launcher = _launcher(standin)
        with pytest.raises(TrainingJobError) as failure:
            launcher.run(_spec(tmp_path))
    message = str(failure.value)
    # ExitCode with a code of 1-127: common/pod.go v1.9.2 lines 367-372 wins (Failed freezes).
    assert f'TFJob kubeflow/{NAME} failed: TFJobFailed: job "{NAME}" is failing because ' \
           '"Worker" replica(s) failed.' in message
    assert ("DELETE", f"{JOBS}/{NAME}") in standin.methods() and standin.jobs == {}
    out = launcher.out.getvalue()
    assert f"[{NAME}-worker-0] Traceback: boom" in out  # the master's log, before deletion
    assert out.index("Traceback: boom") < out.index("deleted TFJob")
    assert out.splitlines()[-2:] == [
        f"deleting the failed TFJob kubeflow/{NAME} so that a retry of this step starts afresh",
        f"deleted TFJob kubeflow/{NAME}"]


def test_the_masters_log_is_printed_once_per_line_across_polls(tmp_path):
    _finish(tmp_path)
    log = "2025-01-01T00:00:01.000000Z epoch=1 epochs=2 loss=0.5\n" \
          "2025-01-01T00:00:02.000000Z epoch=2 epochs=2 loss=0.3\n"
    with KubernetesStandIn(logs={"worker-0": log, "worker-1": "not the master\n"},
                           running_ticks=4) as standin:
        launcher = _launcher(standin)
        launcher.run(_spec(tmp_path))
    out = launcher.out.getvalue()
    assert out.count("epoch=1 epochs=2") == 1 and out.count("epoch=2 epochs=2") == 1
    assert "not the master" not in out
    reads = [p for m, p in standin.methods() if p.endswith("/log")]
    assert reads and all(f"/pods/{NAME}-worker-0/log" in p for p in reads)


def test_a_retried_launcher_reattaches_instead_of_creating_a_second_job(tmp_path):
    _finish(tmp_path)
    with KubernetesStandIn() as standin:
        launcher = _launcher(standin)
        from fmnist_kfp.kubernetes.manifest import to_manifest
        from fmnist_kfp.kubernetes.tfjob import build_tfjob

        standin.add_job({**to_manifest(build_tfjob(_spec(tmp_path), launcher.settings)),
                         "metadata": {"name": NAME, "namespace": "kubeflow"}})
        launcher.run(_spec(tmp_path))  # a retry of the launcher pod
    assert list(standin.jobs) == [("kubeflow", NAME)]
    assert "re-attaching to the existing TFJob kubeflow/" + NAME in launcher.out.getvalue()
    assert len(standin.posts()) == 1  # answered 409 AlreadyExists


@pytest.mark.parametrize("fault", [500, 503, 429, "timeout", "reset"])
def test_a_transient_api_error_mid_run_leaves_the_job_alive_and_the_step_succeeds(
        tmp_path, fault):
    """One bad read while the TFJob runs (at 1cd2394 it deleted the running job and failed
    the step)."""
    _finish(tmp_path)
    with KubernetesStandIn(running_ticks=4) as standin:
        standin.timeout_hold_seconds = 0.6
        launcher = _launcher(standin, request_timeout_seconds=0.5)
        original = standin.on_get

        def after_running(handler):  # the fault arrives once the job is running
            job = standin.job(NAME)
            if job and any(c["type"] == "Running" for c in job["status"].get("conditions", [])):
                standin.on_get = original
                standin.inject("GET", "tfjobs", fault, fault)
            original(handler)

        standin.on_get = after_running
        outcome = launcher.run(_spec(tmp_path))
    assert outcome.result == {"model_type": "basic"}
    assert not any(m == "DELETE" for m, _ in standin.methods())
    # Exactly the two faults; a timed-out request still holds one of the SDK's pool threads
    # for a moment, which can time out a retry too.
    retries = launcher.out.getvalue().count("failed transiently")
    assert retries == 2 if fault != "timeout" else retries >= 2


def test_a_transient_error_listing_pods_is_retried_too(tmp_path):
    _finish(tmp_path)
    with KubernetesStandIn() as standin:
        standin.inject("GET", "pods", 500)
        _launcher(standin).run(_spec(tmp_path))
    assert not any(m == "DELETE" for m, _ in standin.methods())


@pytest.mark.parametrize("resource", ["tfjobs", "pods"])
@pytest.mark.parametrize("status", [401, 403, 410])
def test_an_auth_or_gone_answer_mid_run_leaves_the_tfjob_running(tmp_path, resource, status):
    """A 401 or 403 (the step's token or RBAC) or 410 Gone reading the TFJob or listing its
    pods says nothing about the job: it is left for a retried step to re-attach to (Kubernetes
    API conventions, "HTTP Status codes", kubernetes/community api-conventions.md lines
    1514-1530 and 1562-1566 at 24e7d8f). Until the fix the runner deleted it."""
    with KubernetesStandIn(running_ticks=50) as standin:
        launcher = _launcher(standin)
        original = standin.on_get

        def after_running(handler):
            job = standin.job(NAME)
            if job and any(c["type"] == "Running" for c in job["status"].get("conditions", [])):
                standin.on_get = original
                standin.inject("GET", resource, status)
            original(handler)

        standin.on_get = after_running
        with pytest.raises(TrainingJobError) as failure:
            launcher.run(_spec(tmp_path))
        assert standin.job(NAME) is not None and (("kubeflow", NAME) in standin.jobs)
    assert not any(m == "DELETE" for m, _ in standin.methods())
    message = str(failure.value)
    assert f"reading TFJob kubeflow/{NAME} was refused (HTTP {status} " in message
    assert "left as it is, still running and not deleted" in message
    assert "a retry of this step re-attaches to it" in message


@pytest.mark.parametrize("status", [401, 403, 410])
def test_an_auth_or_gone_answer_reading_the_log_skips_the_log_and_the_job_goes_on(tmp_path,
                                                                                  status):
    _finish(tmp_path)
    with KubernetesStandIn(logs={"worker-0": "line one\n"}, running_ticks=4) as standin:
        standin.inject("GET", "log", status)
        launcher = _launcher(standin)
        outcome = launcher.run(_spec(tmp_path))
    assert outcome.result == {"model_type": "basic"}
    assert not any(m == "DELETE" for m, _ in standin.methods())
    assert launcher.out.getvalue().count(f"[{NAME}-worker-0] line one") == 1


def test_a_job_deleted_behind_our_back_is_an_error_naming_it(tmp_path):
    with KubernetesStandIn(running_ticks=50) as standin:
        launcher = _launcher(standin)
        original = standin.on_get

        def vanish(handler):
            job = standin.job(NAME)
            if job and any(c["type"] == "Running" for c in job["status"].get("conditions", [])):
                standin.delete_behind_our_back(NAME)
            original(handler)

        standin.on_get = vanish
        with pytest.raises(TrainingJobError, match=f"TFJob kubeflow/{NAME} vanished"):
            launcher.run(_spec(tmp_path))
    assert not any(m == "DELETE" for m, _ in standin.methods())


def test_a_retryable_exit_restarts_the_pod_within_the_budget(tmp_path):
    _finish(tmp_path)
    with KubernetesStandIn(scripts={"worker-0": [(0, 8)], "worker-1": [137, 0]}) as standin:
        launcher = _launcher(standin)
        outcome = launcher.run(_spec(tmp_path, max_restarts=1))
    assert outcome.restarts == 1
    assert "Restarting, 1 restart(s) (job fmnist-basic-3f2a9c is restarting because Worker " \
           "replica(s) failed.)" in launcher.out.getvalue()


def test_max_restarts_is_the_restart_budget_on_kubernetes_too(tmp_path):
    """Under ExitCode the operator recreates a killed pod forever: backoffLimit only counts
    container restarts of running pods (kubeflow/trainer v1.9.2 pkg/core/job.go lines 95-133,
    issue kubeflow/trainer#2045). At 1cd2394 max_restarts never reached the TFJob."""
    with KubernetesStandIn(scripts={"worker-0": [137] * 10}) as standin:
        launcher = _launcher(standin)
        with pytest.raises(TrainingJobError, match="2 restarts, more than max_restarts=1 "
                                                   r"\(last: job .* is restarting"):
            launcher.run(_spec(tmp_path, max_restarts=1))
    posted = standin.posts()[0]
    assert posted["spec"]["runPolicy"]["backoffLimit"] == 2  # agrees with the budget
    assert ("DELETE", f"{JOBS}/{NAME}") in standin.methods() and standin.jobs == {}


def test_container_restarts_in_place_count_too(tmp_path):
    """restartPolicy OnFailure: the kubelet restarts the container inside the pod
    (restartCount); the job carries on (kubeflow/trainer v1.9.2 pkg/core/pod.go lines 81-88)."""
    _finish(tmp_path)
    with KubernetesStandIn(scripts={"worker-0": [1, 0]}) as standin:
        outcome = _launcher(standin, restart_policy="OnFailure").run(
            _spec(tmp_path, max_restarts=1))
    assert outcome.restarts == 1


def test_in_place_restarts_past_the_budget_fail_the_job(tmp_path):
    """Two in-place restarts with max_restarts=1: the operator's backoffLimit (2: core/job.go
    PastBackoffLimit, result >= limit) and the launcher's count agree."""
    with KubernetesStandIn(scripts={"worker-0": [1, 1, 1, 0]}) as standin:
        launcher = _launcher(standin, restart_policy="OnFailure")
        with pytest.raises(TrainingJobError, match="reached the specified backoff limit|2 "
                                                   "restarts, more than max_restarts=1"):
            launcher.run(_spec(tmp_path, max_restarts=1))


def test_the_masters_log_is_followed_across_a_restart(tmp_path):
    _finish(tmp_path)
    with KubernetesStandIn(scripts={"worker-0": [137, 0]},
                           logs={"worker-0": "2025-01-01T00:00:01Z epoch=1 epochs=1\n"}
                           ) as standin:
        launcher = _launcher(standin)
        outcome = launcher.run(_spec(tmp_path, max_restarts=1))
    assert outcome.restarts == 1
    # Printed once per pod: the recreated pod (a new UID) logs from its own start.
    assert launcher.out.getvalue().count(f"[{NAME}-worker-0] 2025-01-01T00:00:01Z epoch=1") == 2


def test_no_restarts_means_backoff_limit_zero_which_fails_at_the_first_kill(tmp_path):
    """backoffLimit 0 fails the job at the first new pod failure, even a retryable one
    (pkg/controller.v1/common/job.go v1.9.2 lines 193-198)."""
    with KubernetesStandIn(scripts={"worker-1": [137, 0]}) as standin:
        with pytest.raises(TrainingJobError, match="reached the specified backoff limit"):
            _launcher(standin).run(_spec(tmp_path, max_restarts=0))
    assert standin.posts()[0]["spec"]["runPolicy"]["backoffLimit"] == 0


def test_the_step_deadline_deletes_the_job(tmp_path):
    with KubernetesStandIn(running_ticks=10_000) as standin:
        launcher = _launcher(standin, timeout_seconds=30)
        with pytest.raises(TimeoutError, match="within the step's 30 s"):
            launcher.run(_spec(tmp_path))
    assert ("DELETE", f"{JOBS}/{NAME}") in standin.methods()


def test_a_wrong_api_version_or_kind_is_refused_and_fails_at_once(tmp_path, monkeypatch):
    """What a real API server answers (see tests/standins/kubernetes.py): the step fails with it, it
    neither retries nor waits."""
    import fmnist_kfp.launcher.tfjob_launcher as module

    build = module.build_tfjob

    def wrong(version: str, kind: str):
        def build_wrong(spec, settings):
            tfjob = build(spec, settings)
            tfjob.api_version, tfjob.kind = version, kind
            return tfjob
        return build_wrong

    # (A kind the SDK does not know it refuses itself, before sending: Job kind must be ...)
    for version, kind, status in (("kubeflow.org/v2", "TFJob", "HTTP 400 Bad Request: the "
                                   "API version in the data"),
                                  ("kubeflow.org/v1", "TfJob", "Job kind must be one of")):
        monkeypatch.setattr(module, "build_tfjob", wrong(version, kind))
        with KubernetesStandIn() as standin:
            with pytest.raises(TrainingJobError, match=f"create TFJob .*{status}"):
                _launcher(standin).run(_spec(tmp_path))
            assert standin.jobs == {}


def test_the_standin_answers_like_the_api_server():
    """The admission order and codes the stand-in enforces (tests/standins/kubernetes.py cites the
    upstream files): 404, 400, 422, then the webhook's 403, then 409. At 1cd2394 the stand-in
    took any of these; the job-name check used DNS-1123 where the webhook wants DNS-1035."""
    from fmnist_kfp.kubernetes.manifest import to_manifest
    from fmnist_kfp.kubernetes.tfjob import build_tfjob

    body = to_manifest(build_tfjob(
        TrainingJobSpec(name="ok", config=TrainingConfig(), data_dir="/d", export_dir="/e/1",
                        work_dir="/e"),
        KubernetesSettings(image="img:1", namespace="kubeflow")))
    with KubernetesStandIn() as standin:
        def post(path=JOBS, **changes):
            sent = json.loads(json.dumps(body))
            for key, value in changes.items():
                target = sent
                *parents, last = key.split(".")
                for parent in parents:
                    target = target[parent]
                target[last] = value
            return requests.post(standin.url + path, json=sent, timeout=10)

        assert post(JOBS.replace("/v1/", "/v2/")).status_code == 404
        assert post(apiVersion="kubeflow.org/v2").status_code == 400
        answer = post(kind="Tfjob")
        assert answer.status_code == 422 and "must be TFJob" in answer.json()["message"]
        invalid = post(**{"metadata.name": "Fmnist_Job"})  # no DNS-1123 subdomain: 422 first
        assert invalid.status_code == 422 and "RFC 1123 subdomain" in invalid.json()["message"]
        denied = post(**{"metadata.name": "9fmnist"})  # a subdomain, but no DNS-1035 label
        assert denied.status_code == 403
        assert denied.json()["message"].startswith(
            'admission webhook "validator.tfjob.training-operator.kubeflow.org" denied the '
            'request: metadata.name: Invalid value: "9fmnist"')
        too_long = post(**{"metadata.name": "a" * 64})
        assert too_long.status_code == 403
        worker = body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        no_image = post(**{"spec.tfReplicaSpecs.Worker.template.spec.containers":
                           [{**worker, "image": ""}]})
        assert no_image.status_code == 403 and "image: Required value" in no_image.text
        renamed = post(**{"spec.tfReplicaSpecs.Worker.template.spec.containers":
                          [{**worker, "name": "trainer"}]})
        assert renamed.status_code == 403 and "container with name tensorflow" in renamed.text
        # Not checked by the webhook (tfjob_webhook.go): any restartPolicy string.
        assert post(**{"spec.tfReplicaSpecs.Worker.restartPolicy": "exitcode"}).status_code \
            == 201
        assert post().status_code == 409


def test_pods_carry_the_operators_labels_and_are_listed_by_selector(tmp_path):
    _finish(tmp_path)
    with KubernetesStandIn(running_ticks=5) as standin:
        launcher = _launcher(standin)
        client = standin.training_client().core_api
        launcher.client.create_job(
            job=__import__("fmnist_kfp.kubernetes.tfjob", fromlist=["build_tfjob"]).build_tfjob(
                _spec(tmp_path, use_chief=True), launcher.settings), namespace="kubeflow")
        standin.training_client().get_job(NAME)  # one reconcile: the pods exist
        selector = f"training.kubeflow.org/job-name={NAME}"
        pods = client.list_namespaced_pod("kubeflow", label_selector=selector).items
        masters = client.list_namespaced_pod(
            "kubeflow", label_selector=selector + ",training.kubeflow.org/job-role=master").items
        others = client.list_namespaced_pod("kubeflow", label_selector="job-name=other").items
    assert sorted(p.metadata.name for p in pods) == [f"{NAME}-chief-0", f"{NAME}-worker-0",
                                                     f"{NAME}-worker-1"]
    assert [p.metadata.name for p in masters] == [f"{NAME}-chief-0"]  # the Chief, not worker-0
    assert others == []
    labels = masters[0].metadata.labels
    assert labels["training.kubeflow.org/replica-type"] == "chief"
    assert labels["training.kubeflow.org/replica-index"] == "0"
    assert labels["training.kubeflow.org/operator-name"] == "tfjob-controller"


def test_gpus_with_zero_workers_fail_before_anything_is_created(tmp_path):
    with KubernetesStandIn() as standin, pytest.raises(UserInputError):
        _launcher(standin).run(_spec(tmp_path, num_workers=0, gpus_per_worker=1))
    assert standin.calls == []


# ---------------------------------------------------------------------------------------------
# SIGTERM: a terminated pipeline run sends it to the launcher pod; the TFJob goes with it.

_CHILD = """
import sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from tests.standins.kubernetes import KubernetesStandIn
from tests.fmnist_kfp.launcher.test_kubernetes_launcher import _launcher, _spec

class Remote(KubernetesStandIn):
    def __init__(self):
        pass
    url = {url!r}

launcher = _launcher(Remote(), out=sys.stdout, clock=None, sleep=None, poll_seconds=0.05,
                     timeout_seconds=120)
print("launching", flush=True)
launcher.run(_spec(Path({tmp!r})))
"""


def _launch_child(standin, tmp_path) -> tuple[subprocess.Popen, queue.Queue]:
    return spawn_script(_CHILD, url=standin.url, tmp=str(tmp_path))



@pytest.mark.process
def test_sigterm_while_the_create_call_is_in_flight_deletes_what_was_created(tmp_path):
    """The stand-in holds the create until the signal has been handled; at 1cd2394 the
    handler was installed only after create returned, so the job was left behind."""
    seen: list[str] = []
    with KubernetesStandIn() as standin:
        gate = standin.gate("POST", "tfjobs")
        process, lines = _launch_child(standin, tmp_path)
        try:
            assert gate.arrived.wait(60), "the create call never arrived"
            process.send_signal(signal.SIGTERM)
            read_until(lines, "SIGTERM while creating", seen)  # handled (or the child died)
            gate.release()
            drain(process, lines, seen)
        finally:
            process.kill()
    output = "\n".join(seen)
    assert process.returncode == 128 + signal.SIGTERM, output
    assert ("DELETE", f"{JOBS}/{NAME}") in standin.methods(), output
    assert standin.jobs == {}
    assert f"deleted TFJob kubeflow/{NAME}" in output


@pytest.mark.process
def test_sigterm_while_waiting_deletes_the_job(tmp_path):
    seen: list[str] = []
    with KubernetesStandIn(running_ticks=100_000) as standin:
        process, lines = _launch_child(standin, tmp_path)
        try:
            assert read_until(lines, "Running", seen), "\n".join(seen)
            process.send_signal(signal.SIGTERM)
            drain(process, lines, seen)
        finally:
            process.kill()
    output = "\n".join(seen)
    assert process.returncode == 128 + signal.SIGTERM, output
    assert ("DELETE", f"{JOBS}/{NAME}") in standin.methods()
    assert f"deleted TFJob kubeflow/{NAME}" in output


def test_a_failed_log_read_is_skipped_and_the_lines_come_on_the_next_poll(tmp_path):
    _finish(tmp_path)
    with KubernetesStandIn(logs={"worker-0": "line one\nline two\n"}, running_ticks=4
                           ) as standin:
        standin.inject("GET", "log", 500)
        launcher = _launcher(standin)
        launcher.run(_spec(tmp_path))
    out = launcher.out.getvalue()
    assert out.count(f"[{NAME}-worker-0] line one") == 1
    assert out.count(f"[{NAME}-worker-0] line two") == 1
    assert "failed transiently" not in out  # logs are no part of the job's state


def test_the_steps_deadline_is_the_jobs_plus_ten_minutes():
    def launcher(deadline: int, **kwargs) -> TFJobLauncher:
        settings = KubernetesSettings(image="img:1", namespace="kubeflow",
                                      active_deadline_seconds=deadline)
        return TFJobLauncher(settings, training_client=object(), **kwargs)

    assert launcher(100).runner.timeout_seconds == 700
    assert launcher(0).runner.timeout_seconds == 0  # none: as long as the job runs
    assert launcher(100, timeout_seconds=5).runner.timeout_seconds == 5
    assert launcher(0, poll_seconds=3).runner.poll_seconds == 3
    assert launcher(0).namespace == "kubeflow"
