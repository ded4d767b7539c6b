"""The TrainJob launcher on the real cluster (tests/cluster.py): Kubeflow Trainer v2.1.0 with
JobSet v0.10.1 (Kubeflow 26.03), and Trainer v2.2.0 with JobSet v0.11.0 (26.03.1), each
installed from its own manifests, run a TrainJob of 2 nodes on our
ClusterTrainingRuntime (manifests/trainer-runtime, applied as a cluster admin applies it) as pods
on the node agent; the launcher runs as the train step runs, in a pod of the project's image as
the ServiceAccount bound to manifests/standalone-rbac's Role."""

from __future__ import annotations

import textwrap

import pytest

pytestmark = pytest.mark.slow  # trains real models
IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.2.0"
STEP_SECONDS = 600


# The TrainJob field of the pod settings each Trainer release serves (trainer v2.2.0 dropped
# podTemplateOverrides for runtimePatches: fmnist_kfp/kubernetes/trainjob.py).
SERVED_SHAPE = {"2.1": "podTemplateOverrides", "2.2": "runtimePatches"}


# Each release's cluster fixture; its tests are that fixture's work unit (tests/conftest.py).
CLUSTER_OF = {"2.1": "real_cluster", "2.2": "real_cluster_trainer_2_2"}


@pytest.fixture(scope="module", ids=lambda r: f"trainer-{r}", params=[
    pytest.param(release, marks=pytest.mark.work_unit(CLUSTER_OF[release]))
    for release in sorted(SERVED_SHAPE)])
def cluster(request):
    """A cluster running the Trainer release ``request.param``: Kubeflow 26.03's (v2.1.0 with
    JobSet v0.10.1) on the session's cluster, 26.03.1's on its own
    (``real_cluster_trainer_2_2``); our ClusterTrainingRuntime applied
    (manifests/trainer-runtime) as a cluster admin applies it."""
    cluster = request.getfixturevalue(CLUSTER_OF[request.param])
    if request.param == "2.1":
        cluster.require_node()
        cluster.install("JOBSET_V0_10")
        cluster.install("TRAINER_V2_1")
    cluster.apply_training_runtime()
    return cluster


@pytest.fixture
def namespace(cluster, synthetic_dataset):
    """A namespace with the Role's ServiceAccount and a claim holding the dataset."""
    name = cluster.step_namespace("trainjob", synthetic_dataset)
    yield name
    cluster.delete_namespace(name)


def _run_step(cluster, namespace: str, job: str, timeout: int) -> tuple[str, str]:
    """The TrainJob launcher in a pod, as the train step runs it: (phase, log)."""
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client)
    script = f"""
        from fmnist_kfp.errors import TrainingJobError
        from fmnist_kfp.launcher.trainjob_launcher import TrainJobLauncher
        from fmnist_kfp.settings.jobs import KubernetesSettings
        from fmnist_kfp.settings.training import TrainingConfig
        from fmnist_kfp.training.training_job import TrainingJobSpec
        from fmnist_kfp.kfp_components.train.step import training_operator
        settings = KubernetesSettings(image="{IMAGE}", namespace="{namespace}",
                                      pvc_name="fmnist-data", cpu="500m", memory="1Gi",
                                      operator="trainjob")
        _, shape = training_operator(settings)  # as the step asks the API server
        spec = TrainingJobSpec(name="{job}", num_workers=2,
                               config=TrainingConfig(model_type="basic", epochs=1),
                               data_dir="/mnt/fmnist/dataset",
                               export_dir="/mnt/fmnist/models/basic/1",
                               work_dir="/mnt/fmnist/models/basic")
        launcher = TrainJobLauncher(settings, shape=shape, poll_seconds=2,
                                    timeout_seconds={timeout})
        outcome = launcher.run(spec)
        print("RESULT", outcome.result["model_type"], outcome.restarts)
    """
    core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-step"},
        "spec": {"serviceAccountName": "pipeline-runner", "restartPolicy": "Never",
                 "containers": [{"name": "main", "image": IMAGE,
                                 "command": ["python", "-c", textwrap.dedent(script)],
                                 "volumeMounts": [{"name": "data", "mountPath": "/mnt/fmnist"}]}],
                 "volumes": [{"name": "data",
                              "persistentVolumeClaim": {"claimName": "fmnist-data"}}]}})
    return cluster.pod_finished(namespace, "train-step", timeout + 60)


def test_a_two_node_trainjob_trains_and_exports_the_model(cluster, namespace, request):
    from kubernetes import client

    phase, log = _run_step(cluster, namespace, "fmnist-basic-tj", STEP_SECONDS)
    assert phase == "Succeeded", log
    release = request.node.callspec.params["cluster"]
    assert f"TrainJob pod settings as {SERVED_SHAPE[release]}" in log, log
    assert "RESULT basic 0" in log
    assert "created TrainJob" in log and "2 node(s) on runtime fmnist-tensorflow" in log
    exported = cluster.claim_dir(namespace, "fmnist-data") / "models" / "basic" / "1"
    assert (exported / "saved_model.pb").exists()
    pods = client.CoreV1Api(cluster.api_client).list_namespaced_pod(
        namespace, label_selector="jobset.sigs.k8s.io/jobset-name=fmnist-basic-tj").items
    assert len(pods) == 2 and all(p.status.phase == "Succeeded" for p in pods)


def test_discovery_reads_what_the_api_server_serves(cluster, namespace, request):
    """ClusterDiscovery against the real API server: the groups served (these clusters serve
    both kinds, so `auto` picks the TFJob), our runtime, and the TrainJob's schema published
    at /openapi/v3 (which field its Trainer release serves); an identity that may not read
    ClusterTrainingRuntimes (the Role's ServiceAccount: the manager overlay binds no such
    read, unlike Kubeflow's platform overlay) learns nothing of the runtime, rather than
    "missing"."""
    from kubernetes.client import ApiClient

    from fmnist_kfp.kubernetes.training_operators import (
        ClusterDiscovery,
        choose_operator,
        trainjob_api,
    )
    from fmnist_kfp.kubernetes.trainjob import OVERRIDES, PATCHES

    discovery = ClusterDiscovery(cluster.api_client)
    assert discovery.serves("trainer.kubeflow.org/v1alpha1", "trainjobs")
    assert discovery.serves("kubeflow.org/v1", "tfjobs")
    assert discovery.runtime_exists("fmnist-tensorflow") is True
    assert discovery.runtime_exists("other") is False
    release = request.node.callspec.params["cluster"]
    assert trainjob_api(discovery) == {"2.1": OVERRIDES, "2.2": PATCHES}[release]
    assert choose_operator("auto", discovery) == "tfjob"
    assert choose_operator("trainjob", discovery) == "trainjob"
    runner = ClusterDiscovery(ApiClient(cluster.configuration_as(namespace, "pipeline-runner")))
    assert runner.runtime_exists("fmnist-tensorflow") is None
    assert trainjob_api(runner) == trainjob_api(discovery)  # discovery is everyone's


def test_a_trainjob_whose_jobset_cannot_be_made_says_why(cluster, namespace):
    """Trainer sets no condition when it cannot create the JobSet, it records the event
    TrainJobResourcesCreationFailed (kubeflow/trainer v2.1.0 pkg/controller/trainjob_controller.go
    118-131): here a ResourceQuota allows no JobSet in the namespace. The launcher shows the
    event's reason and message while it waits, not "no pods yet"."""
    counted = "count/jobsets.jobset.x-k8s.io"
    cluster.create({"apiVersion": "v1", "kind": "ResourceQuota",
                    "metadata": {"name": "no-jobsets"}, "spec": {"hard": {counted: "0"}}},
                   namespace=namespace)
    phase, log = _run_step(cluster, namespace, "fmnist-basic-nojs", 30)
    assert phase == "Failed"
    assert "Pending: TrainJobResourcesCreationFailed:" in log, log
    # The API server's quota admission refuses the JobSet either way: "exceeded quota:
    # no-jobsets" once the quota controller has counted JobSets, "status unknown for quota:
    # no-jobsets" before (k8s.io/apiserver v0.34.1 pkg/admission/plugin/resourcequota/
    # controller.go L468-475). Which one depends on whether the quota controller's 30 s
    # discovery loop had seen the JobSet CRD when the quota was made: a quota made before that
    # is counted only at the 5-minute full resync (kubernetes v1.34.1 pkg/controller/
    # resourcequota/resource_quota_controller.go L439-500; both seen here).
    assert "quota: no-jobsets" in log, log
