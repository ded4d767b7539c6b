"""KServe manifests: every variant passes the real CRDs (strictly), fields and settings errors."""

from __future__ import annotations

import copy
import itertools

import jsonschema
import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kubernetes.inference_service import (
    ANNOTATION_MODEL_URI,
    TAG_ROUTING_ANNOTATION,
    build_inference_service,
    candidate_name,
    check_storage_uri,
)
from fmnist_kfp.kubernetes.inference_service_status import SERVERLESS, STANDARD, DeploymentMode
from fmnist_kfp.kubernetes.manifest import to_manifest
from fmnist_kfp.kubernetes.serving_runtime import build_serving_runtime
from fmnist_kfp.settings.serving import KServeSettings
from tests.crd_schemas import validate_strict
from tests.standins.kserve import ISVC_CRD, RUNTIME_CRD

IMAGE = "ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0"
URIS = ("pvc://fmnist-data/models/fmnist", "s3://fmnist-models/runs/7/model",
        "gs://fmnist_models/runs/7/model")


def settings(**overrides) -> KServeSettings:
    return KServeSettings(**{"namespace": "kubeflow", "image": IMAGE, **overrides})


RAW = DeploymentMode(STANDARD, "RawDeployment", "test")
STANDARD_MODE = DeploymentMode(STANDARD, "Standard", "test")
SERVERLESS_MODE = DeploymentMode(SERVERLESS, None, "test")


def isvc_manifest(storage_uri=URIS[0], canary=None, annotations=None, mode=SERVERLESS_MODE,
                  name=None, **overrides) -> dict:
    return to_manifest(build_inference_service(
        settings(**overrides), storage_uri=storage_uri, annotations=annotations,
        canary_traffic_percent=canary, mode=mode, name=name))


@pytest.mark.parametrize(
    "runtime,storage_uri,canary,service_account",
    list(itertools.product(("fmnist-predictor", "tensorflow"), URIS, (None, 10, 0),
                           ("", "fmnist-storage"))),
)
def test_every_inference_service_variant_passes_the_crd(runtime, storage_uri, canary,
                                                        service_account):
    manifest = isvc_manifest(storage_uri, canary, {ANNOTATION_MODEL_URI: storage_uri},
                             runtime=runtime, service_account=service_account)
    validate_strict(manifest, *ISVC_CRD)
    predictor = manifest["spec"]["predictor"]
    assert predictor["model"]["storageUri"] == storage_uri
    assert predictor.get("canaryTrafficPercent") == canary
    assert predictor.get("serviceAccountName") == (service_account or None)
    expected_runtime = {"fmnist-predictor": "fmnist-predictor",
                        "tensorflow": "kserve-tensorflow-serving"}[runtime]
    assert predictor["model"]["runtime"] == expected_runtime
    assert ("batcher" in predictor) == (runtime == "tensorflow")


@pytest.mark.parametrize(
    "runtime,mode,metric,candidate",
    list(itertools.product(("fmnist-predictor", "tensorflow"), (RAW, STANDARD_MODE),
                           ("", "cpu", "memory"), (False, True))),
)
def test_every_standard_mode_variant_passes_the_crd(runtime, mode, metric, candidate):
    name = candidate_name("fashion-mnist", URIS[1]) if candidate else None
    manifest = isvc_manifest(URIS[1], None, {ANNOTATION_MODEL_URI: URIS[1]}, mode=mode,
                             name=name, runtime=runtime, scale_metric=metric,
                             service_account="fmnist-serving")
    validate_strict(manifest, *ISVC_CRD)
    metadata, predictor = manifest["metadata"], manifest["spec"]["predictor"]
    assert metadata["annotations"]["serving.kserve.io/deploymentMode"] == mode.annotation
    assert metadata["annotations"]["serving.kserve.io/autoscalerClass"] == "hpa"
    assert TAG_ROUTING_ANNOTATION not in metadata["annotations"]
    assert predictor["deploymentStrategy"]["rollingUpdate"] == {"maxUnavailable": 0,
                                                                "maxSurge": 1}
    served = name or "fashion-mnist"
    path = (f"/v1/models/{served}" if runtime == "tensorflow"
            else f"/v2/models/{served}/ready")
    assert predictor["model"]["readinessProbe"]["httpGet"] == {"path": path, "port": 8080}
    assert predictor["scaleMetric"] == (metric or "cpu")
    assert metadata["name"] == served
    assert (metadata["labels"].get("fmnist.kubeflow.org/role") == "candidate") == candidate
    assert metadata["labels"]["app.kubernetes.io/part-of"] == "fmnist-kfp"


@pytest.mark.parametrize("mode,settings_values,message", [
    (SERVERLESS_MODE, {"scale_metric": "cpu"}, "cannot scale a Serverless"),
    (SERVERLESS_MODE, {"scale_metric": "memory"}, "cannot scale a Serverless"),
    (RAW, {"scale_metric": "concurrency"}, "cannot scale a Standard"),
    (RAW, {"scale_metric": "rps"}, "cannot scale a Standard"),
    (RAW, {"scale_metric": "cpu", "scale_target": 101}, "1..100"),
    (RAW, {"scale_metric": "memory", "scale_target": 101}, "1..100"),
])
def test_scaling_kserves_webhook_refuses_is_refused_by_the_builder(mode, settings_values,
                                                                    message):
    with pytest.raises(UserInputError, match=message):
        isvc_manifest(mode=mode, **settings_values)


@pytest.mark.parametrize("mode,metric,target", [
    (SERVERLESS_MODE, "", 0), (SERVERLESS_MODE, "rps", 1), (SERVERLESS_MODE, "concurrency", 3),
    (RAW, "", 0), (RAW, "cpu", 100), (RAW, "memory", 1), (RAW, "memory", 100),
])
def test_scaling_kserves_webhook_admits_passes(mode, metric, target):
    predictor = isvc_manifest(mode=mode, scale_metric=metric,
                              scale_target=target)["spec"]["predictor"]
    default_metric, default_target = {SERVERLESS: ("concurrency", 8),
                                      STANDARD: ("cpu", 80)}[mode.mode]
    assert predictor["scaleMetric"] == (metric or default_metric)
    assert predictor["scaleTarget"] == (target or default_target)


def test_standard_mode_refuses_a_canary_percent():
    with pytest.raises(UserInputError, match="only in Serverless"):
        isvc_manifest(canary=10, mode=RAW)


@pytest.mark.parametrize("runtime", ["fmnist-predictor", "tensorflow"])
def test_inference_service_fields(runtime):
    manifest = isvc_manifest("s3://bucket/model", 25, {"extra/key": "v"}, runtime=runtime,
                             min_replicas=2, max_replicas=5, scale_target=16, cpu="500m",
                             memory="1Gi", max_batch_size=64, max_batch_latency_ms=5)
    assert manifest["apiVersion"] == "serving.kserve.io/v1beta1"
    assert manifest["kind"] == "InferenceService"
    metadata = manifest["metadata"]
    assert metadata["name"] == "fashion-mnist" and metadata["namespace"] == "kubeflow"
    assert metadata["labels"] == {"app.kubernetes.io/part-of": "fmnist-kfp"}
    assert metadata["annotations"] == {TAG_ROUTING_ANNOTATION: "true", "extra/key": "v"}
    predictor = manifest["spec"]["predictor"]
    assert predictor["scaleMetric"] == "concurrency"
    assert predictor["scaleTarget"] == 16
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (2, 5)
    assert predictor["canaryTrafficPercent"] == 25
    model = predictor["model"]
    assert model["modelFormat"] == {"name": "tensorflow", "version": "2"}
    assert model["protocolVersion"] == "v1"
    assert model["resources"] == {"requests": {"cpu": "500m", "memory": "1Gi"},
                                  "limits": {"cpu": "500m", "memory": "1Gi"}}
    assert "name" not in model  # the runtime's container name applies
    if runtime == "tensorflow":
        assert predictor["batcher"] == {"maxBatchSize": 64, "maxLatency": 5}
    else:
        assert "batcher" not in predictor
    assert not any(key in str(manifest).lower() for key in ("secret", "access_key", "password"))


def test_canary_percent_is_absent_unless_given():
    assert "canaryTrafficPercent" not in isvc_manifest()["spec"]["predictor"]
    assert isvc_manifest(canary=0)["spec"]["predictor"]["canaryTrafficPercent"] == 0


def test_serving_runtime_passes_the_crd_and_runs_our_predictor():
    manifest = to_manifest(build_serving_runtime(settings(max_batch_size=16,
                                                          max_batch_latency_ms=3)))
    validate_strict(manifest, *RUNTIME_CRD)
    assert manifest["apiVersion"] == "serving.kserve.io/v1alpha1"
    assert manifest["kind"] == "ServingRuntime"
    assert manifest["metadata"]["name"] == "fmnist-predictor"
    spec = manifest["spec"]
    assert spec["supportedModelFormats"] == [{"name": "tensorflow", "version": "2",
                                              "autoSelect": False}]
    assert spec["protocolVersions"] == ["v1", "v2"]
    (container,) = spec["containers"]
    assert container["name"] == "kserve-container"
    assert container["image"] == IMAGE
    assert container["command"] == ["python", "-m", "fmnist_kfp.serving.model_server.server"]
    assert container["args"] == [
        "--model_dir=/mnt/models", "--model_name={{.Name}}", "--host=0.0.0.0",
        "--http_port=8080", "--max_batch_size=16", "--max_batch_latency_ms=3",
        "--uncertain_margin=0.2",  # the serving setting reaches the predictor on the cluster
    ]
    assert container["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "2Gi"}


def test_the_predictor_runs_the_deploy_steps_image_unless_serving_names_one(monkeypatch):
    """One source for the predictor's image: the deploy step's image input (whose default is
    the image the component was compiled with), or serving.image; never the environment."""
    from fmnist_kfp.kfp_components.deploy.step import kserve_settings, serving_problems
    from fmnist_kfp.settings.serving import ServingSettings

    monkeypatch.setenv("FMNIST_COMPONENT_IMAGE", "registry.example/elsewhere:1.0")
    step_image, own = "registry.example/fmnist:9.9", "registry.example/predictor:2.0"

    def runtime_image(serving: dict) -> str:
        settings = kserve_settings("fashion-mnist", ServingSettings.from_dict(serving),
                                   "pvc://fmnist-data/models/1", step_image)
        return to_manifest(build_serving_runtime(settings))["spec"]["containers"][0]["image"]

    assert runtime_image({"namespace": "ns"}) == step_image
    assert runtime_image({"namespace": "ns", "image": own}) == own
    with pytest.raises(UserInputError, match="no predictor image: give the deploy step's image"):
        build_serving_runtime(KServeSettings(namespace="ns"))
    assert any("no predictor image" in p for p in serving_problems(
        {}, "kubernetes", "fashion-mnist", 0.005, 8))
    assert serving_problems({}, "kubernetes", "fashion-mnist", 0.005, 8, step_image) == []


def test_empty_namespace_is_the_current_one(monkeypatch, tmp_path):
    """KServe's rule (``kserve.utils.utils.get_default_target_namespace``): the pod's own
    namespace, ``default`` off a cluster."""
    from fmnist_kfp.settings import jobs

    pod_namespace = tmp_path / "namespace"
    pod_namespace.write_text("from-pod")
    monkeypatch.setattr(jobs, "SERVICE_ACCOUNT_NAMESPACE", str(pod_namespace))
    assert KServeSettings().target_namespace == "from-pod"
    assert KServeSettings(namespace="serving").target_namespace == "serving"
    monkeypatch.setattr(jobs, "SERVICE_ACCOUNT_NAMESPACE", str(tmp_path / "absent"))
    assert KServeSettings().target_namespace == "default"


def test_validation_can_fail():
    """A typo anywhere in the spec breaks strict validation, so the passes above mean something."""
    manifest = isvc_manifest()
    typo = copy.deepcopy(manifest)
    typo["spec"]["predictor"]["canaryTraficPercent"] = 10
    with pytest.raises(jsonschema.ValidationError, match="canaryTraficPercent"):
        validate_strict(typo, *ISVC_CRD)
    typo = copy.deepcopy(manifest)
    typo["spec"]["predictor"]["model"]["storageURI"] = "s3://x/y"
    with pytest.raises(jsonschema.ValidationError, match="storageURI"):
        validate_strict(typo, *ISVC_CRD)
    bad_metric = copy.deepcopy(manifest)
    bad_metric["spec"]["predictor"]["scaleMetric"] = "latency"
    with pytest.raises(jsonschema.ValidationError):
        validate_strict(bad_metric, *ISVC_CRD)
    runtime = to_manifest(build_serving_runtime(settings()))
    runtime["spec"]["containers"][0]["argz"] = []
    with pytest.raises(jsonschema.ValidationError, match="argz"):
        validate_strict(runtime, *RUNTIME_CRD)


@pytest.mark.parametrize("overrides,message", [
    ({"runtime": "triton"}, "unknown serving runtime 'triton'"),
    ({"canary_traffic_percent": 0}, "canary_traffic_percent=0 must be in 1..99"),
    ({"canary_traffic_percent": 100}, "canary_traffic_percent=100 must be in 1..99"),
    ({"min_replicas": 4, "max_replicas": 2}, "min_replicas=4 is greater than max_replicas=2"),
    ({"max_replicas": 0, "min_replicas": 0}, "max_replicas >= 1"),
    ({"scale_metric": "latency"}, "unknown scale metric 'latency'"),
    ({"scale_target": -1}, "scale_target=-1"),
    ({"deployment_mode": "Raw"}, "unknown deployment mode 'Raw'"),
    ({"name": "Fashion_MNIST"}, "DNS-1035 label"),
    ({"name": "f" * 42}, "at most 41 characters"),
    ({"name": "1fmnist"}, "DNS-1035 label"),
    ({"namespace": "Kubeflow"}, "not a Kubernetes namespace name"),
    ({"cpu": "one"}, "cpu 'one' is not a Kubernetes quantity"),
    ({"memory": "2GB"}, "memory '2GB' is not a Kubernetes quantity"),
    ({"image": "ghcr.io/fmnist-kfp/fmnist-kfp"}, "has no tag"),
    ({"service_account": "Bad_SA"}, "service account 'Bad_SA'"),
    ({"max_batch_size": 0}, "max_batch_size=0"),
    ({"max_batch_latency_ms": -1}, "max_batch_latency_ms=-1"),
    ({"runtime": "tensorflow", "max_batch_latency_ms": 0}, "whole number of milliseconds"),
    ({"ready_timeout_seconds": 0}, "ready_timeout_seconds=0"),
])
def test_bad_settings_name_the_problem(overrides, message):
    with pytest.raises(UserInputError, match=message.replace("(", r"\(").replace(".", r"\.")):
        settings(**overrides).validate()


def test_tensorflow_runtime_needs_no_image_tag():
    settings(runtime="tensorflow", image="no-tag-at-all").validate()


@pytest.mark.parametrize("uri,message", [
    ("/mnt/fmnist/models/x", "without the mount path"),
    ("file:///models/x", "cannot be served"),
    ("https://example.com/model.tar.gz", "cannot be served"),
    ("hdfs://nn/models/x", "cannot be served"),
    ("", "cannot be served"),
    ("pvc://fmnist-data", "no path inside the claim"),
    ("pvc://fmnist-data/", "no path inside the claim"),
    ("pvc://Fmnist_Data/models", "no valid claim"),
    ("s3:///models/x", "no valid bucket"),
    ("gs://models x/y", "cannot be served"),
])
def test_bad_storage_uris_are_refused(uri, message):
    with pytest.raises(UserInputError, match=message):
        check_storage_uri(uri)
    with pytest.raises(UserInputError, match=message):
        build_inference_service(settings(), storage_uri=uri)


@pytest.mark.parametrize("uri", [*URIS, "s3://bucket", "gs://my.bucket.example/a/b/"])
def test_good_storage_uris_pass(uri):
    assert check_storage_uri(uri) == uri


def test_builder_refuses_out_of_range_canary():
    with pytest.raises(UserInputError, match="0..99"):
        build_inference_service(settings(), storage_uri=URIS[0], canary_traffic_percent=100)
