"""The KServe rollout against the cluster stand-in (``tests.standins.kserve``), through
``deploy_with_kserve``: what both modes share (create, blessing, input checks, the mode and what
KServe's webhook refuses, retries, waits on a status that lags the writes, creates that race).
Each mode's own rollout: the Serverless canary in test_rollout_serverless.py, the Standard
candidate in test_rollout_standard.py; both, and other modules, take this module's verifier and
helpers.

The fake verifier asks the stand-in's network which model answers the URL it is given (the
way the real verifier would find out by sending images), and scores that model: verifying too
early, or at the wrong address, verifies the wrong model. Every InferenceService and
ServingRuntime body the stand-in receives is checked against the real CRDs (strictly) when each
test ends.
"""

from __future__ import annotations

import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kubernetes.inference_service import (
    ANNOTATION_MODEL_URI,
    ANNOTATION_TEST_ACCURACY,
    CANARY_ANNOTATIONS,
    TAG_ROUTING_ANNOTATION,
    candidate_name,
)
from fmnist_kfp.serving.deploy import kserve_api
from fmnist_kfp.serving.deploy.kserve_deployer import (
    KServeRolloutError,
    ReadinessTimeout,
    deploy_with_kserve,
)
from fmnist_kfp.serving.deploy.rollout_base import Acceptance, Candidate
from fmnist_kfp.serving.deploy.rollout_result import Action
from fmnist_kfp.settings.serving import KServeSettings
from tests.crd_schemas import validate_strict
from tests.standins.apiserver import Fault
from tests.standins.kserve import ISVC_CRD, RUNTIME_CRD, KServeStandIn

NS = "kubeflow"
NAME = "fashion-mnist"
OLD = "pvc://fmnist-data/models/run-1"
NEW = "pvc://fmnist-data/models/run-2"
ADDRESS = f"http://{NAME}.{NS}.svc.cluster.local"
CANARY_URL = f"http://latest-{NAME}-predictor.{NS}.svc.cluster.local"
RAW_ADDRESS = f"http://{NAME}-predictor.{NS}.svc.cluster.local"
# Standard mode: the new model's own candidate (issue 29: one per model, no shared name).
CANDIDATE = candidate_name(NAME, NEW)
CANDIDATE_ADDRESS = f"http://{CANDIDATE}-predictor.{NS}.svc.cluster.local"
RESULT_KEYS = {"action", "blessing", "url", "external_url", "canary_url", "verification",
               "namespace", "name", "mode", "runtime", "storage_uri", "service_account",
               "canary_traffic_percent", "reason"}


class Verifier:
    """Scores the model answering the URL: ``accuracy[uri]`` (default: ``default``), and, as
    the real verifier (``serving/deploy/verification.py``: the served answers must be the
    deploying step's own model's, ``compare``/``agreement``), fails whenever the model answering
    is not ``own``, the model being deployed (:func:`deploy` sets it per call unless given)."""

    def __init__(self, standin: KServeStandIn, accuracy: dict | None = None,
                 default: float = 0.91, raises: dict | None = None, own: str | None = None):
        self.standin = standin
        self.accuracy = accuracy or {}
        self.default = default
        self.raises = raises or {}
        self.own = own
        self.own_given = own is not None
        self.calls: list[tuple[str, str, str | None]] = []

    def __call__(self, url: str, model_name: str) -> dict:
        uri, who = self.standin.answering(url)
        self.calls.append((url, model_name, uri))
        if url in self.raises:
            return self.raises[url](url)
        if uri is None:
            return {"ok": False, "error": who, "requests": 1, "failures": 1}
        if who != model_name:
            return {"ok": False, "error": f"model {model_name} not found", "failures": 1}
        if self.own is not None and uri != self.own:  # another model's answers
            return {"ok": False, "accuracy": self.accuracy.get(uri, self.default),
                    "requests": 200, "failures": 0, "agreement": 0.0,
                    "error": f"answers differ: {uri} answers, not {self.own}"}
        return {"ok": True, "accuracy": self.accuracy.get(uri, self.default), "requests": 200,
                "failures": 0}

    @property
    def urls(self) -> list[str]:
        return [url for url, _, _ in self.calls]

    @property
    def answered(self) -> list[str | None]:
        return [uri for _, _, uri in self.calls]


@pytest.fixture
def standin():
    with KServeStandIn() as server:
        yield server
        check_writes(server)


@pytest.fixture
def raw():
    with KServeStandIn(default_mode="RawDeployment") as server:
        yield server
        check_writes(server)


def check_writes(server: KServeStandIn) -> None:
    for _, body in server.isvc_writes():
        validate_strict(body, *ISVC_CRD)
    for _, body in server.runtime_writes():
        validate_strict(body, *RUNTIME_CRD)


def settings(**overrides) -> KServeSettings:
    values = {"namespace": NS, "image": "ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0",
              "ready_timeout_seconds": 5}
    return KServeSettings(**{**values, **overrides})


def deploy(standin, uri, accuracy, verify=None, tolerance=0.005, logs=None,
           needs_credentials=False, **overrides):
    verify = verify or Verifier(standin, default=accuracy)
    if isinstance(verify, Verifier) and not verify.own_given:
        verify.own = uri  # the model this call deploys
    return deploy_with_kserve(
        settings(**overrides), Candidate(uri, accuracy, needs_credentials=needs_credentials),
        Acceptance(tolerance, verify), client=standin.kserve_client(NS), poll_seconds=0.005,
        log=(logs.append if logs is not None else lambda line: None),
    )


def serve_old_model(standin, accuracy=0.90, **overrides):
    """The state after a first deployment of ``OLD``; the calls it made are forgotten."""
    deploy(standin, OLD, accuracy, Verifier(standin, {OLD: accuracy}), **overrides)
    assert len(standin.isvc_writes()) == 1
    standin.calls.clear()


def puts(standin, name=NAME) -> list[dict]:
    return [body for method, body in standin.isvc_writes()
            if method == "PUT" and body["metadata"]["name"] == name]


def rolled_back_to(standin, uri: str) -> bool:
    """The last write re-applied ``uri`` to all traffic (a Serverless rollback's second)."""
    predictor = puts(standin)[-1]["spec"]["predictor"]
    return predictor["model"]["storageUri"] == uri and "canaryTrafficPercent" not in predictor


def model_annotations(isvc: dict) -> dict:
    return {key: value for key, value in isvc["metadata"]["annotations"].items()
            if key.startswith("fmnist.kubeflow.org/")}


# -- Either mode (a Serverless stand-in) -------------------------------------------------------


def test_first_deploy_creates_the_service_and_verifies_its_cluster_local_address(standin):
    verifier = Verifier(standin, {OLD: 0.905})
    logs = []
    result = deploy(standin, OLD, 0.91, verifier, logs=logs)
    assert set(result.record()) == RESULT_KEYS | {"backend"}
    assert result.action is Action.CREATED and result.mode == "Serverless"
    # Pods reach only the cluster-local address; status.url is Kubeflow's example.com domain.
    assert result.url == ADDRESS and verifier.urls == [ADDRESS]
    assert result.external_url == f"http://{NAME}.{NS}.example.com"
    assert verifier.answered == [OLD]
    assert result.verification.report["ok"] and result.verification.passed
    assert result.blessing.blessed and result.blessing.serving_accuracy is None
    assert result.storage_uri == OLD and result.canary_traffic_percent is None
    isvc_path = f"/apis/serving.kserve.io/v1beta1/namespaces/{NS}/inferenceservices"
    runtime_path = f"/apis/serving.kserve.io/v1alpha1/namespaces/{NS}/servingruntimes"
    writes = [call for call in standin.methods() if call[0] != "GET"]
    assert writes == [("POST", runtime_path), ("POST", isvc_path)]
    (_, body), = standin.isvc_writes()
    annotations = body["metadata"]["annotations"]
    assert annotations[TAG_ROUTING_ANNOTATION] == "true"
    # Kubeflow's default mode: no annotation (kserve utils.go v0.15.2 L176-191).
    assert "serving.kserve.io/deploymentMode" not in annotations
    assert "deploymentStrategy" not in body["spec"]["predictor"]
    assert body["spec"]["predictor"]["scaleMetric"] == "concurrency"
    assert body["spec"]["predictor"]["scaleTarget"] == 8
    assert model_annotations(standin.isvc()) == {ANNOTATION_TEST_ACCURACY: "0.910000",
                                                 ANNOTATION_MODEL_URI: OLD}
    assert any("deployment mode: Serverless" in line for line in logs)


def test_a_worse_model_is_rejected_without_a_write(standin):
    serve_old_model(standin, 0.90)
    verifier = Verifier(standin)
    result = deploy(standin, NEW, 0.88, verifier)
    assert result.action is Action.REJECTED
    blessing = result.blessing
    assert (blessing.candidate_accuracy, blessing.serving_accuracy) == (0.88, 0.90)
    assert blessing.tolerance == 0.005 and "serving model stays" in blessing.reason
    assert result.url == ADDRESS and result.verification is None
    assert not standin.isvc_writes() and not standin.runtime_writes() and not verifier.calls


def test_within_the_tolerance_is_blessed(standin):
    serve_old_model(standin, 0.90)
    assert deploy(standin, NEW, 0.896, tolerance=0.005).action is Action.PROMOTED


def test_the_same_model_is_unchanged_but_verified(standin):
    serve_old_model(standin, 0.90)
    verifier = Verifier(standin, {OLD: 0.90})
    result = deploy(standin, OLD, 0.90, verifier)
    assert result.action is Action.UNCHANGED and result.url == ADDRESS
    assert result.reason == f"{OLD} is already served"
    assert verifier.urls == [ADDRESS] and result.verification.passed
    assert not standin.isvc_writes()


def test_an_unchanged_model_failing_verification_raises(standin):
    serve_old_model(standin, 0.90)
    with pytest.raises(KServeRolloutError, match="nothing was changed") as error:
        deploy(standin, OLD, 0.90, Verifier(standin, {OLD: 0.1}))
    assert error.value.result.action is Action.UNCHANGED
    assert not standin.isvc_writes()


def test_a_created_model_failing_verification_raises(standin):
    with pytest.raises(KServeRolloutError, match="no earlier model to roll back to") as error:
        deploy(standin, OLD, 0.91, Verifier(standin, {OLD: 0.0}))
    assert error.value.result.action is Action.CREATED


def test_missing_accuracy_annotation_blesses_with_a_reason(standin):
    serve_old_model(standin)
    del standin.objects[("InferenceService", NS, NAME)]["metadata"]["annotations"][
        ANNOTATION_TEST_ACCURACY]
    result = deploy(standin, NEW, 0.5)
    assert result.action is Action.PROMOTED
    assert result.blessing.serving_accuracy is None
    assert ANNOTATION_TEST_ACCURACY in result.blessing.reason


def test_a_first_deploy_that_never_gets_ready_raises_a_clear_error(standin):
    standin.ready_for = lambda isvc: False
    with pytest.raises(ReadinessTimeout, match="new InferenceService was not ready after"):
        deploy(standin, OLD, 0.9, ready_timeout_seconds=0.2)
    assert not puts(standin)


def test_conflicts_are_retried_with_a_fresh_read(standin):
    serve_old_model(standin)
    standin.faults.append(Fault("PUT", f"inferenceservices/{NAME}", status=409, times=2))
    logs = []
    assert deploy(standin, NEW, 0.95, logs=logs).action is Action.PROMOTED
    assert sum("retrying" in line for line in logs) == 2


def test_transient_api_errors_mid_rollout_are_retried(standin, monkeypatch):
    """5xx answers and reads that time out during the waits are retried (the kserve SDK's
    own wait gives up on the first one: kserve_client.py L194-208, F9.1)."""
    serve_old_model(standin)
    monkeypatch.setattr(kserve_api, "REQUEST_TIMEOUT_SECONDS", 0.2)
    standin.faults += [
        Fault("GET", f"inferenceservices/{NAME}", status=503, times=2, skip=2),
        Fault("GET", f"inferenceservices/{NAME}", status=500, times=1, skip=4),
        Fault("GET", f"inferenceservices/{NAME}", delay=0.5, times=4, skip=6),
    ]
    logs = []
    result = deploy(standin, NEW, 0.95, logs=logs)
    assert result.action is Action.PROMOTED
    assert all(fault.times == 0 for fault in standin.faults)
    assert any("failed transiently" in line for line in logs)  # the runner retried


def test_others_metadata_survives_the_rollout(standin):
    serve_old_model(standin)
    metadata = standin.objects[("InferenceService", NS, NAME)]["metadata"]
    metadata["annotations"]["team.example.com/owner"] = "ml"
    metadata["labels"]["team.example.com/tier"] = "gold"
    metadata["finalizers"] = ["inferenceservice.finalizers"]
    deploy(standin, NEW, 0.95)
    for body in puts(standin):
        assert body["metadata"]["annotations"]["team.example.com/owner"] == "ml"
        assert body["metadata"]["labels"]["team.example.com/tier"] == "gold"
        assert body["metadata"]["finalizers"] == ["inferenceservice.finalizers"]
    assert not set(CANARY_ANNOTATIONS) & set(standin.isvc()["metadata"]["annotations"])


def test_the_tensorflow_runtime_needs_no_serving_runtime(standin):
    result = deploy(standin, "gs://fmnist-models/run-1", 0.9, runtime="tensorflow",
                    service_account="fmnist-storage")
    assert result.runtime == "tensorflow" and result.service_account == "fmnist-storage"
    assert not standin.runtime_writes()
    (_, body), = standin.isvc_writes()
    predictor = body["spec"]["predictor"]
    assert predictor["model"]["runtime"] == "kserve-tensorflow-serving"
    assert predictor["serviceAccountName"] == "fmnist-storage"
    assert predictor["batcher"] == {"maxBatchSize": 32, "maxLatency": 1}


def test_an_existing_serving_runtime_is_left_alone(standin):
    serve_old_model(standin)
    logs = []
    deploy(standin, NEW, 0.95, logs=logs, image="ghcr.io/fmnist-kfp/fmnist-kfp:0.2.0")
    assert not standin.runtime_writes()
    assert any("it is left as it is" in line for line in logs)


def test_the_status_leaves_empty_revision_fields_out(standin):
    """Real objects never hold ``previousRolledoutRevision: null`` (omitempty, and the API
    server prunes nulls: inference_service_status.go v0.20.0 L76, prunenulls.go L21-50)."""
    serve_old_model(standin)
    predictor = standin.isvc()["status"]["components"]["predictor"]
    assert "previousRolledoutRevision" not in predictor
    deploy(standin, NEW, 0.95)
    predictor = standin.isvc()["status"]["components"]["predictor"]
    assert predictor["previousRolledoutRevision"] == f"{NAME}-predictor-00002"


def test_a_cluster_without_kserve_says_so():
    with KServeStandIn(kserve_installed=False) as server:
        with pytest.raises(KServeRolloutError, match="is KServe installed"):
            deploy(server, OLD, 0.9)


def test_bad_input_fails_before_any_call(standin):
    with pytest.raises(UserInputError, match="cannot be served"):
        deploy(standin, "/mnt/fmnist/models/run-1", 0.9)
    with pytest.raises(UserInputError, match="tolerance"):
        deploy(standin, OLD, 0.9, tolerance=2)
    with pytest.raises(UserInputError, match="test accuracy"):
        deploy(standin, OLD, 91.0)
    assert not standin.calls


# -- modes and what KServe's webhook refuses ---------------------------------------------------


@pytest.mark.parametrize("metric", ["cpu", "memory"])
def test_an_hpa_metric_in_serverless_mode_is_refused_before_any_write(standin, metric):
    """KServe's webhook runs Knative's KPA rules in Serverless mode and refuses cpu/memory
    (inference_service_validation.go v0.15.2 L210-230, L406-428)."""
    with pytest.raises(UserInputError, match=f"scale_metric='{metric}' cannot scale a "
                                             "Serverless"):
        deploy(standin, OLD, 0.9, scale_metric=metric)
    assert not standin.isvc_writes() and not standin.runtime_writes()


def test_a_kpa_metric_in_standard_mode_is_refused_before_any_write(raw):
    with pytest.raises(UserInputError, match="scale_metric='concurrency' cannot scale a "
                                             "Standard"):
        deploy(raw, OLD, 0.9, scale_metric="concurrency")
    with pytest.raises(UserInputError, match="1..100"):
        deploy(raw, OLD, 0.9, scale_metric="memory", scale_target=200)
    assert not raw.isvc_writes()


def test_what_the_webhook_refuses_is_named_as_a_refusal_not_a_permission():
    """On KServe 0.16.0 a ``RawDeployment`` annotation is not normalized, so the webhook runs
    the KPA rules and refuses ``deploymentStrategy`` (F1.5); the error names the webhook."""
    with KServeStandIn(version=(0, 16, 0), default_mode="RawDeployment") as server:
        with pytest.raises(KServeRolloutError, match="webhook refused") as error:
            deploy(server, OLD, 0.9)
        assert "lacks the permission" not in str(error.value)
        assert "deploymentStrategy is only supported for raw" in str(error.value)


def test_an_update_spells_the_mode_as_the_status_does():
    """KServe 0.16.0 records ``Standard`` for an InferenceService annotated ``RawDeployment`` and
    refuses every update that keeps ``RawDeployment`` (v0.16.0 validation L493-503)."""
    with KServeStandIn(version=(0, 16, 0), default_mode="Standard") as server:
        deploy(server, OLD, 0.90, Verifier(server, {OLD: 0.90}))
        isvc = server.objects[("InferenceService", NS, NAME)]
        assert isvc["status"]["deploymentMode"] == "Standard"
        isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] = "RawDeployment"
        result = deploy(server, NEW, 0.95, Verifier(server, {NEW: 0.95}))
        assert result.action is Action.PROMOTED
        assert puts(server)[-1]["metadata"]["annotations"][
            "serving.kserve.io/deploymentMode"] == "Standard"
        check_writes(server)


def test_the_mode_of_an_existing_service_cannot_be_changed(standin):
    serve_old_model(standin)
    with pytest.raises(UserInputError, match="runs in Serverless mode"):
        deploy(standin, NEW, 0.95, deployment_mode="RawDeployment")
    assert not standin.isvc_writes()


def test_an_unreadable_kserve_config_means_kserves_default_until_the_status_says_otherwise():
    """A profile's default-editor may not read KServe's namespace: Serverless (the default of
    KServe's and Kubeflow's installs) is assumed and logged; when the status then records
    another mode (0.15.1+), the step stops and names the setting."""
    with KServeStandIn(default_mode="Serverless", forbidden_namespaces={"kserve"},
                       config_namespace="kserve") as server:
        logs = []
        result = deploy(server, OLD, 0.9, logs=logs)
        assert result.mode == "Serverless"
        assert any("cannot read kserve/inferenceservice-config" in line for line in logs)
        assert any("could not be read" in line for line in logs)
    with KServeStandIn(default_mode="RawDeployment", forbidden_namespaces={"kserve"},
                       config_namespace="kserve") as server:
        with pytest.raises(KServeRolloutError, match="runs in Standard mode, not Serverless"
                                                     ".*set serving.deployment_mode"):
            deploy(server, OLD, 0.9)


# -- An auth error while waiting (each mode's test: test_rollout_serverless/standard.py) ---------


def _fault_after_write(server, name: str, fault: Fault) -> None:
    """``fault`` is armed once ``name`` has been written (created or updated): it hits the
    rollout's wait, not the reads before its write."""
    original = server.after_write

    def after_write(kind, namespace, written, old):
        original(kind, namespace, written, old)
        if kind == "InferenceService" and written == name and fault not in server.faults:
            server.faults.append(fault)

    server.after_write = after_write


# -- issue 29: creates that race ----------------------------------------------------------------


def test_an_inference_service_created_meanwhile_is_not_taken_for_ours(standin, monkeypatch):
    """Issue 29 item 2: another step creates the InferenceService between this one's read
    (absent) and its create. The 409 must end this step with CreatedMeanwhile, not make the
    runner re-attach to the other one's service (before: ``_already_exists`` found the 409 in
    the chain ``from None`` leaves in ``__context__``, re-attached, and verified the other
    model)."""
    from fmnist_kfp.kubernetes.inference_service import build_inference_service
    from fmnist_kfp.kubernetes.manifest import to_manifest
    from fmnist_kfp.serving.deploy.kserve_api import CreatedMeanwhile

    other = to_manifest(build_inference_service(settings(), storage_uri=OLD,
                                                annotations={ANNOTATION_MODEL_URI: OLD}))
    real_create = kserve_api.KServeApi.create

    def create(api, body):
        if ("InferenceService", NS, NAME) not in standin.objects:
            standin.put(other)  # the other step's create lands first
        return real_create(api, body)

    monkeypatch.setattr(kserve_api.KServeApi, "create", create)
    with pytest.raises(CreatedMeanwhile, match="created by someone else meanwhile"):
        deploy(standin, NEW, 0.95)
    assert not puts(standin)
    assert model_annotations(standin.isvc()) == {ANNOTATION_MODEL_URI: OLD}


def test_a_serving_runtime_created_meanwhile_is_read_and_used(standin, monkeypatch):
    """Issue 29 item 2: two steps find no ServingRuntime and both create it; the second
    create's 409 AlreadyExists means it exists: it is read and the rollout goes on (before:
    a hard error)."""
    real_create = kserve_api.KServeApi.create_runtime

    def create_runtime(api, body):
        standin.put(body)  # the other step's create lands first
        return real_create(api, body)

    monkeypatch.setattr(kserve_api.KServeApi, "create_runtime", create_runtime)
    logs: list[str] = []
    result = deploy(standin, OLD, 0.91, logs=logs)
    assert result.action is Action.CREATED
    assert any("created meanwhile by another step" in line for line in logs)


def test_the_standin_keeps_a_deleted_inference_service_terminating_until_kserve_finalizes_it(
        standin):
    """The stand-in's deletion rule (tests/standins/kserve.py, cited there): KServe adds its
    finalizer on the first reconcile; a delete then only sets deletionTimestamp, the object
    stays readable, a create of its name is 409 AlreadyExists, and it goes once the
    controller has removed the finalizer."""
    from fmnist_kfp.serving.deploy.kserve_api import Conflict

    deploy(standin, OLD, 0.90)
    isvc = standin.isvc()
    assert KServeStandIn.FINALIZER in isvc["metadata"]["finalizers"]
    client = standin.kserve_client(NS)
    api = kserve_api.KServeApi(client.api_instance.api_client, NS)
    api.delete(NAME)
    terminating = api.get(NAME)
    assert terminating["metadata"]["deletionTimestamp"]
    body = {key: isvc[key] for key in ("apiVersion", "kind", "spec")}
    body["metadata"] = {"name": NAME, "namespace": NS}
    with pytest.raises(Conflict):
        api.create(body)
    for _ in range(standin.delete_lag + 1):
        if api.get(NAME) is None:
            break
    assert api.get(NAME) is None
    assert ("Deployment", NS, f"{NAME}-predictor") not in standin.objects


@pytest.mark.parametrize("mode", ["Serverless", "RawDeployment"])
def test_the_reads_before_a_rollout_get_through_a_transient_answer(mode, monkeypatch):
    """The InferenceService, KServe's configuration and the credentials are read before there
    is anything to wait on: a 503 or 429 on one of them is asked again, not a failed step (the
    fault mode's seed 33 found the ServiceAccount read failing the deploy step) nor taken for an
    answer (an unreadable inferenceservice-config read as "no default mode")."""
    from tests.setup_manifests import build

    first_answers: dict[str, int] = {}
    reads = ("get", "get_config_map", "get_service_account", "get_secret")
    for name in reads:
        original = getattr(kserve_api.KServeApi, name)

        def flaky(self, *args, _name=name, _original=original, **kwargs):
            first_answers[_name] = first_answers.get(_name, 0) + 1
            if first_answers[_name] == 1:  # each one's first read: before the rollout
                raise kserve_api.TransientApiError(f"could not {_name}: HTTP 503 (injected)")
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(kserve_api.KServeApi, name, flaky)
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    with KServeStandIn(default_mode=mode) as standin:
        for obj in build("serving-credentials", namespace=NS):
            standin.put(obj)
        result = deploy(standin, OLD, 0.90, needs_credentials=True,
                        service_account="fmnist-serving")
    assert result.action is Action.CREATED, result
    assert all(first_answers[name] >= 2 for name in reads), first_answers


def test_a_candidate_or_acceptance_that_cannot_be_rolled_out_is_refused_as_it_is_made():
    """The rollout's parameter objects check themselves, so a bad one fails before any call
    to the cluster, naming the fix."""
    with pytest.raises(UserInputError, match="without the mount path"):
        Candidate("/mnt/fmnist/model", 0.9)
    with pytest.raises(UserInputError, match=r"test accuracy 1.5 is not in \[0, 1\]"):
        Candidate("s3://models/fmnist", 1.5)
    with pytest.raises(UserInputError, match="blessing tolerance 2 is not an accuracy"):
        Acceptance(2, lambda url, name: {"ok": True, "accuracy": 1.0})
    assert Candidate("s3://models/fmnist", 0.9).storage_uri == "s3://models/fmnist"
