"""The released pipeline YAML, run whole on the real cluster: every step a Pod, every job the
real operators' (issue 41, the whole cluster path).

The cluster (tests/cluster.py, ``whole_path_cluster``): kube-apiserver, etcd, the controller
manager, the scheduler and kube-proxy v1.34.1; Kubeflow Trainer v2.2.0 with JobSet v0.11.0,
the Training Operator v1.9.2, Katib v0.19.0 (its controller, webhooks, db-manager on MariaDB,
the suggestion service) and KServe v0.16.0 in Standard mode, each built from its Go module and
installed from its own manifests. ``compiled/fashion_mnist_pipeline.yaml``, the file a user
uploads, is walked by kfp.local's orchestrator, each task a Pod of its compiled executor
(tests/kfp_on_the_cluster.py says what KFP's backend would add): freshness -> ingest -> tune
(a Katib Experiment whose trials the operator trains) -> train (a TFJob or TrainJob of two
workers) -> select -> batch predict (an Indexed Job) and deploy (an InferenceService KServe
serves) -> predict (a pod asking the served model over HTTP), on 2,048 images of the real
Fashion-MNIST.

What a real cluster would still add: images pulled from a registry and run in containers
(here the node runs the project's code as processes), KFP's backend moving artifacts through
MinIO and KServe's storage initializer fetching the model from it (here the store is a claim
KServe mounts: ``serving.storage_uri`` names it), and Istio in front of KServe (Serverless
mode: docs/cluster.md).
"""

from __future__ import annotations

import json
import time

import pytest

from fmnist_kfp.kubernetes.trainjob import PATCH_MANAGER
from fmnist_kfp.settings.platform import MOUNT_PATH
from tests.cluster import can_run_pods
from tests.kfp_components.test_cluster_steps import (
    KATIB_INJECTION_LABEL,
    collected_objective,
    katib_objects,
    training_job,
)
from tests.kfp_on_the_cluster import RELEASED, PipelineOnTheCluster, artifact_path, released_step

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not can_run_pods(), reason="the node agent needs root")]

POD_SECONDS = 600  # the most one step may take here (2 shared cores), under pytest's 900
RUN = "run-on-the-cluster"
# Each job pod's CPU: the node has this machine's 2 CPUs, of which the controllers request
# 1.1 (JobSet and Kueue 500m each, KServe 100m) and a trial's metrics collector and Katib's
# suggestion service 50m each; two workers of 250m fit beside them (two of 500m did not once
# the Kueue tests had installed Kueue: the second worker stayed Unschedulable).
POD_CPU = "250m"
# The pipeline's kubernetes.operator, the operator it chooses on a cluster serving both, and
# what the jobs then are.
OPERATORS = {"trainjob": ("trainjob", "TrainJob"), "auto": ("tfjob", "TFJob")}


@pytest.fixture
def run_namespace(whole_path_cluster):
    """A namespace as the README's setup leaves a profile's: pipeline-runner and its Role, the
    compiled claim, Katib's metrics-collector label (as Kubeflow's profile controller sets)."""
    from kubernetes import client

    _, env = released_step("exec-train-model")
    name = whole_path_cluster.step_namespace("pipeline", claim=env["FMNIST_PVC_NAME"])
    client.CoreV1Api(whole_path_cluster.api_client).patch_namespace(
        name, {"metadata": {"labels": KATIB_INJECTION_LABEL}})
    yield name
    whole_path_cluster.delete_namespace(name)


@pytest.mark.parametrize("operator", list(OPERATORS))
def test_the_released_pipeline_runs_whole_on_the_cluster(real_data_dir, whole_path_cluster,
                                                         run_namespace, operator):
    """Every step of the released YAML as a Pod of its compiled image, environment and claims,
    as pipeline-runner; ingest to predict on the real programs: the tune step's Experiment run
    by Katib (``trainjob``: TrainJob trials), its best values trained by the operator the run
    chose, the selected model served
    by KServe and answering a pod over HTTP as it answers the predict step, the batch
    predictions an Indexed Job's."""
    cluster, namespace = whole_path_cluster, run_namespace
    chosen, kind = OPERATORS[operator]
    # One variant tunes: the TrainJob trials' only search on the real Katib (the TFJob
    # trials' runs whole, with early stopping, in tests/katib/test_katib_on_the_cluster.py;
    # a second here would buy a minute of CI).
    tune = operator == "trainjob"
    image, env = released_step("exec-train-model")
    claim = env["FMNIST_PVC_NAME"]
    pipeline = PipelineOnTheCluster(cluster, namespace, RELEASED, POD_SECONDS)
    serving = {"namespace": namespace, "deployment_mode": "Standard",
               "storage_uri": pipeline.storage_uri(RUN, "select-best-model", "best_model"),
               "cpu": "250m", "memory": "1Gi", "min_replicas": 1, "max_replicas": 1}
    tuning = {"algorithm": "random", "random_state": 2, "max_trials": 2, "parallel_trials": 1,
              "epochs": 1, "train_examples": 256, "early_stopping": False}
    started = time.monotonic()
    outputs = pipeline.run(RUN, dict(
        data_source=str(real_data_dir), model_types=["basic"], epochs=2, train_examples=2048,
        learning_rate=4e-3, batch_size=64, filters=8, num_workers=2, max_restarts=1,
        backend="kubernetes", kubernetes={"operator": operator, "cpu": POD_CPU,
                                          "memory": "2Gi"},
        tune=tune, tuning=tuning, verification_images=16, prediction_images=16,
        serving=serving, batch_prediction_workers=2))
    seconds = time.monotonic() - started
    print(f"the whole pipeline on the cluster: {seconds:.0f} s")

    # Every step ran as a Pod, each with only the claims the YAML's platform spec mounts.
    # (Batch prediction and deployment both follow selection: either may run first.)
    ran = [executor for executor, _, _ in pipeline.pods]
    # (The tune step runs untuned too: it hands the given values on.)
    assert ran[:5] == ["exec-freshness-window", "exec-ingest-fashion-mnist",
                       "exec-tune-hyperparameters", "exec-train-model",
                       "exec-select-best-model"], ran
    assert sorted(ran[5:]) == ["exec-batch-predict", "exec-deploy-model",
                               "exec-predict-with-served-model"], ran
    assert ran.index("exec-deploy-model") < ran.index("exec-predict-with-served-model"), ran
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client)
    for executor, pod_name, _ in pipeline.pods:
        pod = core.read_namespaced_pod(pod_name, namespace)
        assert pod.spec.service_account_name == "pipeline-runner"
        assert pod.spec.containers[0].image == released_step(executor)[0]
        claims = {v.persistent_volume_claim.claim_name for v in pod.spec.volumes
                  if v.persistent_volume_claim}
        mounts_claim = executor in ("exec-tune-hyperparameters", "exec-train-model",
                                    "exec-batch-predict")
        assert (claim in claims) == mounts_claim, (executor, claims)
    volume = cluster.claim_dir(namespace, claim)

    # ingest: the real dataset, its checksums verified.
    dataset = json.loads((pipeline.root / RUN / "ingest-fashion-mnist" / "dataset" /
                          "metadata.json").read_text())
    assert dataset["splits"]["test"]["num_examples"] == 10000, dataset
    assert dataset["verification"] == "sha256 of each file against the official release"

    # tune: Katib ran the Experiment, its two trials trained by the chosen operator, and the
    # best trial's values are what the training job trained with.
    searched = _tuned(cluster, namespace, kind, volume) if tune else {}
    assert tune or katib_objects(cluster, namespace, "experiments") == []  # untuned: none

    # train: one job of the chosen kind, two workers, none of the other operator.
    job, pods, others = training_job(cluster, namespace, kind)
    assert others == []
    model = outputs["best_model"]
    metadata = model.metadata
    assert metadata["backend"] == "kubernetes" and metadata["operator"] == chosen
    assert metadata["job_name"] == job["metadata"]["name"]
    assert metadata["replicas"] == 2 and metadata["restarts"] == 0
    # (KFP hands metadata on as a protobuf Struct, whose numbers are doubles.)
    assert {k: float(metadata["hyperparameters"][k]) for k in searched} == \
        {k: float(v) for k, v in searched.items()}
    job_name = job["metadata"]["name"]
    # Both workers trained: replicas is the chief's num_replicas_in_sync. A TFJob without a
    # chief succeeds with worker 0, and the operator's next reconcile deletes a worker still
    # exiting (training-operator v1.9.2 tfjob_controller.go UpdateJobStatus L467;
    # cleanPodPolicy Running): worker 1's pod may be gone by now (seen in CI).
    names = {p.metadata.name for p in pods}
    if chosen == "trainjob":
        assert len(pods) == 2, names
    else:
        assert f"{job_name}-worker-0" in names and \
            names <= {f"{job_name}-worker-{i}" for i in (0, 1)}, names
    assert {p.spec.containers[0].image for p in pods} == {image}
    logs = {}
    if chosen == "trainjob":
        assert job["spec"]["trainer"]["numNodes"] == 2
        # Trainer 2.2's shape; Kueue, when the Kueue tests installed it on this cluster,
        # adds a patch of its own beside ours, each named by its manager.
        [patch] = [p for p in job["spec"]["runtimePatches"] if p["manager"] == PATCH_MANAGER]
        [replicated] = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
        volumes = replicated["template"]["spec"]["template"]["spec"]["volumes"]
        assert sorted(p.spec.hostname for p in pods) == [f"{job_name}-node-0-0",
                                                         f"{job_name}-node-0-1"]
        for pod in pods:
            index = pod.metadata.annotations["batch.kubernetes.io/job-completion-index"]
            logs[index] = core.read_namespaced_pod_log(pod.metadata.name, namespace)
            assert f"TF_CONFIG from the JobSet environment: worker {index} of " \
                f"{job_name}-node-0-0.{job_name}:" in logs[index], logs[index][-2000:]
    else:
        worker = job["spec"]["tfReplicaSpecs"]["Worker"]
        assert worker["replicas"] == 2
        assert job["spec"]["runPolicy"]["backoffLimit"] == 2  # max_restarts 1
        volumes = worker["template"]["spec"]["volumes"]
        container = worker["template"]["spec"]["containers"][0]
        assert container["volumeMounts"][0]["mountPath"] == MOUNT_PATH
        assert container["resources"]["limits"]["cpu"] == POD_CPU  # the run's kubernetes
        # TF_CONFIG as the operator injected it (tensorflow.go v1.9.2 lines 136-184).
        configs = {p.metadata.name: json.loads(next(
            e.value for e in p.spec.containers[0].env if e.name == "TF_CONFIG")) for p in pods}
        for name, config in configs.items():
            assert name == f"{job_name}-worker-{config['task']['index']}", configs
            assert config["task"]["type"] == "worker" and len(config["cluster"]["worker"]) == 2
        for pod in pods:
            index = str(configs[pod.metadata.name]["task"]["index"])
            logs[index] = core.read_namespaced_pod_log(pod.metadata.name, namespace)
    assert volumes[0]["persistentVolumeClaim"]["claimName"] == claim
    assert "epoch=2 epochs=2" in logs["0"], logs["0"][-2000:]
    # One staged dataset: the first step on the claim staged it, the others reused it.
    [staged] = list((volume / "datasets").iterdir())
    assert (staged / "metadata.json").exists()

    # select: the trained model, scored on the real test split.
    assert outputs["best_model_type"] == "basic"
    best_dir = artifact_path(model.uri, pipeline.store)
    assert model.uri.startswith("minio://mlpipeline/v2/artifacts/")
    assert (best_dir / "1" / "saved_model.pb").exists()
    assert metadata["test_accuracy"] > 0.4, metadata  # 2,048 images, 2 epochs: it learned

    # batch predict: an Indexed Job of two pods scored the whole test split.
    predictions = outputs["batch_predictions"].metadata
    assert predictions["backend"] == "kubernetes" and predictions["workers"] == 2
    assert predictions["rows"] == predictions["predicted"] == 10000, predictions
    # The same model on the same images, scored in other batches: equal in every run so far;
    # a near-tie may round the other way, so 20 of the 10,000 images may differ.
    assert abs(predictions["accuracy"] - metadata["test_accuracy"]) <= 0.002, predictions
    batch = client.BatchV1Api(cluster.api_client).read_namespaced_job(
        predictions["job_name"], namespace)
    assert batch.spec.completion_mode == "Indexed" and batch.status.succeeded == 2

    # deploy: KServe serves the selected model from the store's claim in Standard mode.
    decision = outputs["deployment"].metadata
    assert decision["action"] == "created" and decision["backend"] == "kubernetes", decision
    assert decision["verification"]["ok"], decision
    url = outputs["serving_url"]
    assert url == decision["url"] and url.endswith(".svc.cluster.local"), url
    isvc = cluster.read_or_none(f"/apis/serving.kserve.io/v1beta1/namespaces/{namespace}/"
                                "inferenceservices/fashion-mnist")
    assert isvc["spec"]["predictor"]["model"]["storageUri"] == serving["storage_uri"]
    assert isvc["status"]["deploymentMode"] == "Standard"
    deployment = cluster.read_or_none(f"/apis/apps/v1/namespaces/{namespace}/deployments/"
                                      "fashion-mnist-predictor")
    assert [o["uid"] for o in deployment["metadata"]["ownerReferences"]] == \
        [isvc["metadata"]["uid"]]

    # predict: the predict step's pod asked the served model at the deploy step's URL, and
    # every answer was the selected model's own.
    served = json.loads((pipeline.root / RUN / "predict-with-served-model" /
                         "executor_output.json").read_text())
    [metrics] = served["artifacts"]["metrics"]["artifacts"]
    values = metrics["metadata"]
    assert values["failures"] == 0 and values["unexplained_disagreements"] == 0, values
    assert values["requests"] >= 1 and outputs["served_accuracy"] == values["served_accuracy"]


def _katib_judges(cluster, namespace: str, operator: str, accepted: bool) -> None:
    """Until Katib's webhook (which reads the namespace from its informer's cache) accepts, or
    refuses for the missing label, the Experiment preflight sends: asked as the admin."""
    from fmnist_kfp.preflight import Cluster
    from fmnist_kfp.preflight.katib import INJECTION_LABEL, check_experiment
    from fmnist_kfp.settings.serving import KFP_STORE_SERVICE_ACCOUNT
    from tests.cluster import until

    run = Cluster(namespace=namespace, runner_service_account="pipeline-runner",
                  pvc="fmnist-data", credentials_secret="", serving_namespace=namespace,
                  serving_service_account=KFP_STORE_SERVICE_ACCOUNT, multi_user=False,
                  operator=operator)
    until(lambda: (row := check_experiment(cluster.api_client, run, operator)).ok is accepted
          and (accepted or INJECTION_LABEL in row.found),
          f"Katib's webhook {'accepting' if accepted else 'refusing'} the Experiment", 60,
          shown=lambda: check_experiment(cluster.api_client, run, operator))


def _tuned(cluster, namespace: str, kind: str, volume) -> dict:
    """The Experiment's trials of ``kind`` succeeded, and its best trial is the one whose
    objective Katib's collector recorded highest: that trial's values."""
    [experiment] = katib_objects(cluster, namespace, "experiments")
    assert experiment["spec"]["trialTemplate"]["trialSpec"]["kind"] == kind
    trials = katib_objects(cluster, namespace, "trials")
    assert len(trials) == 2
    objectives = {}
    for trial in trials:
        last = trial["status"]["conditions"][-1]
        assert (last["type"], last["status"]) == ("Succeeded", "True"), trial["status"]
        objectives[trial["metadata"]["name"]] = collected_objective(experiment, trial, volume)
    best = experiment["status"]["currentOptimalTrial"]
    assert best["bestTrialName"] == max(objectives, key=objectives.get)
    searched = {a["name"]: a["value"] for a in best["parameterAssignments"]}
    return searched


@pytest.mark.parametrize(("operator", "operator_rows"), [
    ("trainjob", ["TrainJob (Trainer v2)", "JobSet", "TrainJob the train step creates"]),
    ("tfjob", ["TFJob (Training Operator v1)", "TFJob the train step creates"])])
def test_preflight_is_green_on_the_cluster_the_pipeline_runs_on(whole_path_cluster, operator,
                                                                operator_rows):
    """``preflight`` in a step pod, as pipeline-runner, on the cluster above. In a namespace
    made by hand, without the label Kubeflow's profile controller sets, Katib's own webhook
    refuses the tune step's Experiment (dry run): red, naming the ``kubectl label`` that fixes
    it (found here: the fix said to report a bug). Labelled so: green for either operator, the
    Experiment judged by Katib's webhook, the training job by the operator's."""
    from kubernetes import client

    from fmnist_kfp.preflight import ready, render
    from fmnist_kfp.preflight.katib import INJECTION_LABEL
    from tests.fmnist_kfp.preflight.test_preflight_on_the_cluster import (
        _assert_green,
        _by_check,
        _namespace,
        _preflight_in_a_pod,
    )

    cluster = whole_path_cluster
    namespace = _namespace(cluster)
    try:
        _katib_judges(cluster, namespace, operator, accepted=False)
        rows = _preflight_in_a_pod(cluster, namespace, operator)
        assert not ready(rows), render(rows)
        [missing] = [row for row in rows if row.ok is False]
        assert missing.check == "Katib Experiment the tune step creates", render(rows)
        assert missing.fix.startswith(
            f"kubectl label namespace {namespace} {INJECTION_LABEL}=enabled"), render(rows)

        client.CoreV1Api(cluster.api_client).patch_namespace(  # the fix, as it says
            namespace, {"metadata": {"labels": KATIB_INJECTION_LABEL}})
        _katib_judges(cluster, namespace, operator, accepted=True)
        rows = _preflight_in_a_pod(cluster, namespace, operator)
    finally:
        cluster.delete_namespace(namespace)
    _assert_green(rows, operator_rows)
    trials = {"trainjob": "TrainJob trials", "tfjob": "TFJob trials"}[operator]
    assert trials in _by_check(rows)["Katib Experiment the tune step creates"].found
