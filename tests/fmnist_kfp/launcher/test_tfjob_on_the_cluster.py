"""The TFJob launcher on the real cluster (tests/cluster.py): the real Training Operator v1.9.2,
installed from its own manifests, runs a TFJob of 2 workers with MultiWorkerMirroredStrategy as
pods on the node agent; the launcher itself runs as the train step runs, in a pod of the
project's image as the ServiceAccount bound to manifests/standalone-rbac's Role, so the real
authorizer judges every call it makes; the model is exported to the shared claim."""

from __future__ import annotations

import textwrap

import pytest

from tests.cluster import until

NAMESPACE = "kubeflow"
pytestmark = pytest.mark.slow  # trains real models
IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.2.0"
STEP_SECONDS = 600
# Enough that the kill lands mid-training (after the first epoch's checkpoint), with epochs
# left to resume; each costs seconds of CI.
EPOCHS_KILLED = 6


@pytest.fixture(scope="module")
def cluster(real_cluster):
    real_cluster.require_node()
    real_cluster.install("TRAINING_OPERATOR_V1")
    real_cluster.grant_pipeline_runner(NAMESPACE)
    return real_cluster


def _core(cluster):
    from kubernetes import client

    return client.CoreV1Api(cluster.api_client)


def _step_pod(name: str, script: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"serviceAccountName": "pipeline-runner", "restartPolicy": "Never",
                     "containers": [{"name": "main", "image": IMAGE,
                                     "command": ["python", "-c", textwrap.dedent(script)],
                                     "volumeMounts": [{"name": "data",
                                                       "mountPath": "/mnt/fmnist"}]}],
                     "volumes": [{"name": "data", "persistentVolumeClaim": {
                         "claimName": "fmnist-data"}}]}}


@pytest.fixture(scope="module")
def claim(cluster, synthetic_dataset):
    """The shared claim with the dataset, as the ingest step leaves it."""
    return cluster.add_claim(NAMESPACE, "fmnist-data", synthetic_dataset)


def _start_step(cluster, pod: str, job: str, epochs: int = 1, max_restarts: int = 2,
                layout: str = "num_workers=2", cpu: str = "500m",
                timeout_seconds: int = STEP_SECONDS, log_file: str = "") -> None:
    """The train step's launcher in a pod (``pod``), training TFJob ``job``; ``layout``: the
    spec's replica fields, ``cpu`` each replica's request; ``log_file``: where on the claim the
    step writes its output instead (a deleted pod's log is gone with it)."""
    redirect = (f"import sys; sys.stdout = sys.stderr = open('/mnt/fmnist/{log_file}', 'a', "
                "buffering=1)") if log_file else ""
    script = f"""
        {redirect}
        from fmnist_kfp.launcher.tfjob_launcher import TFJobLauncher
        from fmnist_kfp.settings.jobs import KubernetesSettings
        from fmnist_kfp.settings.training import TrainingConfig
        from fmnist_kfp.training.training_job import TrainingJobSpec
        settings = KubernetesSettings(image="{IMAGE}", namespace="{NAMESPACE}",
                                      pvc_name="fmnist-data", cpu="{cpu}", memory="1Gi")
        spec = TrainingJobSpec(name="{job}", {layout}, max_restarts={max_restarts},
                               config=TrainingConfig(model_type="basic", epochs={epochs}),
                               data_dir="/mnt/fmnist/dataset",
                               export_dir="/mnt/fmnist/models/{job}/1",
                               work_dir="/mnt/fmnist/models/{job}")
        launcher = TFJobLauncher(settings, poll_seconds=2, timeout_seconds={timeout_seconds})
        outcome = launcher.run(spec)
        print("RESULT", outcome.result["model_type"], outcome.restarts)
        print("REPLICAS", outcome.result["replicas"])
    """
    _core(cluster).create_namespaced_pod(NAMESPACE, _step_pod(pod, script))


def _finished(cluster, pod: str) -> tuple[str, str]:
    return cluster.pod_finished(NAMESPACE, pod, STEP_SECONDS + 60)


def _workers(cluster, job: str) -> list:
    return _core(cluster).list_namespaced_pod(
        NAMESPACE, label_selector=f"training.kubeflow.org/job-name={job}").items


def _phases(cluster, job: str) -> dict[str, str]:
    """Each of the job's pods' phase, by its replica (``worker-0``, ``chief-0``)."""
    return {p.metadata.name.removeprefix(job + "-"): p.status.phase
            for p in _workers(cluster, job)}


def _job_logs(cluster, job: str) -> str:
    """Each of the job's pods' phase and last log lines, and every pod that holds CPU on the
    node: what a failed assertion shows."""
    core = _core(cluster)
    holding = [f"{p.metadata.namespace}/{p.metadata.name} {p.status.phase} " + ",".join(
        str(((c.resources.requests if c.resources else None) or {}).get("cpu", "0"))
        for c in p.spec.containers)
        for p in core.list_pod_for_all_namespaces().items
        if p.status.phase in ("Pending", "Running")]
    return "\n--- pods holding the node: " + "; ".join(holding) + "\n" + "\n".join(
        f"--- {p.metadata.name} {p.status.phase}\n" + "\n".join(
            core.read_namespaced_pod_log(p.metadata.name, NAMESPACE).splitlines()[-15:])
        for p in _workers(cluster, job))


def _tfjob(cluster, job: str) -> dict | None:
    return cluster.read_or_none(f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/tfjobs/{job}")


def test_a_two_worker_tfjob_trains_and_exports_the_model(cluster, claim):
    _start_step(cluster, "train-step", "fmnist-basic-real")
    phase, log = _finished(cluster, "train-step")
    assert phase == "Succeeded", log
    assert "RESULT basic 0" in log
    assert "created TFJob kubeflow/fmnist-basic-real (2 replicas" in log
    assert (claim / "models" / "fmnist-basic-real" / "1" / "saved_model.pb").exists()
    # Both workers trained: the chief's strategy counted 2 replicas in sync, so every step's
    # all-reduce had worker 1 in it, and worker 0 ran to the end.
    assert "REPLICAS 2" in log, log
    # Without a chief, worker 0's success is the job's
    # (kubeflow/training-operator v1.9.2 pkg/controller.v1/tensorflow/tfjob_controller.go,
    # UpdateJobStatus L467, the default success policy), and the reconcile after it deletes
    # the job's pods still Running (cleanPodPolicy Running; common/job.go ReconcileJobs ->
    # CleanUpResources): worker 1, if its process was still exiting then, is deleted rather
    # than Succeeded.
    job = "fmnist-basic-real"
    until(lambda: _phases(cluster, job) in ({"worker-0": "Succeeded", "worker-1": "Succeeded"},
                                            {"worker-0": "Succeeded"}),
          "worker 0 Succeeded, worker 1 Succeeded or cleaned up", 60,
          shown=lambda: _phases(cluster, job))


def test_parameter_servers_and_an_evaluator_train_and_export_the_model(cluster, claim):
    """ParameterServerStrategy: a chief coordinating 2 workers and 1 PS, and an evaluator
    scoring each checkpoint; the operator gives each its TF_CONFIG role. (Five replicas of
    a tenth of a CPU each, beside JobSet's 500m and what other tests' pods may still hold:
    with half a CPU each, two would never be scheduled on this 2-CPU node, as the next test
    shows.)"""
    job = "fmnist-basic-ps"
    _start_step(cluster, "train-ps", job, cpu="100m", layout=(
        'strategy="parameter_server", num_workers=2, num_ps=1, evaluator=True'))
    phase, log = _finished(cluster, "train-ps")
    assert phase == "Succeeded", log + _job_logs(cluster, job)
    assert "RESULT basic 0" in log, log
    assert (claim / "models" / job / "1" / "saved_model.pb").exists()
    assert "chief-0: ParameterServerStrategy coordinating 2 worker(s) and 1 parameter " \
           "server(s)" in log, log
    # The chief ran to the end; the PS and the workers, which serve until they are stopped,
    # are deleted with the job's running pods (cleanPodPolicy Running), and so is the
    # evaluator if it was still scoring the last checkpoint when the job succeeded. The
    # operator does that in the reconcile after the one that wrote Succeeded, which the
    # launcher may already have seen (kubeflow/training-operator v1.9.2
    # pkg/controller.v1/common/job.go, ReconcileJobs: IsFinished -> CleanUpResources), and a
    # deleted pod is Running until its process has stopped: hence the wait.
    until(lambda: _phases(cluster, job) in ({"chief-0": "Succeeded", "evaluator-0": "Succeeded"},
                                            {"chief-0": "Succeeded"}),
          "only the chief (and a finished evaluator) left", 60,
          shown=lambda: _phases(cluster, job))


def test_a_job_the_scheduler_cannot_place_says_why_while_it_waits(cluster, claim):
    """Workers asking for more CPU than the node has: the operator calls the TFJob Running,
    the scheduler keeps its pods Unschedulable, and the step's progress quotes the scheduler
    (fmnist_kfp.kubernetes.pods) until its deadline deletes the job."""
    job = "fmnist-basic-too-big"
    _start_step(cluster, "train-too-big", job, cpu="3", timeout_seconds=40)
    phase, log = _finished(cluster, "train-too-big")
    assert phase == "Failed", log
    assert (f"waiting for {job}-worker-0: Unschedulable: 0/1 nodes are available: "
            "1 Insufficient cpu") in log, log
    assert "did not finish within the step's 40 s" in log, log
    until(lambda: _tfjob(cluster, job) is None, "the TFJob deleted", 60)


def test_a_killed_worker_is_restarted_and_training_resumes_from_its_checkpoint(cluster, claim):
    """SIGKILL to a worker's process once an epoch is checkpointed: exit code 137, which the
    TFJob's ExitCode policy retries (kubeflow/training-operator v1.9.2
    pkg/controller.v1/common/pod.go); its peer exits with trainer.PEER_LOST_EXIT_CODE, retried
    too, and the job resumes from the checkpoint and finishes. (The launcher's restart count is
    not asserted: a poll can miss a recreated pod entirely.)"""
    import os
    import signal

    job = "fmnist-basic-killed"
    # One kill can cost a restart of each worker: the killed one, and a peer that loses it
    # (and, rarely, the restarted one losing that peer in turn).
    _start_step(cluster, "train-killed", job, epochs=EPOCHS_KILLED, max_restarts=4)
    history = claim / "models" / job / "history.jsonl"
    until(lambda: history.exists() and history.read_text().count("\n") >= 1,
          "an epoch checkpointed", 300)
    [worker] = [p for p in _workers(cluster, job) if p.metadata.name.endswith("worker-1")]
    [status] = worker.status.container_statuses
    os.kill(int(status.container_id.removeprefix("process://")), signal.SIGKILL)
    # The operator recreates the killed worker's pod (ExitCode: 137 is retried). Seen while
    # the job runs: once worker 0 has succeeded, the operator's next reconcile may delete a
    # worker still exiting (v1.9.2 tfjob_controller.go UpdateJobStatus L467, cleanPodPolicy
    # Running), so after the job there may be no worker-1 pod to look at.
    until(lambda: any(p.metadata.name.endswith("worker-1")
                      and p.metadata.uid != worker.metadata.uid
                      for p in _workers(cluster, job)), "the killed worker's pod recreated", 300)
    phase, log = _finished(cluster, "train-killed")
    assert phase == "Succeeded", log
    assert "RESULT basic" in log, log
    epochs = [line for line in history.read_text().splitlines() if line]
    assert len(epochs) >= EPOCHS_KILLED  # every epoch logged once at least; none lost
    assert (claim / "models" / job / "1" / "saved_model.pb").exists()


def test_terminating_the_step_deletes_its_tfjob(cluster, claim):
    """The step pod deleted (a run terminated in KFP): SIGTERM reaches the launcher, which
    deletes the TFJob before it exits (fmnist_kfp.kubernetes.runner)."""
    job = "fmnist-basic-stopped"
    log = claim / "train-stopped.log"
    _start_step(cluster, "train-stopped", job, epochs=50, log_file=log.name)
    until(lambda: len(_workers(cluster, job)) == 2, "two workers", 300)
    _core(cluster).delete_namespaced_pod("train-stopped", NAMESPACE, grace_period_seconds=30)

    def seen() -> str:
        tfjob = _tfjob(cluster, job) or {}
        return (f"TFJob metadata {tfjob.get('metadata')}; the step's output: "
                f"{log.read_text() if log.exists() else '(none)'}")

    until(lambda: _tfjob(cluster, job) is None, "the TFJob deleted", 60, shown=seen)
    until(lambda: not _workers(cluster, job), "the workers gone", 60)


def test_a_retried_step_finds_its_running_tfjob(cluster, claim):
    """A step killed without its clean-up (its process SIGKILLed: a lost node, the OOM killer;
    a deleted pod gets SIGTERM and its grace, even force-deleted) leaves its TFJob running; the
    retry, with the same stable job name, re-attaches and waits for it instead of failing on
    409 or starting over."""
    import os
    import signal

    job = "fmnist-basic-retried"
    _start_step(cluster, "train-first", job, epochs=6)
    until(lambda: len(_workers(cluster, job)) == 2, "two workers", 300)
    [status] = _core(cluster).read_namespaced_pod("train-first", NAMESPACE).status \
        .container_statuses
    os.kill(int(status.container_id.removeprefix("process://")), signal.SIGKILL)
    until(lambda: _core(cluster).read_namespaced_pod("train-first", NAMESPACE).status.phase
          == "Failed", "the first step failed", 300)
    uid = _tfjob(cluster, job)["metadata"]["uid"]
    _start_step(cluster, "train-retry", job, epochs=6)
    phase, log = _finished(cluster, "train-retry")
    assert phase == "Succeeded", log
    assert f"re-attaching to the existing TFJob {NAMESPACE}/{job}" in log, log
    assert _tfjob(cluster, job)["metadata"]["uid"] == uid
