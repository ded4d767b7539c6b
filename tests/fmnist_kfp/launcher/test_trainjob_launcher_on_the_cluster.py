"""The TrainJob launcher against real Kubeflow Trainer v2.1.0 and JobSet v0.10.1 on the local
cluster (tests/cluster.py), with our ClusterTrainingRuntime (manifests/trainer-runtime) applied,
through the kubernetes client as the ServiceAccount bound to manifests/standalone-rbac's Role.
The nodes run the image ``scripted-pod`` (tests/scripted_pod.py): each exits as the test
scripts it, so Trainer's webhook and conditions, JobSet's restarts and failure policy, the Job
controller's Indexed Jobs and pod failure policy, and the garbage collector are what the
launcher meets, in seconds. (Kueue suspending, preempting and resuming TrainJobs for real, on
Trainer 2.2: test_queued_on_the_cluster.py.) Trainer v2.2.0 with JobSet v0.11.0 (its own
TrainJob shape, its own deadline) runs on a cluster of its own, at the bottom. (Training for
real: test_trainjob_on_the_cluster.py; API faults through the fault proxy:
test_faults_on_the_cluster.py.)"""

from __future__ import annotations

import io
import re
import signal
import threading
import time

import pytest

from fmnist_kfp.errors import TrainingJobError, UserInputError
from fmnist_kfp.kubernetes.trainjob import (
    OVERRIDES,
    PATCHES,
    RESTART_ATTEMPT_LABEL,
    RUNTIME_MAX_RESTARTS,
)
from fmnist_kfp.launcher.trainjob_launcher import TrainJobLauncher
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.training_job import TrainingJobSpec
from tests.cluster import SCRIPTED_IMAGE, leave_scripted_result, until

NAME = "fmnist-basic-3f2a9c"
STEP_SECONDS = 120  # real seconds: each job here takes a few
TRAINJOBS = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"


def _with_runtime(cluster):
    cluster.require_node()
    cluster.apply_training_runtime()
    return cluster


@pytest.fixture(scope="module")
def cluster(real_cluster):
    """The session's cluster, running Trainer 2.1 and JobSet 0.10."""
    real_cluster.require_node()
    real_cluster.install("JOBSET_V0_10")
    real_cluster.install("TRAINER_V2_1")
    return _with_runtime(real_cluster)


def _namespace(cluster) -> str:
    """A namespace of its own, with the Role's ServiceAccount and the claim."""
    return cluster.step_namespace("trainjob")


@pytest.fixture
def namespace(cluster):
    name = _namespace(cluster)
    yield name
    cluster.delete_namespace(name)


def _host(node: int) -> str:
    return f"{NAME}-node-0-{node}"


def _spec(tmp_path, **overrides) -> TrainingJobSpec:
    values = dict(name=NAME, config=TrainingConfig(model_type="basic"),
                  data_dir="/mnt/fmnist/dataset", export_dir=str(tmp_path / "model" / "1"),
                  work_dir=str(tmp_path / "model"), num_workers=2)
    values.update(overrides)
    return TrainingJobSpec(**values)


def _settings(namespace: str, **values) -> KubernetesSettings:
    return KubernetesSettings(image=SCRIPTED_IMAGE, namespace=namespace, pvc_name="fmnist-data",
                              cpu="100m", memory="256Mi", **values)


def _launcher(cluster, namespace: str, shape: str = OVERRIDES, settings: dict | None = None,
              **kwargs) -> TrainJobLauncher:
    """The launcher as the train step makes it, calling the API server as the step's
    ServiceAccount; ``shape``: what the cluster's Trainer serves."""
    from kubernetes.client import ApiClient

    api_client = ApiClient(cluster.configuration_as(namespace, "pipeline-runner"))
    values = dict(api_client=api_client, shape=shape, poll_seconds=0.5,
                  timeout_seconds=STEP_SECONDS, out=io.StringIO(), request_timeout_seconds=10)
    values.update(kwargs)
    return TrainJobLauncher(_settings(namespace, **(settings or {})), **values)


def _trainjob(cluster, namespace: str) -> dict | None:
    return cluster.read_or_none(TRAINJOBS.format(namespace=namespace) + f"/{NAME}")


def _jobset(cluster, namespace: str) -> dict | None:
    return cluster.read_or_none(JOBSETS.format(namespace=namespace) + f"/{NAME}")


def _pods(cluster, namespace: str) -> list:
    from kubernetes import client

    return client.CoreV1Api(cluster.api_client).list_namespaced_pod(
        namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={NAME}").items


def _gone(cluster, namespace: str) -> bool:
    """The TrainJob deleted, and with it (owner references, the garbage collector) its
    JobSet and pods."""
    until(lambda: _trainjob(cluster, namespace) is None, "TrainJob deleted", 30)
    until(lambda: _jobset(cluster, namespace) is None, "JobSet collected", 30)
    until(lambda: not _pods(cluster, namespace), "pods collected", 30)
    return True


def _conditions(job: dict) -> list[tuple[str, str, str]]:
    return [(c["type"], c["status"], c["reason"]) for c in job["status"]["conditions"]]


def _node_log(out: str, node: int) -> list[str]:
    """The lines the launcher printed of node ``node``'s pods (any attempt)."""
    prefix = re.compile(rf"^\[{re.escape(_host(node))}-[a-z0-9]{{5}}\] (.*)$")
    return [m.group(1) for line in out.splitlines() if (m := prefix.match(line))]


def _runs_to_success(cluster, namespace: str, tmp_path, shape: str) -> None:
    from fmnist_kfp.kubernetes.trainjob import build_trainjob

    leave_scripted_result(tmp_path / "model")
    cluster.script_pods(namespace, {_host(0): {"log": "epoch 1\nepoch 2", "seconds": 3},
                                 "*": {"log": "not node 0", "seconds": 3}})
    launcher = _launcher(cluster, namespace, shape)
    # What the launcher sends is what this Trainer's CRD takes, every field of it (strict
    # field validation, as `kubectl apply` checks): no field pruned.
    cluster.create(build_trainjob(_spec(tmp_path), launcher.settings, shape),
                   namespace=namespace, dry_run=True)
    outcome = launcher.run(_spec(tmp_path))
    assert outcome.result == {"model_type": "basic"} and outcome.restarts == 0
    job = _trainjob(cluster, namespace)
    assert job is not None  # a job that succeeded is kept
    # JobSet's Completed copied as Complete (trainer v2.1.0 plugins/jobset/jobset.go 309-322;
    # jobset v0.10.1 reason AllJobsCompleted).
    assert _conditions(job) == [("Complete", "True", "AllJobsCompleted")]
    out = launcher.out.getvalue()
    assert out.splitlines()[0] == (f"created TrainJob {namespace}/{NAME} (2 node(s) on runtime "
                                   "fmnist-tensorflow, at most 2 restarts)")
    assert _node_log(out, 0) == [f"{_host(0)}: start 0", "epoch 1", "epoch 2"]  # once each
    assert "not node 0" not in out
    states = [line.split(": ", 1)[1] for line in out.splitlines()
              if line.startswith(f"TrainJob {namespace}/{NAME}: ")]
    assert states[-1] == "Complete", states
    # The pods as JobSet and the Job controller make them: one Indexed Job, hostnames and
    # subdomain for TF_CONFIG, the labels the runtime's env reads.
    pods = sorted(_pods(cluster, namespace), key=lambda p: p.spec.hostname)
    assert [p.spec.hostname for p in pods] == [_host(0), _host(1)]
    assert {p.spec.subdomain for p in pods} == {NAME}
    assert [p.metadata.annotations["batch.kubernetes.io/job-completion-index"]
            for p in pods] == ["0", "1"]
    assert {(p.metadata.labels["jobset.sigs.k8s.io/jobset-name"],
             p.metadata.labels["jobset.sigs.k8s.io/replicatedjob-name"],
             p.metadata.labels["jobset.sigs.k8s.io/job-index"],
             p.metadata.labels[RESTART_ATTEMPT_LABEL]) for p in pods} == {(NAME, "node", "0", "0")}
    [container] = {c.name: c for c in pods[0].spec.containers}.values()
    env = {e.name: e for e in container.env}
    assert env["FMNIST_NUM_NODES"].value == "2" and "JOB_COMPLETION_INDEX" in env
    assert container.image == SCRIPTED_IMAGE
    assert [m.mount_path for m in container.volume_mounts if m.name == "fmnist-data"] == [
        "/mnt/fmnist"]
    assert all(p.status.phase == "Succeeded" for p in pods)


def test_a_trainjob_runs_to_success_and_returns_node_0s_result(cluster, namespace, tmp_path):
    _runs_to_success(cluster, namespace, tmp_path, OVERRIDES)


def test_a_node_killed_restarts_the_jobset_within_max_restarts(cluster, namespace, tmp_path):
    """Exit 137 (a signal's code) is outside the runtime's podFailurePolicy (1-127), so it
    counts against the Job's backoffLimit 0 and fails the Job; no failurePolicy rule matches
    its reason (BackoffLimitExceeded), so JobSet restarts: deletes every Job and creates them
    anew under the next restart attempt (jobset v0.10.1 pkg/controllers/failure_policy.go
    41-78, jobset_controller.go 275-315). Within max_restarts the job goes on and succeeds,
    and node 0's log is followed into the new attempt."""
    leave_scripted_result(tmp_path / "model")
    # Node 1 fails 3 s in: node 0's first pod lives that long, for the launcher to read.
    cluster.script_pods(namespace, {_host(1): {"exits": [137, 0], "seconds": 3},
                                 "*": {"log": "training", "seconds": 6}})
    launcher = _launcher(cluster, namespace)
    outcome = launcher.run(_spec(tmp_path, max_restarts=1))
    assert outcome.restarts == 1
    assert _jobset(cluster, namespace)["status"]["restarts"] == 1
    pods = _pods(cluster, namespace)  # the first attempt's were deleted with their Job
    assert sorted(p.metadata.labels[RESTART_ATTEMPT_LABEL] for p in pods) == ["1", "1"]
    out = launcher.out.getvalue()
    assert "Running (2/2 nodes), 1 restart(s)" in out, out
    # Node 0 started once per attempt; each attempt's log printed from its own start.
    assert _node_log(out, 0).count("training") == 2, out
    assert f"{_host(0)}: start 1" in _node_log(out, 0)


def test_more_restarts_than_max_restarts_fail_and_delete_the_job(cluster, namespace, tmp_path):
    """The runtime allows 5 JobSet restarts; the job's budget is 1: the launcher stops it at
    the second restart and deletes it. (Each attempt's pods live 2 s: the launcher, polling
    every 0.5 s, sees each attempt.)"""
    cluster.script_pods(namespace, {_host(0): {"exits": [137], "seconds": 2},
                                 "*": {"seconds": 30}})
    launcher = _launcher(cluster, namespace)
    with pytest.raises(TrainingJobError,
                       match="2 restarts of its JobSet, more than max_restarts=1"):
        launcher.run(_spec(tmp_path, max_restarts=1))
    assert _gone(cluster, namespace)
    out = launcher.out.getvalue()
    assert out.splitlines()[-2:] == [
        f"deleting the failed TrainJob {namespace}/{NAME} so that a retry of this step starts "
        "afresh", f"deleted TrainJob {namespace}/{NAME}"]


def test_the_runtimes_max_restarts_is_the_ceiling_and_jobset_fails_the_job_there(
        cluster, namespace, tmp_path):
    """A budget of the runtime's own 5 restarts: the launcher never counts more than 5
    (attempt 5 is the last JobSet makes), JobSet fails the JobSet at the 6th failure with
    ReachedMaxRestarts (jobset v0.10.1 pkg/controllers/failure_policy.go 219-227), and Trainer
    copies it: the step fails with JobSet's reason."""
    cluster.script_pods(namespace, {_host(0): {"exits": [137], "seconds": 0.2},
                                 "*": {"seconds": 30}})
    launcher = _launcher(cluster, namespace)
    with pytest.raises(TrainingJobError) as failure:
        launcher.run(_spec(tmp_path, max_restarts=RUNTIME_MAX_RESTARTS))
    assert str(failure.value) == (
        f"TrainJob {namespace}/{NAME} failed: ReachedMaxRestarts: jobset failed due to reaching "
        f"max number of restarts (first failed job: {NAME}-node-0)")
    # The last attempt's failed Job and pods stay until the TrainJob goes (jobset v0.10.1
    # jobset_controller.go 161-175 deletes only active Jobs of a finished JobSet).
    assert f"TrainJob {namespace}/{NAME}: Failed, {RUNTIME_MAX_RESTARTS} restart(s)" in \
        launcher.out.getvalue()
    assert _gone(cluster, namespace)


def test_a_bug_fails_the_job_at_once_with_jobsets_reason(cluster, namespace, tmp_path):
    """Exit 1: the runtime's podFailurePolicy fails the Job (reason PodFailurePolicy), its
    FailJobSet rule the JobSet, unretried (jobset v0.10.1 failure_policy.go); Trainer copies
    JobSet's Failed condition (trainer v2.1.0 plugins/jobset/jobset.go 323-326). Node 0's
    traceback is printed before the job is deleted."""
    cluster.script_pods(namespace, {_host(0): {"exits": [1], "log": "Traceback: boom"},
                                 "*": {"seconds": 30}})
    launcher = _launcher(cluster, namespace)
    with pytest.raises(TrainingJobError) as failure:
        launcher.run(_spec(tmp_path, max_restarts=2))
    assert str(failure.value) == (
        f"TrainJob {namespace}/{NAME} failed: FailJobSetFailurePolicyAction: applying "
        f"FailJobSet failure policy action (first failed job: {NAME}-node-0)")
    assert _gone(cluster, namespace)
    out = launcher.out.getvalue()
    assert "Traceback: boom" in _node_log(out, 0), out
    assert out.index("Traceback: boom") < out.index("deleted TrainJob")
    assert "restart(s)" not in out


def test_a_retried_launcher_reattaches_instead_of_creating_a_second_job(cluster, namespace,
                                                                        tmp_path):
    from fmnist_kfp.kubernetes.trainjob import build_trainjob

    leave_scripted_result(tmp_path / "model")
    cluster.script_pods(namespace, {"*": {"seconds": 3}})
    launcher = _launcher(cluster, namespace)
    cluster.create(build_trainjob(_spec(tmp_path), launcher.settings),
                   namespace=namespace)  # the first try's job, still running
    uid = _trainjob(cluster, namespace)["metadata"]["uid"]
    outcome = launcher.run(_spec(tmp_path))
    assert f"re-attaching to the existing TrainJob {namespace}/{NAME}" in launcher.out.getvalue()
    assert outcome.result == {"model_type": "basic"}
    assert _trainjob(cluster, namespace)["metadata"]["uid"] == uid


def test_a_missing_runtime_is_refused_by_trainers_webhook(cluster, namespace, tmp_path,
                                                          monkeypatch):
    """Trainer's validating webhook refuses a TrainJob whose ClusterTrainingRuntime does not
    exist (trainer v2.1.0 pkg/runtime/core/clustertrainingruntime.go 85-93): the step fails
    at once, nothing created. (A runtime of another name stands for the missing one: the
    cluster's is shared.)"""
    import fmnist_kfp.kubernetes.trainjob as trainjob

    monkeypatch.setattr(trainjob, "RUNTIME_NAME", "fmnist-missing")
    started = time.monotonic()
    with pytest.raises(TrainingJobError, match=(
            'create TrainJob .*"fmnist-missing" not found: specified clusterTrainingRuntime '
            "must be created before the TrainJob is created")):
        _launcher(cluster, namespace).run(_spec(tmp_path))
    assert time.monotonic() - started < 10
    assert _trainjob(cluster, namespace) is None


def _catch(function, errors: list) -> bool:
    try:
        function()
    except BaseException as error:  # reported by the test's thread
        errors.append(error)
        return False
    return True


def test_a_job_deleted_behind_our_back_is_an_error_naming_it(cluster, namespace, tmp_path):
    cluster.script_pods(namespace, {"*": {"seconds": 30}})
    launcher = _launcher(cluster, namespace)

    def delete_once_running():
        until(lambda: any(p.status.phase == "Running" for p in _pods(cluster, namespace)),
               "a node running")
        cluster.api_client.call_api(TRAINJOBS.format(namespace=namespace) + f"/{NAME}",
                                    "DELETE", auth_settings=["BearerToken"])

    errors = []
    deleter = threading.Thread(target=lambda: _catch(delete_once_running, errors))
    deleter.start()
    try:
        with pytest.raises(TrainingJobError, match=f"TrainJob {namespace}/{NAME} vanished"):
            launcher.run(_spec(tmp_path))
    finally:
        deleter.join()
    assert not errors, errors
    assert "deleted TrainJob" not in launcher.out.getvalue()  # nothing left to clean up


def test_the_step_deadline_deletes_the_job(cluster, namespace, tmp_path):
    cluster.script_pods(namespace, {"*": {"seconds": 60}})
    launcher = _launcher(cluster, namespace, timeout_seconds=4)
    with pytest.raises(TimeoutError, match="within the step's 4 s"):
        launcher.run(_spec(tmp_path))
    assert _gone(cluster, namespace)


# ---------------------------------------------------------------------------------------------
# SIGTERM: a terminated pipeline run sends it to the launcher pod; the TrainJob goes with it.

_CHILD = """
import io, sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from kubernetes import client
from fmnist_kfp.launcher.trainjob_launcher import TrainJobLauncher
from tests.fmnist_kfp.launcher.test_trainjob_launcher_on_the_cluster import _settings, _spec

configuration = client.Configuration()
configuration.host = {host!r}
configuration.ssl_ca_cert = {ca!r}
configuration.api_key = {{"authorization": {authorization!r}}}
launcher = TrainJobLauncher(_settings({namespace!r}), api_client=client.ApiClient(configuration),
                            poll_seconds=0.5, timeout_seconds=120, out=sys.stdout)
print("launching", flush=True)
launcher.run(_spec(Path({tmp!r})))
"""


@pytest.mark.process
def test_sigterm_while_waiting_deletes_the_trainjob(cluster, namespace, tmp_path):
    from tests.launcher_harness import drain, read_until, spawn_script

    cluster.script_pods(namespace, {"*": {"seconds": 60}})
    configuration = cluster.configuration_as(namespace, "pipeline-runner")
    seen: list[str] = []
    process, lines = spawn_script(
        _CHILD, host=configuration.host, ca=configuration.ssl_ca_cert,
        authorization=configuration.api_key["authorization"], namespace=namespace,
        tmp=str(tmp_path))
    try:
        assert read_until(lines, "Running (2/2 nodes)", seen), "\n".join(seen)
        process.send_signal(signal.SIGTERM)
        drain(process, lines, seen)
    finally:
        process.kill()
    output = "\n".join(seen)
    assert process.returncode == 128 + signal.SIGTERM, output
    assert f"deleted TrainJob {namespace}/{NAME}" in output
    assert _gone(cluster, namespace)


# ---------------------------------------------------------------------------------------------
# Trainer v2.2.0 with JobSet v0.11.0: the pod settings as runtimePatches.

@pytest.fixture(scope="module")
def cluster_2_2(real_cluster_trainer_2_2):
    """The session's Trainer 2.2 cluster (tests/conftest.py), with our runtime."""
    return _with_runtime(real_cluster_trainer_2_2)


def test_on_trainer_2_2_a_trainjob_of_runtime_patches_runs_to_success(cluster_2_2, tmp_path):
    _runs_to_success(cluster_2_2, _namespace(cluster_2_2), tmp_path, PATCHES)


def test_on_trainer_2_2_its_active_deadline_fails_the_job(cluster_2_2, tmp_path):
    """Trainer 2.2 fails a TrainJob past spec.activeDeadlineSeconds (counted from its
    creation or last resumption) with DeadlineExceeded and deletes its JobSet (kubeflow/trainer
    v2.2.0 pkg/controller/trainjob_controller.go 171-209): the step fails with that reason
    before its own, later deadline, and deletes the TrainJob."""
    namespace = _namespace(cluster_2_2)
    cluster_2_2.script_pods(namespace, {"*": {"seconds": 60}})
    launcher = _launcher(cluster_2_2, namespace, PATCHES,
                         settings={"active_deadline_seconds": 3})
    assert launcher.runner.timeout_seconds == STEP_SECONDS
    with pytest.raises(TrainingJobError, match=(
            "DeadlineExceeded: TrainJob exceeded its active deadline")):
        launcher.run(_spec(tmp_path))
    assert _gone(cluster_2_2, namespace)


# ---------------------------------------------------------------------------------------------
# Without a cluster: what is refused before any call.

def test_what_a_trainjob_cannot_do_fails_before_anything_is_created(tmp_path):
    settings = KubernetesSettings(image="img:1", namespace="kubeflow", pvc_name="fmnist-pvc")
    with pytest.raises(UserInputError, match="evaluator"):  # the client is never touched
        TrainJobLauncher(settings, api_client=object()).run(_spec(tmp_path, evaluator=True))


def test_the_steps_deadline_is_the_jobs_plus_ten_minutes():
    def launcher(deadline: int, **kwargs) -> TrainJobLauncher:
        settings = KubernetesSettings(image="img:1", namespace="kubeflow",
                                      active_deadline_seconds=deadline)
        return TrainJobLauncher(settings, api_client=object(), **kwargs)

    assert launcher(100).runner.timeout_seconds == 700
    assert launcher(0).runner.timeout_seconds == 0
    assert launcher(100, timeout_seconds=5).runner.timeout_seconds == 5
    assert launcher(0, poll_seconds=3).runner.poll_seconds == 3
