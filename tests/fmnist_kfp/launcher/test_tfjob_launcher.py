"""The TFJob launcher against the real Training Operator v1.9.2 on the local cluster
(tests/cluster.py), through the SDK's TrainingClient as the ServiceAccount bound to
manifests/standalone-rbac's Role. The job's pods run the image ``scripted-pod``
(tests/scripted_pod.py): each exits as the test scripts it, so the operator's own restart
policies, conditions, labels and backoff limit are what the launcher meets, in seconds rather
than a training run's minutes. (Training for real: test_tfjob_on_the_cluster.py.) The verdicts
that no operator run can be made to show on cue (two terminal conditions at once) are read
from objects as the API returns them, at the bottom."""

from __future__ import annotations

import io
import threading
import time
from datetime import datetime
from types import SimpleNamespace

import pytest

from fmnist_kfp.errors import TrainingJobError, UserInputError
from fmnist_kfp.launcher.tfjob_launcher import RestartCount, TFJobLauncher
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.training_job import TrainingJobSpec
from tests.cluster import SCRIPTED_IMAGE, leave_scripted_result

NAME = "fmnist-basic-3f2a9c"
STEP_SECONDS = 120  # real seconds: each job here takes a few


@pytest.fixture(scope="module")
def cluster(real_cluster):
    real_cluster.require_node()
    real_cluster.install("TRAINING_OPERATOR_V1")
    return real_cluster


@pytest.fixture
def namespace(cluster):
    """A namespace of its own per test, with the Role's ServiceAccount and the claim."""
    name = cluster.step_namespace("tfjob")
    yield name
    cluster.delete_namespace(name)  # with a job a test leaves running, as a refused read does


def _spec(tmp_path, **overrides) -> TrainingJobSpec:
    values = dict(name=NAME, config=TrainingConfig(model_type="basic"),
                  data_dir="/mnt/fmnist/dataset", export_dir=str(tmp_path / "model" / "1"),
                  work_dir=str(tmp_path / "model"), num_workers=2)
    values.update(overrides)
    return TrainingJobSpec(**values)


def _settings(namespace: str, restart_policy: str = "ExitCode") -> KubernetesSettings:
    return KubernetesSettings(image=SCRIPTED_IMAGE, namespace=namespace,
                              pvc_name="fmnist-data", cpu="100m", memory="256Mi",
                              restart_policy=restart_policy)


def _launcher(cluster, namespace: str, restart_policy: str = "ExitCode", proxy=None,
              **kwargs) -> TFJobLauncher:
    """The launcher as the Role's ServiceAccount, straight to the API server or through the
    fault ``proxy``."""
    from kubeflow.training import TrainingClient

    configuration = (cluster.configuration_as(namespace, "pipeline-runner") if proxy is None
                     else proxy.configuration(cluster.token_for(namespace, "pipeline-runner")))
    training_client = TrainingClient(client_configuration=configuration,
                                     namespace=namespace, job_kind="TFJob")
    values = dict(training_client=training_client, poll_seconds=0.5,
                  timeout_seconds=STEP_SECONDS, out=io.StringIO(), request_timeout_seconds=10)
    values.update(kwargs)
    return TFJobLauncher(_settings(namespace, restart_policy), **values)


def _tfjob_path(namespace: str) -> str:
    return f"/apis/kubeflow.org/v1/namespaces/{namespace}/tfjobs/{NAME}"


def _tfjob(cluster, namespace: str) -> dict | None:
    return cluster.read_or_none(_tfjob_path(namespace))


def _gone(cluster, namespace: str) -> bool:
    """Whether the TFJob is deleted (its finalizer-free delete completes at once)."""
    return cluster.gone(_tfjob_path(namespace), 30)


def _pods(cluster, namespace: str, selector: str = "") -> list:
    from kubernetes import client

    return client.CoreV1Api(cluster.api_client).list_namespaced_pod(
        namespace, label_selector=f"training.kubeflow.org/job-name={NAME}" + selector).items


def test_a_tfjob_runs_to_success_and_returns_the_chiefs_result(cluster, namespace, tmp_path):
    leave_scripted_result(tmp_path / "model")
    cluster.script_pods(namespace, {"*": {"seconds": 2}})
    launcher = _launcher(cluster, namespace)
    outcome = launcher.run(_spec(tmp_path))
    assert outcome.result == {"model_type": "basic"} and outcome.restarts == 0
    job = _tfjob(cluster, namespace)
    assert job is not None  # a job that succeeded is kept
    # Conditions are cumulative, Running flips to False in place; success is read from the
    # list, not its order (kubeflow/training-operator v1.9.2 pkg/util/status.go).
    final = [(c["type"], c["status"]) for c in job["status"]["conditions"]]
    assert final == [("Created", "True"), ("Running", "False"), ("Succeeded", "True")]
    lines = launcher.out.getvalue().splitlines()
    assert lines[0] == f"created TFJob {namespace}/{NAME} (2 replicas, at most 2 restarts)"
    states = [line.split(": ", 1)[1] for line in lines if line.startswith("TFJob ")]
    assert states[-1] == f"Succeeded (TFJob {namespace}/{NAME} successfully completed.)"


def test_a_failed_tfjob_fails_the_step_with_the_operators_reason_and_is_deleted(
        cluster, namespace, tmp_path):
    cluster.script_pods(namespace, {f"{NAME}-worker-0": {"exits": [2], "log": "Traceback: boom"},
                                 "*": {"seconds": 60}})
    launcher = _launcher(cluster, namespace)
    with pytest.raises(TrainingJobError) as failure:
        launcher.run(_spec(tmp_path))
    # ExitCode with a code of 1-127 is permanent (v1.9.2 pkg/controller.v1/common/pod.go).
    assert f"TFJob {namespace}/{NAME} failed: TFJobFailed: " in str(failure.value)
    assert "Worker" in str(failure.value)
    assert _gone(cluster, namespace)
    out = launcher.out.getvalue()
    assert f"[{NAME}-worker-0] Traceback: boom" in out  # the master's log, before deletion
    assert out.index("Traceback: boom") < out.index("deleted TFJob")
    assert out.splitlines()[-2:] == [
        f"deleting the failed TFJob {namespace}/{NAME} so that a retry of this step starts "
        "afresh", f"deleted TFJob {namespace}/{NAME}"]


def test_the_masters_log_is_printed_once_per_line_and_only_the_masters(
        cluster, namespace, tmp_path):
    leave_scripted_result(tmp_path / "model")
    cluster.script_pods(namespace, {
        f"{NAME}-worker-0": {"log": "epoch=1 epochs=2 loss=0.5\nepoch=2 epochs=2 loss=0.3",
                             "seconds": 3},
        f"{NAME}-worker-1": {"log": "not the master", "seconds": 3}})
    launcher = _launcher(cluster, namespace)
    launcher.run(_spec(tmp_path))
    out = launcher.out.getvalue()
    assert out.count("epoch=1 epochs=2") == 1 and out.count("epoch=2 epochs=2") == 1
    assert "not the master" not in out


def test_the_master_is_the_chief_and_pods_carry_the_operators_labels(cluster, namespace,
                                                                     tmp_path):
    leave_scripted_result(tmp_path / "model")
    # The workers end first: the job succeeds with its chief, and cleanPodPolicy Running would
    # delete a worker still running then.
    cluster.script_pods(namespace, {f"{NAME}-chief-0": {"log": "from the chief", "seconds": 6},
                                 "*": {"log": "from a worker", "seconds": 1}})
    launcher = _launcher(cluster, namespace)
    launcher.run(_spec(tmp_path, use_chief=True))
    assert f"[{NAME}-chief-0] from the chief" in launcher.out.getvalue()
    assert "from a worker" not in launcher.out.getvalue()
    pods = _pods(cluster, namespace)
    assert sorted(p.metadata.name for p in pods) == [f"{NAME}-chief-0", f"{NAME}-worker-0",
                                                     f"{NAME}-worker-1"]
    [master] = _pods(cluster, namespace, ",training.kubeflow.org/job-role=master")
    assert master.metadata.name == f"{NAME}-chief-0"
    assert master.metadata.labels["training.kubeflow.org/replica-type"] == "chief"
    assert master.metadata.labels["training.kubeflow.org/replica-index"] == "0"


def test_a_retried_launcher_reattaches_instead_of_creating_a_second_job(cluster, namespace,
                                                                        tmp_path):
    from fmnist_kfp.kubernetes.manifest import to_manifest
    from fmnist_kfp.kubernetes.tfjob import build_tfjob

    leave_scripted_result(tmp_path / "model")
    cluster.script_pods(namespace, {"*": {"seconds": 3}})
    launcher = _launcher(cluster, namespace)
    cluster.create(to_manifest(build_tfjob(_spec(tmp_path), launcher.settings)),
                   namespace=namespace)  # the first try's job, still running
    uid = _tfjob(cluster, namespace)["metadata"]["uid"]
    launcher.run(_spec(tmp_path))
    assert f"re-attaching to the existing TFJob {namespace}/{NAME}" in launcher.out.getvalue()
    assert _tfjob(cluster, namespace)["metadata"]["uid"] == uid


def test_a_job_deleted_behind_our_back_is_an_error_naming_it(cluster, namespace, tmp_path):
    cluster.script_pods(namespace, {"*": {"seconds": 60}})
    launcher = _launcher(cluster, namespace)

    def delete_once_running():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(p.status.phase == "Running" for p in _pods(cluster, namespace)):
                cluster.api_client.call_api(
                    f"/apis/kubeflow.org/v1/namespaces/{namespace}/tfjobs/{NAME}", "DELETE",
                    auth_settings=["BearerToken"])
                return
            time.sleep(0.2)

    deleter = threading.Thread(target=delete_once_running)
    deleter.start()
    try:
        with pytest.raises(TrainingJobError, match=f"TFJob {namespace}/{NAME} vanished"):
            launcher.run(_spec(tmp_path))
    finally:
        deleter.join()
    assert "deleted TFJob" not in launcher.out.getvalue()  # nothing left to clean up


def test_a_retryable_exit_recreates_the_pod_within_the_budget_and_the_log_follows(
        cluster, namespace, tmp_path):
    """Exit code 137 under ExitCode: the operator deletes the pod and makes it anew (v1.9.2
    pkg/controller.v1/common/pod.go); the launcher counts one restart and prints the new pod's
    log from its own start."""
    leave_scripted_result(tmp_path / "model")
    cluster.script_pods(namespace, {f"{NAME}-worker-0": {"exits": [137, 0], "log": "epoch=1"},
                                 "*": {"seconds": 10}})
    launcher = _launcher(cluster, namespace)
    outcome = launcher.run(_spec(tmp_path, max_restarts=1))
    assert outcome.restarts == 1
    out = launcher.out.getvalue()
    assert out.count(f"[{NAME}-worker-0] epoch=1") == 2, out
    assert "restart(s)" in out


def test_max_restarts_is_the_restart_budget_on_kubernetes_too(cluster, namespace, tmp_path):
    """Under ExitCode the operator recreates a killed pod forever: backoffLimit only counts
    container restarts of running pods (kubeflow/training-operator v1.9.2 pkg/core/job.go
    95-133, kubeflow/trainer#2045). The launcher stops it at max_restarts and deletes it."""
    cluster.script_pods(namespace, {f"{NAME}-worker-0": {"exits": [137], "seconds": 0.5},
                                 "*": {"seconds": 60}})
    launcher = _launcher(cluster, namespace)
    with pytest.raises(TrainingJobError, match="2 restarts, more than max_restarts=1"):
        launcher.run(_spec(tmp_path, max_restarts=1))
    assert _gone(cluster, namespace)


def test_container_restarts_in_place_count_too(cluster, namespace, tmp_path):
    """restartPolicy OnFailure: the kubelet restarts the container inside its pod
    (restartCount; the first back-off is 10 s), and the job carries on."""
    leave_scripted_result(tmp_path / "model")
    cluster.script_pods(namespace, {f"{NAME}-worker-0": {"exits": [1, 0]}, "*": {"seconds": 15}})
    outcome = _launcher(cluster, namespace, restart_policy="OnFailure").run(
        _spec(tmp_path, max_restarts=1))
    assert outcome.restarts == 1
    [worker] = _pods(cluster, namespace, ",training.kubeflow.org/replica-index=0")
    assert worker.status.container_statuses[0].restart_count == 1


def test_no_restarts_means_backoff_limit_zero_which_fails_at_the_first_failure(
        cluster, namespace, tmp_path):
    """max_restarts 0 sends backoffLimit 0: the operator fails the job at the first
    container restart (v1.9.2 pkg/controller.v1/common/job.go 193-198), and so does the
    launcher's count; whichever reads first, the step fails and the job is deleted."""
    cluster.script_pods(namespace, {f"{NAME}-worker-1": {"exits": [1, 0]}, "*": {"seconds": 30}})
    launcher = _launcher(cluster, namespace, restart_policy="OnFailure")
    with pytest.raises(TrainingJobError,
                       match="backoff limit|1 restarts, more than max_restarts=0"):
        launcher.run(_spec(tmp_path, max_restarts=0))
    assert _gone(cluster, namespace)


def test_the_step_deadline_deletes_the_job(cluster, namespace, tmp_path):
    cluster.script_pods(namespace, {"*": {"seconds": 120}})
    launcher = _launcher(cluster, namespace, timeout_seconds=5)
    with pytest.raises(TimeoutError, match="within the step's 5 s"):
        launcher.run(_spec(tmp_path))
    assert _gone(cluster, namespace)


def test_a_wrong_api_version_is_refused_by_the_api_server_and_fails_at_once(
        cluster, namespace, tmp_path, monkeypatch):
    """The API server's 400 for a body whose apiVersion is not the URL's fails the step at
    once, without retrying or waiting; a kind the SDK does not know it refuses itself."""
    import fmnist_kfp.launcher.tfjob_launcher as module

    build = module.build_tfjob
    for version, kind, answer in (
            ("kubeflow.org/v2", "TFJob", "HTTP 400 Bad Request: the API version in the data"),
            ("kubeflow.org/v1", "TfJob", "Job kind must be one of")):
        def wrong(spec, settings, version=version, kind=kind):
            tfjob = build(spec, settings)
            tfjob.api_version, tfjob.kind = version, kind
            return tfjob

        monkeypatch.setattr(module, "build_tfjob", wrong)
        started = time.monotonic()
        with pytest.raises(TrainingJobError, match=f"create TFJob .*{answer}"):
            _launcher(cluster, namespace).run(_spec(tmp_path))
        assert time.monotonic() - started < 10
        assert _tfjob(cluster, namespace) is None


# ---------------------------------------------------------------------------------------------
# Faults: one answer of the API server replaced by the fault proxy (localcluster/fault_proxy.py)
# once the job runs; the real client (and its urllib3, which repeats a GET whose connection
# dropped by itself) and the real operator do the rest.

def _once_running(cluster, namespace: str, method: str, path_has: str):
    """A predicate for the proxy's ``only``: true once, for the first ``method`` request whose
    path ends with ``path_has`` after a pod of the job runs (a watcher thread sees it)."""
    running, given = threading.Event(), []

    def watch():
        deadline = time.monotonic() + STEP_SECONDS
        while time.monotonic() < deadline and not running.is_set():
            try:
                if any(p.status.phase == "Running" for p in _pods(cluster, namespace)):
                    running.set()
            except Exception:  # a slow API server's timeout: look again
                pass
            time.sleep(0.2)

    threading.Thread(target=watch, daemon=True).start()

    def only(request_method: str, target: str) -> bool:
        if given or request_method != method or not target.split("?")[0].endswith(
                path_has) or not running.is_set():
            return False
        given.append(target)
        return True

    return only


def _proxy(cluster, kind, only, hold: float = 0.5):
    from localcluster.fault_proxy import FaultProxy

    return FaultProxy(cluster.kubeconfig, seed=1, rate=1.0, kinds=(kind,), only=only,
                      hold=hold)


@pytest.mark.parametrize(("path_has", "kind"), [
    (f"/tfjobs/{NAME}", 500), (f"/tfjobs/{NAME}", 503), (f"/tfjobs/{NAME}", 429),
    (f"/tfjobs/{NAME}", "stall"), (f"/tfjobs/{NAME}", "drop"), ("/pods", 500)])
def test_a_transient_answer_mid_run_leaves_the_job_alive_and_the_step_succeeds(
        cluster, namespace, tmp_path, path_has, kind):
    """One bad answer while the TFJob runs (at 1cd2394 it deleted the running job and failed
    the step): a status the runner retries; a dropped or stalled read that the client's urllib3
    repeats before the runner sees it."""
    leave_scripted_result(tmp_path / "model")
    cluster.script_pods(namespace, {"*": {"seconds": 4}})
    with _proxy(cluster, kind, _once_running(cluster, namespace, "GET", path_has),
                hold=1.5) as proxy:
        launcher = _launcher(cluster, namespace, proxy=proxy, request_timeout_seconds=1)
        outcome = launcher.run(_spec(tmp_path))
    assert outcome.result == {"model_type": "basic"}
    assert [(i.method, i.kind) for i in proxy.injected] == [("GET", kind)]
    assert _tfjob(cluster, namespace) is not None  # never deleted
    out = launcher.out.getvalue()
    if isinstance(kind, int):
        assert out.count("failed transiently") == 1, out


@pytest.mark.parametrize("path_has", [f"/tfjobs/{NAME}", "/pods"])
@pytest.mark.parametrize("status", [401, 403, 410])
def test_an_auth_or_gone_answer_mid_run_leaves_the_tfjob_running(cluster, namespace, tmp_path,
                                                                 path_has, status):
    """A 401 or 403 (the step's token or RBAC) or 410 Gone reading the TFJob or listing its
    pods says nothing about the job: it is left for a retried step to re-attach to (Kubernetes
    API conventions, "HTTP Status codes", kubernetes/community api-conventions.md 1514-1530 and
    1562-1566 at 24e7d8f). Until the fix the runner deleted it."""
    cluster.script_pods(namespace, {"*": {"seconds": 60}})
    with _proxy(cluster, status, _once_running(cluster, namespace, "GET", path_has)
                ) as proxy:
        launcher = _launcher(cluster, namespace, proxy=proxy)
        with pytest.raises(TrainingJobError) as failure:
            launcher.run(_spec(tmp_path))
    assert [(i.method, i.kind) for i in proxy.injected] == [("GET", status)]
    assert _tfjob(cluster, namespace) is not None  # left running
    message = str(failure.value)
    assert f"reading TFJob {namespace}/{NAME} was refused (HTTP {status} " in message
    assert "left as it is, still running and not deleted" in message
    assert "a retry of this step re-attaches to it" in message


@pytest.mark.parametrize("status", [500, 401, 403, 410])
def test_a_failed_log_read_is_skipped_and_the_lines_come_on_the_next_poll(
        cluster, namespace, tmp_path, status):
    """Logs are a courtesy: a read of the master's log answered with an error is skipped, not
    retried as the job's state is, and its lines come with the next poll, once each."""
    leave_scripted_result(tmp_path / "model")
    cluster.script_pods(namespace, {f"{NAME}-worker-0": {"log": "line one\nline two",
                                                      "seconds": 4}, "*": {"seconds": 4}})
    with _proxy(cluster, status, _once_running(cluster, namespace, "GET", "/log")
                ) as proxy:
        launcher = _launcher(cluster, namespace, proxy=proxy)
        outcome = launcher.run(_spec(tmp_path))
    assert outcome.result == {"model_type": "basic"}
    assert [(i.method, i.kind) for i in proxy.injected] == [("GET", status)]
    out = launcher.out.getvalue()
    assert out.count(f"[{NAME}-worker-0] line one") == 1, out
    assert out.count(f"[{NAME}-worker-0] line two") == 1, out
    assert "failed transiently" not in out


_CHILD = """
import io, sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from kubeflow.training import TrainingClient
from fmnist_kfp.launcher.tfjob_launcher import RestartCount, TFJobLauncher
from tests.fmnist_kfp.launcher.test_tfjob_launcher import _settings, _spec

client = TrainingClient(config_file={kubeconfig!r}, namespace={namespace!r}, job_kind="TFJob")
launcher = TFJobLauncher(_settings({namespace!r}), training_client=client, poll_seconds=0.5,
                         timeout_seconds=120, out=sys.stdout)
print("launching", flush=True)
launcher.run(_spec(Path({tmp!r})))
"""


@pytest.mark.process
def test_sigterm_while_the_create_call_is_in_flight_deletes_what_was_created(
        cluster, namespace, tmp_path):
    """The proxy holds the create 3 s, then forwards it; SIGTERM comes meanwhile. At 1cd2394
    the handler was installed only after the create returned, so the job was left behind."""
    import signal

    from tests.launcher_harness import drain, spawn_script

    cluster.script_pods(namespace, {"*": {"seconds": 60}})
    seen: list[str] = []
    with _proxy(cluster, "hold", lambda method, target: method == "POST" and "/tfjobs" in
                target, hold=3) as proxy:
        kubeconfig = proxy.kubeconfig(tmp_path / "kubeconfig",
                                      cluster.token_for(namespace, "pipeline-runner"))
        process, lines = spawn_script(_CHILD, kubeconfig=str(kubeconfig), namespace=namespace,
                                      tmp=str(tmp_path))
        try:
            deadline = time.monotonic() + 60
            while not proxy.injected:  # the create is being held
                assert time.monotonic() < deadline, "the create never arrived"
                time.sleep(0.05)
            process.send_signal(signal.SIGTERM)
            drain(process, lines, seen)
        finally:
            process.kill()
    output = "\n".join(seen)
    assert process.returncode == 128 + signal.SIGTERM, output
    assert f"deleted TFJob {namespace}/{NAME}" in output, output
    assert _gone(cluster, namespace)


# ---------------------------------------------------------------------------------------------
# Without a cluster: what is refused before any call, and verdicts on objects as read.

def test_gpus_with_zero_workers_fail_before_anything_is_created(tmp_path):
    settings = KubernetesSettings(image="img:1", namespace="kubeflow", pvc_name="fmnist-pvc")
    with pytest.raises(UserInputError):  # the client is never touched
        TFJobLauncher(settings, training_client=object()).run(
            _spec(tmp_path, num_workers=0, gpus_per_worker=1))


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


def _condition(type_: str, status: str = "True", reason: str = "", message: str = ""):
    return SimpleNamespace(type=type_, status=status, reason=reason, message=message)


def test_failed_wins_over_succeeded_when_both_hold(tmp_path):
    """With a Chief, one reconcile can set Succeeded (the chief finished) and then Failed (a
    worker failed): kubeflow/training-operator v1.9.2 tfjob_controller.go 419-508 visit Chief
    before Worker, and pkg/util/status.go keeps both. Failed anywhere fails the step."""
    from fmnist_kfp.launcher.tfjob_launcher import _Watch

    settings = KubernetesSettings(image="img:1", namespace="kubeflow")
    watch = _Watch(TFJobLauncher(settings, training_client=object()),
                   _spec(tmp_path, use_chief=True))
    job = SimpleNamespace(
        metadata=SimpleNamespace(uid="u", labels={}),
        spec=SimpleNamespace(run_policy=SimpleNamespace(suspend=False)),
        status=SimpleNamespace(conditions=[
            _condition("Created"), _condition("Running", "False"), _condition("Succeeded"),
            _condition("Failed", reason="TFJobFailed", message="1 Worker replica(s) failed")]))
    status = watch.status((job, []))
    assert status.done and status.failed
    assert status.reason == "TFJobFailed: 1 Worker replica(s) failed"


def _dated(type_: str, status: str, at: str, reason: str = ""):
    return SimpleNamespace(type=type_, status=status, reason=reason,
                           last_transition_time=datetime.fromisoformat(at),
                           last_update_time=None)


def _replica(uid: str, rtype: str, index: int, created: str | None, restarts: int = 0):
    return SimpleNamespace(
        metadata=SimpleNamespace(
            uid=uid, labels={"training.kubeflow.org/replica-type": rtype,
                             "training.kubeflow.org/replica-index": str(index)},
            creation_timestamp=datetime.fromisoformat(created) if created else None),
        status=SimpleNamespace(container_statuses=[SimpleNamespace(restart_count=restarts)]))


def test_pods_are_counted_in_the_generation_they_were_created_in():
    """Kueue's preemptions as the launcher's polls may see them, which no run shows on cue
    (the real one: test_queued_on_the_cluster.py): a poll that lists a terminating pod of the
    previous admission beside the job's resume, one that missed a whole suspend/resume cycle,
    and a read of the job made before the operator recorded the resume."""
    created = _dated("Created", "True", "2025-01-01T00:00:00Z")
    resumed_1 = _dated("Suspended", "False", "2025-01-01T00:00:10Z", "TFJobResumed")
    suspended = _dated("Suspended", "True", "2025-01-01T00:05:00Z", "TFJobSuspended")
    resumed_2 = _dated("Suspended", "False", "2025-01-01T00:07:00Z", "TFJobResumed")
    resumed_3 = _dated("Suspended", "False", "2025-01-01T00:20:00Z", "TFJobResumed")
    first = [_replica("a0", "worker", 0, "2025-01-01T00:00:11Z"),
             _replica("a1", "worker", 1, "2025-01-01T00:00:11Z")]
    second = [_replica("b0", "worker", 0, "2025-01-01T00:07:01Z"),
              _replica("b1", "worker", 1, "2025-01-01T00:07:01Z")]
    count = RestartCount()
    assert count.update([created, resumed_1], first) == 0
    # Read before the operator recorded the resume (Suspended still True), new pods listed.
    assert count.update([created, suspended], second) == 0
    # The resume recorded; a terminating pod of the first admission still listed.
    assert count.update([created, resumed_2], [first[0], *second]) == 0
    # A whole cycle missed between two polls: the third admission's pods only.
    third = [_replica("c0", "worker", 0, "2025-01-01T00:20:00Z"),
             _replica("c1", "worker", 1, "2025-01-01T00:20:01Z")]
    assert count.update([created, resumed_3], third) == 0
    # Within an admission a new UID is a restart, and so is a container restart.
    assert count.update([created, resumed_3],
                        [_replica("c0b", "worker", 0, "2025-01-01T00:21:00Z"), third[1]]) == 1
    assert count.update([created, resumed_3],
                        [_replica("c0b", "worker", 0, "2025-01-01T00:21:00Z", restarts=1),
                         third[1]]) == 2


def test_without_creation_timestamps_pods_go_in_the_latest_generation():
    count = RestartCount()
    resumed = _dated("Suspended", "False", "2025-01-01T00:07:00Z", "TFJobResumed")
    assert count.update([], [_replica("a0", "worker", 0, None)]) == 0
    assert count.update([resumed], [_replica("b0", "worker", 0, None)]) == 0
    assert count.update([resumed], [_replica("b0x", "worker", 0, None)]) == 1


def test_a_job_preempted_seconds_after_its_pods_were_made_counts_no_restart():
    """Found on the real Kueue: preempted a second after its pods were made, then resumed; a
    poll that lists the new pods before the operator records the resume put the old pods in
    the suspension's generation (the clocks' allowance) beside the new ones: 1 restart."""
    created = _dated("Created", "True", "2025-01-01T00:00:00Z")
    resumed = _dated("Suspended", "False", "2025-01-01T00:00:10Z", "TFJobResumed")
    suspended = _dated("Suspended", "True", "2025-01-01T00:00:11Z", "TFJobSuspended")
    first = [_replica("a0", "worker", 0, "2025-01-01T00:00:10Z"),
             _replica("a1", "worker", 1, "2025-01-01T00:00:11Z")]
    second = [_replica("b0", "worker", 0, "2025-01-01T00:00:30Z"),
              _replica("b1", "worker", 1, "2025-01-01T00:00:30Z")]
    count = RestartCount()
    assert count.update([created, resumed], first) == 0
    assert count.update([created, suspended], first) == 0  # being deleted
    assert count.update([created, suspended], second) == 0  # resumed, not yet recorded
    assert count.update([created, _dated("Suspended", "False", "2025-01-01T00:00:30Z",
                                         "TFJobResumed")], second) == 0
