"""The TFJob launcher on the real cluster (tests/cluster.py): the real Training Operator v1.9.2,
installed from its own manifests, runs a TFJob of 2 workers with MultiWorkerMirroredStrategy as
pods on the node agent; the launcher itself runs as the train step runs, in a pod of the
project's image as the ServiceAccount bound to manifests/standalone-rbac's Role, so the real
authorizer judges every call it makes; the model is exported to the shared claim."""

from __future__ import annotations

import shutil
import textwrap
import time

import pytest

from tests.fmnist_kfp.preflight.test_permissions_on_the_api_server import _standalone

NAMESPACE = "kubeflow"
IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.2.0"
STEP_SECONDS = 600


@pytest.fixture(scope="module")
def cluster(real_cluster):
    real_cluster.require_node()
    real_cluster.install("TRAINING_OPERATOR_V1")
    _standalone(real_cluster, NAMESPACE)  # the pipeline-runner ServiceAccount and its Role
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


def test_a_two_worker_tfjob_trains_and_exports_the_model(cluster, synthetic_dataset):
    core = _core(cluster)
    core.create_namespaced_persistent_volume_claim(NAMESPACE, {
        "metadata": {"name": "fmnist-data"},
        "spec": {"accessModes": ["ReadWriteMany"],
                 "resources": {"requests": {"storage": "5Gi"}}}})
    shutil.copytree(synthetic_dataset, cluster.claim_dir(NAMESPACE, "fmnist-data") / "dataset")
    script = f"""
        from fmnist_kfp.launcher.tfjob_launcher import TFJobLauncher
        from fmnist_kfp.settings.jobs import KubernetesSettings
        from fmnist_kfp.settings.training import TrainingConfig
        from fmnist_kfp.training.training_job import TrainingJobSpec
        settings = KubernetesSettings(image="{IMAGE}", namespace="{NAMESPACE}",
                                      pvc_name="fmnist-data", cpu="500m", memory="1Gi")
        spec = TrainingJobSpec(name="fmnist-basic-real", num_workers=2,
                               config=TrainingConfig(model_type="basic", epochs=1),
                               data_dir="/mnt/fmnist/dataset",
                               export_dir="/mnt/fmnist/models/basic/1",
                               work_dir="/mnt/fmnist/models/basic")
        outcome = TFJobLauncher(settings, poll_seconds=2, timeout_seconds={STEP_SECONDS}).run(spec)
        print("RESULT", outcome.result["model_type"], outcome.restarts)
    """
    core.create_namespaced_pod(NAMESPACE, _step_pod("train-step", script))
    deadline = time.monotonic() + STEP_SECONDS + 60
    while (phase := core.read_namespaced_pod("train-step", NAMESPACE).status.phase) not in (
            "Succeeded", "Failed"):
        assert time.monotonic() < deadline
        time.sleep(1)
    log = core.read_namespaced_pod_log("train-step", NAMESPACE)
    assert phase == "Succeeded", log
    assert "RESULT basic 0" in log
    assert "created TFJob kubeflow/fmnist-basic-real (2 replicas" in log
    exported = cluster.claim_dir(NAMESPACE, "fmnist-data") / "models" / "basic" / "1"
    assert (exported / "saved_model.pb").exists()
    # Both workers trained: the operator made a pod for each, and each ran to the end.
    pods = core.list_namespaced_pod(
        NAMESPACE, label_selector="training.kubeflow.org/job-name=fmnist-basic-real").items
    assert sorted(p.metadata.name for p in pods) == ["fmnist-basic-real-worker-0",
                                                    "fmnist-basic-real-worker-1"]
    assert all(p.status.phase == "Succeeded" for p in pods)
