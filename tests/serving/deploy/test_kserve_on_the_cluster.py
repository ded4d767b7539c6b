"""KServe for real, in Standard mode: v0.15.2 (Kubeflow 1.11, the mode spelled
``RawDeployment``) and v0.16.0 (Kubeflow 26.03, ``Standard``), each its controller manager and
webhooks on a local control plane of its own (localcluster.operators.KSERVE_V0_15, _V0_16),
serving our ServingRuntime and the InferenceService the deploy step builds, the steps run in
pods of the compiled image.

What KServe does here, and the tests check, is what it does on a cluster: its validating and
defaulting webhooks admit the InferenceService; its controller makes the predictor's
Deployment (our model server, the model's claim mounted at /mnt/models by its pod mutator,
no storage initializer: kserve v0.15.2 pkg/webhook/admission/pod/storage_initializer_injector.go
L285, ``enableDirectPvcVolumeMount: true`` in config/configmap/inferenceservice.yaml; v0.16.0
the same file L360-372, for every pvc:// URI), its Service (port 80 to the container's 8080) and its
HorizontalPodAutoscaler, all owned by the InferenceService, and reports it Ready once the
Deployment's pod passes our readiness probe. The deploy step's verification and the predict
step then ask the model by its Service's name from their pods, as in a pipeline, and get the
model's own answers.
"""

from __future__ import annotations

import shutil

import pytest

from fmnist_kfp.kubernetes.inference_service import (
    ANNOTATION_MODEL_URI,
    ANNOTATION_TEST_ACCURACY,
    TAG_ROUTING_ANNOTATION,
)
from fmnist_kfp.kubernetes.inference_service_status import STANDARD, DeploymentMode, mode_of
from fmnist_kfp.settings.platform import MOUNT_PATH
from tests.cluster import can_run_pods, start_real_cluster, step_pod
from tests.conftest import export_untrained_model
from tests.kfp_on_the_cluster import released_step

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not can_run_pods(), reason="the node agent needs root")]

# Each version, and how the deploy step spells Standard mode for it (docs/cluster.md: 0.16's
# webhook does not read RawDeployment as raw mode).
VERSIONS = {"0.15.2": ("KSERVE_V0_15", "RawDeployment"), "0.16.0": ("KSERVE_V0_16", "Standard")}
GROUP = "/apis/serving.kserve.io/v1beta1"


@pytest.fixture(scope="module", params=list(VERSIONS))
def kserve_cluster(request, tmp_path_factory):
    """A control plane whose node runs the KServe version, installed from its config/default;
    (cluster, the Standard mode's spelling)."""
    operator, spelling = VERSIONS[request.param]
    plane, cluster = start_real_cluster(tmp_path_factory.mktemp("kserve"), (operator,))
    try:
        cluster.install(operator)
        yield cluster, DeploymentMode(STANDARD, spelling, "test")
    finally:
        plane.stop()


def _condition(obj: dict, kind: str) -> str | None:
    return next((c["status"] for c in (obj.get("status") or {}).get("conditions") or []
                 if c["type"] == kind), None)


def _assert_kserve_made_the_predictor(cluster, namespace: str, name: str, *, image: str,
                                     claim: str, sub_path: str, model_uri: str,
                                     mode: DeploymentMode) -> None:
    """What KServe made of the deploy step's InferenceService ``name``: the mode recorded in
    its status; the predictor's Deployment, Service and HPA owned by it; the pod template with
    our image, KServe's filled-in args and the InferenceService's annotations; the model's
    claim mounted by KServe's pod mutator; the Service's port 80 to the container's 8080."""
    served = cluster.read_or_none(f"{GROUP}/namespaces/{namespace}/inferenceservices/{name}")
    assert _condition(served, "Ready") == "True", served.get("status")
    assert served["status"]["url"].startswith("http://")
    # KServe records the mode it chose (from 0.15.1), and the rollout reads it so (an update
    # must carry the spelling the status has, or KServe's webhook refuses it).
    recorded = mode_of(served, cluster_default="Serverless")
    assert (recorded.mode, recorded.annotation) == (STANDARD, mode.annotation), recorded
    assert recorded.source.startswith("status.deploymentMode"), recorded

    predictor = f"{name}-predictor"
    uid = served["metadata"]["uid"]
    made = {kind: cluster.read_or_none(f"{group}/namespaces/{namespace}/{kind}/{predictor}")
            for group, kind in (("/apis/apps/v1", "deployments"), ("/api/v1", "services"),
                                ("/apis/autoscaling/v2", "horizontalpodautoscalers"))}
    for kind, obj in made.items():
        assert obj is not None, f"KServe made no {kind} {predictor}"
        assert [o["uid"] for o in obj["metadata"]["ownerReferences"]] == [uid], kind
    template = made["deployments"]["spec"]["template"]
    # KServe copies the InferenceService's annotations into the pod template, so writing one
    # restarts the served model's pods: why serve_early's claim is a ConfigMap instead
    # (docs/serving.md; serving/deploy/kserve_promotion.py).
    assert template["metadata"]["annotations"][ANNOTATION_MODEL_URI] == model_uri
    [container] = template["spec"]["containers"]
    assert container["image"] == image
    assert "--model_dir=/mnt/models" in container["args"]
    assert f"--model_name={name}" in container["args"]  # KServe filled in {{.Name}}
    # KServe's pod mutator (its storage-initializer injector) mounts the model's claim into
    # the predictor's pod: the Deployment's template has no volume of it.
    pods = cluster.read_or_none(f"/api/v1/namespaces/{namespace}/pods?labelSelector="
                                f"serving.kserve.io/inferenceservice={name}")["items"]
    [pod] = [p for p in pods if p["status"].get("phase") == "Running"]
    [volume] = [v for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert volume["persistentVolumeClaim"]["claimName"] == claim
    [mount] = [m for m in pod["spec"]["containers"][0]["volumeMounts"]
               if m["name"] == volume["name"]]
    assert (mount["mountPath"], mount["subPath"]) == ("/mnt/models", sub_path)
    [port] = made["services"]["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (80, 8080)
    hpa = made["horizontalpodautoscalers"]["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (1, 2)
    # The safe rollout the deploy step asks for reaches what KServe made: the Deployment
    # never goes below the replicas serving (maxUnavailable 0, one pod surged), each pod is
    # ready only once our server answers for the model, and the HPA scales on the
    # InferenceService's metric (autoscalerClass hpa, Standard mode's).
    assert made["deployments"]["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    assert container["readinessProbe"]["httpGet"]["path"] == f"/v2/models/{name}/ready"
    assert served["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "hpa"
    assert TAG_ROUTING_ANNOTATION not in served["metadata"]["annotations"]  # Knative's
    predictor_spec = served["spec"]["predictor"]
    assert [(m["resource"]["name"], m["resource"]["target"]["averageUtilization"])
            for m in hpa["metrics"]] == [(predictor_spec["scaleMetric"],
                                          predictor_spec["scaleTarget"])]
    assert "canaryTrafficPercent" not in predictor_spec  # Knative's; no traffic split here


def _serving(namespace: str, mode: DeploymentMode, storage_uri: str,
             max_replicas: int = 1) -> dict:
    """The ``serving`` the steps here pass: one small replica (the node's 2 CPUs; with no
    metrics server here, an HPA of 2 never scales up)."""
    return {"namespace": namespace, "deployment_mode": mode.annotation,
            "storage_uri": storage_uri, "cpu": "250m", "memory": "1Gi", "min_replicas": 1,
            "max_replicas": max_replicas}


def test_the_deploy_step_rolls_models_out_on_the_real_kserve(kserve_cluster, exported_model,
                                                            synthetic_dataset, tmp_path):
    """The deploy step in a pod of the compiled image, as pipeline-runner, against the real
    KServe in Standard mode: a first model is created; a better one runs as its own candidate
    InferenceService, is verified at the candidate's address and rolled over the main one, the
    candidate then deleted (through KServe's finalizer); a broken build (a server whose
    answers are not its model's) fails as a candidate and leaves the served model alone; the
    predict step, at the URL the deploy step output, gets the promoted model's answers."""
    cluster, mode = kserve_cluster
    image, env = released_step("exec-deploy-model")
    claim = env["FMNIST_PVC_NAME"]
    namespace = cluster.step_namespace("deploy", dataset=synthetic_dataset, claim=claim)
    root = cluster.claim_dir(namespace, claim)
    other = export_untrained_model(tmp_path / "other", seed=8)
    for folder, model in (("first", exported_model), ("second", other)):
        shutil.copytree(model, root / "models" / folder)

    def deploy(step: str, served: str, claimed: str, accuracy: float,
               max_replicas: int = 1) -> dict:
        """The deploy step: ``claimed``'s model, its accuracy, served from ``served``."""
        serving = _serving(namespace, mode, f"pvc://{claim}/models/{served}", max_replicas)
        script = f"""
import json
from fmnist_kfp.kfp_components.deploy.step import DeploymentError, deploy
try:
    decision = deploy(model_dir="{MOUNT_PATH}/models/{claimed}",
                      model_uri="minio://mlpipeline/runs/{step}/best_model",
                      test_accuracy={accuracy}, data_dir="{MOUNT_PATH}/dataset",
                      backend="kubernetes", model_name="fashion-mnist", tolerance=0.005,
                      verification_images=16, serving={serving!r}, image={image!r}).record()
except DeploymentError as error:
    decision = {{"failed": str(error)}}
print(json.dumps(decision))
"""
        decision, _ = cluster.run_step_pod(namespace, step, image, env, script, 600)
        return decision

    group = f"{GROUP}/namespaces/{namespace}/inferenceservices"
    first = deploy("deploy-1", "first", "first", 0.10, max_replicas=2)
    assert first["action"] == "created", first
    assert first["verification"]["ok"], first
    assert first["url"].endswith(".svc.cluster.local"), first
    main = cluster.read_or_none(f"{group}/fashion-mnist")
    assert main["spec"]["predictor"]["model"]["storageUri"] == f"pvc://{claim}/models/first"
    _assert_kserve_made_the_predictor(
        cluster, namespace, "fashion-mnist", image=image, claim=claim, sub_path="models/first",
        model_uri=f"pvc://{claim}/models/first", mode=mode)

    second = deploy("deploy-2", "second", "second", 0.20)
    assert second["action"] == "promoted", second
    # Verified first at a candidate InferenceService's own address, then rolled over the
    # main one and verified there.
    assert second["canary_url"].endswith(".svc.cluster.local"), second
    assert second["canary_url"] != second["url"] == first["url"], second
    assert "rolled over" in second["reason"] and "passed verification" in second["reason"]
    main = cluster.read_or_none(f"{group}/fashion-mnist")
    assert main["spec"]["predictor"]["model"]["storageUri"] == f"pvc://{claim}/models/second"
    annotations = main["metadata"]["annotations"]
    assert (annotations[ANNOTATION_TEST_ACCURACY], annotations[ANNOTATION_MODEL_URI]) == (
        "0.200000", f"pvc://{claim}/models/second")
    assert [i["metadata"]["name"] for i in cluster.read_or_none(group)["items"]] == \
        ["fashion-mnist"], "the candidate was not deleted"

    # A build whose server runs the first model's weights while claiming a new model's.
    broken = deploy("deploy-3", "first", "second", 0.30)
    assert "candidate_failed" in broken.get("failed", ""), broken
    main = cluster.read_or_none(f"{group}/fashion-mnist")
    assert main["spec"]["predictor"]["model"]["storageUri"] == f"pvc://{claim}/models/second"
    names = [i["metadata"]["name"] for i in cluster.read_or_none(group)["items"]]
    assert names == ["fashion-mnist"], names

    # The predict step, in a pod of its own compiled image, at the URL the deploy step output:
    # the promoted model answers, with its own answers.
    image, env = released_step("exec-predict-with-served-model")
    script = f"""
import json
from fmnist_kfp.kfp_components.predict.step import predict_step
print(json.dumps(predict_step(model_dir="{MOUNT_PATH}/models/second",
                              data_dir="{MOUNT_PATH}/dataset", url={second["url"]!r},
                              model_name="fashion-mnist", sample_size=32,
                              serves_model=True).metrics()))
"""
    metrics, _ = cluster.run_step_pod(namespace, "predict", image, env, script, 600)
    assert metrics["failures"] == 0 and metrics["images"] == 32, metrics
    assert metrics["unexplained_disagreements"] == 0, metrics
    cluster.delete_namespace(namespace)


def _promote_script(namespace: str, claim: str, folder: str, image: str,
                    mode: DeploymentMode) -> str:
    """The promote step (serve_early) of the model in ``models/<folder>`` of the claim."""
    serving = _serving(namespace, mode, f"pvc://{claim}/models/{folder}")
    return f"""
import json
from fmnist_kfp.kfp_components.promote.step import promote
decision = promote(model_dir="{MOUNT_PATH}/models/{folder}",
                   model_uri="minio://mlpipeline/runs/{folder}/model", model_type="{folder}",
                   data_dir="{MOUNT_PATH}/dataset", backend="kubernetes",
                   model_name="fashion-mnist", tolerance=0.005, verification_images=16,
                   serving={serving!r}, image={image!r})
print(json.dumps(decision.record()))
"""


# On the newest version only: the claim is our ConfigMap, and the promotions' calls to KServe
# (create from a cold start, the update, the Standard mode's spelling) are the deploy step's,
# which the test above makes on each version; a second cluster's run would cost 100 s of CI.
@pytest.mark.parametrize("kserve_cluster", ["0.16.0"], indirect=True)
def test_serve_early_from_a_cold_start_serves_the_better_model_and_its_claim_dies_with_it(
        kserve_cluster, synthetic_dataset, tmp_path):
    """serve_early on the real KServe: two promote steps, in pods of the compiled image as
    pipeline-runner, race from a cold start (no InferenceService yet); the better model ends
    served whichever finishes first, neither step fails, no candidate is left, and the claim
    is bound to the InferenceService's uid. Deleting the InferenceService (KServe's finalizer,
    then the garbage collector) voids the claim: a worse model's promotion then serves it
    (issue 41 item 4, on the real controllers)."""
    from fmnist_kfp.selection.select import validation_accuracy
    from fmnist_kfp.serving.deploy.kserve_promotion import CLAIM_MODEL_URI, CLAIM_UID, claim_name

    cluster, mode = kserve_cluster
    image, env = released_step("exec-promote-early")
    claim = env["FMNIST_PVC_NAME"]
    namespace = cluster.step_namespace("early", dataset=synthetic_dataset, claim=claim)
    root = cluster.claim_dir(namespace, claim)
    # Two untrained models of different validation accuracy: the better and the worse.
    scored = {}
    for seed in (7, 8, 9):
        model = export_untrained_model(tmp_path / f"seed-{seed}", seed=seed)
        scored[validation_accuracy(str(model), str(synthetic_dataset))] = model
    low, high = min(scored), max(scored)
    assert high - low > 0.005, scored  # beyond the blessing tolerance, or none is better
    worse, better = scored[low], scored[high]
    for folder, model in (("better", better), ("worse", worse)):
        shutil.copytree(model, root / "models" / folder)
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client)
    for folder in ("better", "worse"):  # at once: both find no InferenceService
        core.create_namespaced_pod(namespace, step_pod(
            f"promote-{folder}", image, env,
            _promote_script(namespace, claim, folder, image, mode)))
    decisions = {folder: cluster.step_result(namespace, f"promote-{folder}", 600)[0]
                 for folder in ("better", "worse")}
    assert decisions["better"]["action"] in ("created", "promoted"), decisions
    assert decisions["worse"]["action"] in ("created", "rejected", "superseded"), decisions
    group = f"{GROUP}/namespaces/{namespace}/inferenceservices"
    main = cluster.read_or_none(f"{group}/fashion-mnist")
    better_uri = f"pvc://{claim}/models/better"
    assert main["spec"]["predictor"]["model"]["storageUri"] == better_uri, decisions
    assert [i["metadata"]["name"] for i in cluster.read_or_none(group)["items"]] == \
        ["fashion-mnist"], "a candidate was left behind"
    claim_path = f"/api/v1/namespaces/{namespace}/configmaps/{claim_name('fashion-mnist')}"
    held = cluster.read_or_none(claim_path)["data"]
    assert held[CLAIM_MODEL_URI] == better_uri and held[CLAIM_UID] == main["metadata"]["uid"]

    # Deleted by a person: KServe's finalizer, then the garbage collector (its Deployment).
    client.CustomObjectsApi(cluster.api_client).delete_namespaced_custom_object(
        "serving.kserve.io", "v1beta1", namespace, "inferenceservices", "fashion-mnist")
    assert cluster.gone(f"{group}/fashion-mnist", 120)
    assert cluster.gone(f"/apis/apps/v1/namespaces/{namespace}/deployments/"
                        "fashion-mnist-predictor", 120)
    decision, log = cluster.run_step_pod(
        namespace, "promote-worse-again", image, env,
        _promote_script(namespace, claim, "worse", image, mode), 600)
    assert decision["action"] == "created", log[-4000:]
    main = cluster.read_or_none(f"{group}/fashion-mnist")
    assert main["spec"]["predictor"]["model"]["storageUri"] == f"pvc://{claim}/models/worse"
    cluster.delete_namespace(namespace)
