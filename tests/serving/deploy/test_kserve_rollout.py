"""The KServe rollout against the cluster stand-in (``tests.standins.kserve``): create, canary
(Serverless) or candidate (Standard), promote or roll back, blessing, waits on a status that lags
the writes, transient API errors.

The fake verifier asks the stand-in's network which model answers the URL it is given (the
way the real verifier would find out by sending images), and scores that model: verifying too
early, or at the wrong address, verifies the wrong model. Every InferenceService and
ServingRuntime body the stand-in receives is checked against the real CRDs (strictly) when each
test ends.
"""

from __future__ import annotations

import os
import signal

import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kubernetes.inference_service import (
    ANNOTATION_CANDIDATE_MODEL_URI,
    ANNOTATION_CANDIDATE_TEST_ACCURACY,
    ANNOTATION_MODEL_URI,
    ANNOTATION_PREVIOUS_MODEL_URI,
    ANNOTATION_ROLLED_BACK,
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


# -- Serverless ---------------------------------------------------------------------------------


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


def test_a_better_model_goes_through_a_canary_at_its_cluster_local_tag_and_is_promoted(standin):
    serve_old_model(standin, 0.90)
    verifier = Verifier(standin, {NEW: 0.912, OLD: 0.90})
    result = deploy(standin, NEW, 0.915, verifier)
    assert result.action is Action.PROMOTED
    assert (result.blessing.candidate_accuracy,
            result.blessing.serving_accuracy) == (0.915, 0.90)
    # The canary's own tag host, cluster-local (knative-v1.16.2 route/resources/service.go).
    assert result.canary_url == CANARY_URL and verifier.urls == [CANARY_URL]
    assert verifier.answered == [NEW]  # verified once the new revision answered there
    assert result.url == ADDRESS and result.canary_traffic_percent == 10
    canary, promotion = puts(standin)
    assert canary["spec"]["predictor"]["canaryTrafficPercent"] == 10
    assert canary["spec"]["predictor"]["model"]["storageUri"] == NEW
    assert model_annotations(canary) == {
        ANNOTATION_TEST_ACCURACY: "0.900000", ANNOTATION_MODEL_URI: OLD,
        ANNOTATION_CANDIDATE_TEST_ACCURACY: "0.915000", ANNOTATION_CANDIDATE_MODEL_URI: NEW,
        ANNOTATION_PREVIOUS_MODEL_URI: OLD,
    }
    assert "canaryTrafficPercent" not in promotion["spec"]["predictor"]
    served = standin.isvc()
    assert model_annotations(served) == {ANNOTATION_TEST_ACCURACY: "0.915000",
                                         ANNOTATION_MODEL_URI: NEW}
    traffic = served["status"]["components"]["predictor"]["traffic"]
    assert [(t["tag"], t["percent"]) for t in traffic] == [("latest", 100)]
    assert standin.answering(ADDRESS)[0] == NEW


def test_a_bad_canary_is_judged_on_the_new_revision_not_on_the_stale_status(standin):
    """The first read after the write still shows the old revision behind the ``latest`` tag;
    a rollout that verified then would verify the old (good) model and promote a bad one."""
    standin.lag = 3
    serve_old_model(standin, 0.90)
    verifier = Verifier(standin, {NEW: 0.40, OLD: 0.90})
    result = deploy(standin, NEW, 0.95, verifier)
    assert result.action is Action.ROLLED_BACK
    assert verifier.answered == [NEW]
    assert standin.answering(ADDRESS)[0] == OLD


def test_a_canary_that_fails_verification_is_rolled_back(standin):
    serve_old_model(standin, 0.90)
    verifier = Verifier(standin, {NEW: 0.62})
    result = deploy(standin, NEW, 0.915, verifier)
    assert result.action is Action.ROLLED_BACK
    assert result.verification.report["accuracy"] == 0.62 and not result.verification.passed
    assert "failed verification" in result.reason and OLD in result.reason
    assert "no traffic and no tag" in result.reason
    canary, pin, restore = puts(standin)
    # First the previous model with all traffic kept on the rolled-out revision, then, once
    # its new revision is ready, all traffic to that.
    assert pin["spec"]["predictor"]["canaryTrafficPercent"] == 0
    assert pin["spec"]["predictor"]["model"]["storageUri"] == OLD
    assert "canaryTrafficPercent" not in restore["spec"]["predictor"]
    assert restore["spec"]["predictor"]["model"]["storageUri"] == OLD
    served = standin.isvc()
    assert model_annotations(served) == {ANNOTATION_TEST_ACCURACY: "0.900000",
                                         ANNOTATION_MODEL_URI: OLD,
                                         ANNOTATION_ROLLED_BACK: f"{NEW} (generation 2)"}
    traffic = {t["tag"]: t["percent"]
               for t in served["status"]["components"]["predictor"]["traffic"]}
    assert traffic == {"latest": 100}
    assert standin.answering(ADDRESS)[0] == OLD


def test_a_rolled_back_canary_leaves_no_revision_of_the_rejected_model_running(standin):
    """KServe's own pin (``canaryTrafficPercent: 0``) keeps the rejected revision behind the
    ``latest`` tag at 0 %: Knative still routes it, so it stays Reachable and keeps its
    min-scale pods (knative-v1.16.2 ``labeler/metasync.go`` L35-82, ``revision/resources/
    pa.go`` L54-81, ``autoscaling/v1alpha1/pa_lifecycle.go`` L88-95). The rollback re-applies
    the last good predictor, so the latest revision serves the previous model again and the
    rejected one is named by no traffic target: it scales to zero."""
    serve_old_model(standin, 0.90)
    result = deploy(standin, NEW, 0.95, Verifier(standin, {NEW: 0.40, OLD: 0.90}))
    assert result.action is Action.ROLLED_BACK
    isvc = standin.isvc()
    predictor = isvc["spec"]["predictor"]
    assert predictor["model"]["storageUri"] == OLD and "canaryTrafficPercent" not in predictor
    rejected = {r.name for r in standin.states[(NS, NAME)].revisions if r.uri == NEW}
    assert rejected and not rejected & set(standin.running())
    traffic = isvc["status"]["components"]["predictor"]["traffic"]
    assert [(t["tag"], t["percent"]) for t in traffic] == [("latest", 100)]
    assert not rejected & {t["revisionName"] for t in traffic}
    assert standin.answering(CANARY_URL)[0] == OLD  # the latest tag: the previous model
    assert standin.answering(ADDRESS)[0] == OLD
    assert model_annotations(isvc)[ANNOTATION_MODEL_URI] == OLD


def test_a_rollback_of_a_canary_kserve_never_saw_still_finishes(standin):
    """A run terminated right after its canary write writes the rollback before KServe saw
    the canary. Were the rollback's template the rolled-out one, no revision would come of it
    to wait for, and ``canaryTrafficPercent: 0`` on the rolled-out revision reads to KServe as
    a rollback of the last promotion: it moves latestRolledoutRevision back to the previous one
    (inference_service_status.go v0.15.2 L466-479) and traffic with it. The rollback's template
    names the rejected model, so it always makes a revision of the previous model, which then
    takes all traffic."""
    middle = "pvc://fmnist-data/models/run-1b"
    serve_old_model(standin, 0.80)
    deploy(standin, middle, 0.90)  # promoted: previousRolledoutRevision is now set
    assert standin.isvc()["status"]["components"]["predictor"]["previousRolledoutRevision"]
    logs = SigtermWhenCreated("(canary)")
    with pytest.raises(SystemExit):
        deploy(standin, NEW, 0.95, logs=logs, ready_timeout_seconds=1)
    assert not any("warning" in line for line in logs), logs
    settle(standin)
    predictor = standin.isvc()["spec"]["predictor"]
    assert predictor["model"]["storageUri"] == middle
    assert "canaryTrafficPercent" not in predictor
    assert standin.answering(ADDRESS)[0] == middle
    assert standin.answering(CANARY_URL)[0] == middle


def settle(standin: KServeStandIn) -> None:
    """Reads enough for the controllers to act on every write and finish their rollouts."""
    for _ in range(10):
        standin.tick(NS, NAME)


class SigtermWhenCreated(list):
    """A log that sends SIGTERM once the runner says it wrote the job named ``what``: the
    write is in, nothing has read it yet."""

    def __init__(self, what: str):
        super().__init__()
        self.what = what

    def append(self, line: str) -> None:
        super().append(line)
        if line.startswith("applied ") and line.endswith(self.what):
            os.kill(os.getpid(), signal.SIGTERM)


def test_a_good_canary_is_promoted_when_the_generations_differ(standin):
    """``status.observedGeneration`` is the Knative Service's generation (kserve v0.15.2
    ``inference_service_status.go`` L510, v0.16.0 L586), not the InferenceService's. Once
    two writes reached KServe as one (a terminated run's canary and its rollback), the
    InferenceService's generation stays ahead of it, and a wait for ``observedGeneration >=
    generation`` never ends: the good canary below would be rolled back."""
    serve_old_model(standin, 0.90)
    with pytest.raises(SystemExit):
        deploy(standin, NEW, 0.95, logs=SigtermWhenCreated("(canary)"),
               ready_timeout_seconds=1)
    settle(standin)
    isvc = standin.isvc()
    assert isvc["metadata"]["generation"] > isvc["status"]["observedGeneration"]
    assert standin.answering(ADDRESS)[0] == OLD
    verifier = Verifier(standin, {NEW: 0.95, OLD: 0.90})
    result = deploy(standin, NEW, 0.95, verifier, ready_timeout_seconds=1)
    assert result.action is Action.PROMOTED
    assert verifier.answered == [NEW]
    assert standin.answering(ADDRESS)[0] == NEW


def test_a_canary_is_judged_on_its_own_revision_when_knatives_generation_is_ahead(standin):
    """A ``kubectl annotate`` changes no spec, so the InferenceService's generation stays
    (apiextensions-apiserver strategy.go L145-186), but KServe copies the annotation into the
    revision template: the Knative Service, and observedGeneration, move ahead of it. The
    wait must still see the canary's own revision before it verifies."""
    standin.lag = 3
    serve_old_model(standin, 0.90)
    api = standin.kserve_client(NS).api_instance
    isvc = api.get_namespaced_custom_object("serving.kserve.io", "v1beta1", NS,
                                            "inferenceservices", NAME)
    isvc["metadata"]["annotations"]["team.example.com/owner"] = "ml"
    api.replace_namespaced_custom_object("serving.kserve.io", "v1beta1", NS,
                                         "inferenceservices", NAME, isvc)
    settle(standin)
    isvc = standin.isvc()
    assert isvc["status"]["observedGeneration"] > isvc["metadata"]["generation"]
    standin.calls.clear()
    verifier = Verifier(standin, {NEW: 0.40, OLD: 0.90})
    result = deploy(standin, NEW, 0.95, verifier)
    assert result.action is Action.ROLLED_BACK
    assert verifier.answered == [NEW]
    assert standin.answering(ADDRESS)[0] == OLD


def test_a_verifier_that_raises_counts_as_a_failed_canary(standin):
    serve_old_model(standin)

    def unreachable(url):
        raise ConnectionError("connection refused")

    result = deploy(standin, NEW, 0.92, Verifier(standin, raises={CANARY_URL: unreachable}))
    assert result.action is Action.ROLLED_BACK
    assert result.verification.as_dict() == {"ok": False, "passed": False,
                                             "error": "ConnectionError: connection refused"}
    assert rolled_back_to(standin, OLD)


def test_a_canary_below_the_tolerance_is_rolled_back_even_when_ok(standin):
    serve_old_model(standin, 0.90)
    verifier = Verifier(standin, {NEW: 0.905})
    result = deploy(standin, NEW, 0.92, verifier, tolerance=0.01)
    assert result.action is Action.ROLLED_BACK  # 0.905 < 0.92 - 0.01


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


def test_a_canary_that_never_gets_ready_is_rolled_back_then_raised(standin):
    serve_old_model(standin, 0.90)
    standin.ready_for = lambda isvc: isvc["spec"]["predictor"]["model"]["storageUri"] != NEW
    verifier = Verifier(standin)
    logs = []
    with pytest.raises(KServeRolloutError, match="interrupted .*ReadinessTimeout") as error:
        deploy(standin, NEW, 0.95, verifier, logs=logs, ready_timeout_seconds=0.3)
    assert isinstance(error.value.__cause__, ReadinessTimeout)
    assert "not ready after 0.3 s" in str(error.value.__cause__)
    assert "kubectl describe inferenceservice" in str(error.value.__cause__)
    assert error.value.result.action is Action.ROLLED_BACK
    assert rolled_back_to(standin, OLD)
    assert not verifier.calls
    assert standin.answering(ADDRESS)[0] == OLD
    assert any("RevisionFailed" in line for line in logs)


def test_a_first_deploy_that_never_gets_ready_raises_a_clear_error(standin):
    standin.ready_for = lambda isvc: False
    with pytest.raises(ReadinessTimeout, match="new InferenceService was not ready after"):
        deploy(standin, OLD, 0.9, ready_timeout_seconds=0.2)
    assert not puts(standin)


def test_sigterm_during_the_canary_rolls_it_back(standin):
    serve_old_model(standin)
    previous = signal.getsignal(signal.SIGTERM)

    def terminated(url):
        os.kill(os.getpid(), signal.SIGTERM)
        return {"ok": True, "accuracy": 0.99}

    logs = []
    with pytest.raises(SystemExit) as error:  # the runner's rule: clean up, exit 128 + 15
        deploy(standin, NEW, 0.95, Verifier(standin, raises={CANARY_URL: terminated}),
               logs=logs)
    assert error.value.code == 143
    assert rolled_back_to(standin, OLD)
    assert standin.answering(ADDRESS)[0] == OLD
    assert any("rolling back" in line for line in logs)
    assert signal.getsignal(signal.SIGTERM) is previous


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


def test_an_inference_service_deleted_mid_canary_is_a_clear_error(standin):
    serve_old_model(standin)

    def deleted(url):
        standin.objects.pop(("InferenceService", NS, NAME))
        return {"ok": True, "accuracy": 0.99}

    with pytest.raises(KServeRolloutError, match="disappeared"):
        deploy(standin, NEW, 0.95, Verifier(standin, raises={CANARY_URL: deleted}))


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


def test_without_tag_routing_the_canary_is_verified_through_the_predictor_address(standin):
    serve_old_model(standin)
    standin.honour_tag_routing = False
    verifier = Verifier(standin)
    logs = []
    result = deploy(standin, NEW, 0.95, verifier, logs=logs)
    predictor = f"http://{NAME}-predictor.{NS}.svc.cluster.local"
    assert verifier.urls == [predictor] and result.canary_url == predictor
    assert any("splits traffic" in line for line in logs)


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


# -- Standard mode: a candidate InferenceService ------------------------------------------------


def test_standard_mode_creates_with_a_safe_rollout_strategy(raw):
    verifier = Verifier(raw, {OLD: 0.91})
    result = deploy(raw, OLD, 0.91, verifier)
    assert result.action is Action.CREATED and result.mode == "Standard"
    assert result.url == RAW_ADDRESS and verifier.urls == [RAW_ADDRESS]
    (_, body), = raw.isvc_writes()
    annotations = body["metadata"]["annotations"]
    assert annotations["serving.kserve.io/deploymentMode"] == "RawDeployment"  # KServe <= 0.15
    assert annotations["serving.kserve.io/autoscalerClass"] == "hpa"
    assert TAG_ROUTING_ANNOTATION not in annotations
    predictor = body["spec"]["predictor"]
    assert predictor["deploymentStrategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    assert predictor["model"]["readinessProbe"]["httpGet"] == {
        "path": f"/v2/models/{NAME}/ready", "port": 8080}
    assert (predictor["scaleMetric"], predictor["scaleTarget"]) == ("cpu", 80)
    assert "canaryTrafficPercent" not in predictor


def test_standard_mode_verifies_a_candidate_before_touching_the_main_service(raw):
    serve_old_model(raw, 0.90)
    verifier = Verifier(raw, {NEW: 0.95, OLD: 0.90})
    result = deploy(raw, NEW, 0.95, verifier)
    assert result.action is Action.PROMOTED
    assert result.canary_url == CANDIDATE_ADDRESS
    assert verifier.calls == [(CANDIDATE_ADDRESS, CANDIDATE, NEW),
                              (RAW_ADDRESS, NAME, NEW)]
    (candidate,) = [body for method, body in raw.isvc_writes() if method == "POST"]
    assert candidate["metadata"]["name"] == CANDIDATE
    assert candidate["spec"]["predictor"]["model"]["storageUri"] == NEW
    assert candidate["spec"]["predictor"]["model"]["readinessProbe"]["httpGet"]["path"] == \
        f"/v2/models/{CANDIDATE}/ready"
    (main,) = puts(raw)
    assert main["spec"]["predictor"]["model"]["storageUri"] == NEW
    assert ("InferenceService", NS, CANDIDATE) not in raw.objects  # cleaned up
    assert raw.answering(RAW_ADDRESS)[0] == NEW
    assert model_annotations(raw.isvc()) == {ANNOTATION_TEST_ACCURACY: "0.950000",
                                             ANNOTATION_MODEL_URI: NEW}
    assert result.verification.passed and result.url == RAW_ADDRESS
    assert "rolled over" in result.reason and "passed verification" in result.reason
    assert result.blessing.serving_accuracy == 0.90


def test_standard_mode_waits_for_the_deployment_not_the_inference_services_generation(raw):
    """The InferenceService's observedGeneration is its Deployment's (v0.20.0
    inference_service_status.go L449-456): HPA scaling moves it past the InferenceService's
    generation, so only the Deployment's own rollout says the new model is up."""
    raw.lag = 2
    serve_old_model(raw, 0.90)
    for replicas in (2, 3, 2, 3):
        raw.hpa_scale(NAME, replicas)
        raw.isvc()  # a read: the controllers catch up
        raw.tick(NS, NAME)
    isvc = raw.isvc()
    assert isvc["status"]["observedGeneration"] > isvc["metadata"]["generation"]
    verifier = Verifier(raw, {NEW: 0.95, OLD: 0.90})
    result = deploy(raw, NEW, 0.95, verifier)
    assert result.action is Action.PROMOTED
    assert verifier.answered == [NEW, NEW]


def test_a_failed_candidate_leaves_the_main_service_untouched_and_says_so(raw):
    serve_old_model(raw, 0.90)
    verifier = Verifier(raw, {NEW: 0.40, OLD: 0.90})
    result = deploy(raw, NEW, 0.95, verifier)
    assert result.action is Action.CANDIDATE_FAILED  # not rolled_back: nothing was changed
    assert "was not changed" in result.reason and OLD in result.reason
    assert result.verification.report["accuracy"] == 0.40 and not result.verification.passed
    assert result.canary_url == CANDIDATE_ADDRESS
    assert not puts(raw) and result.url == RAW_ADDRESS
    assert ("InferenceService", NS, CANDIDATE) not in raw.objects
    assert raw.answering(RAW_ADDRESS)[0] == OLD


def test_a_rejected_candidate_that_cannot_be_deleted_fails_the_step_and_says_how(raw):
    """The rejected model must not keep serving at the candidate's own address: when deleting
    the candidate fails, the step says so (and how to delete it) instead of returning a
    quiet ``candidate_failed``."""
    serve_old_model(raw, 0.90)
    raw.faults.append(Fault("DELETE", f"inferenceservices/{CANDIDATE}", status=500,
                            times=99))
    with pytest.raises(KServeRolloutError, match="deleting the candidate failed.*kubectl "
                                                 f"delete inferenceservice -n {NS} "
                                                 f"{CANDIDATE}") as error:
        deploy(raw, NEW, 0.95, Verifier(raw, {NEW: 0.40, OLD: 0.90}))
    assert error.value.result.action is Action.CANDIDATE_FAILED
    assert "was not changed" in str(error.value)
    assert not puts(raw) and raw.answering(RAW_ADDRESS)[0] == OLD


def test_a_candidate_that_never_gets_ready_is_deleted(raw):
    serve_old_model(raw, 0.90)
    raw.ready_for = lambda isvc: isvc["metadata"]["name"] == NAME
    with pytest.raises(KServeRolloutError, match="did not come up.*is gone.*was not changed"):
        deploy(raw, NEW, 0.95, ready_timeout_seconds=0.3)
    assert ("InferenceService", NS, CANDIDATE) not in raw.objects
    assert not puts(raw) and raw.answering(RAW_ADDRESS)[0] == OLD


def test_a_main_rollout_that_does_not_finish_writes_the_previous_model_back(raw):
    serve_old_model(raw, 0.90)
    raw.ready_for = lambda isvc: not (isvc["metadata"]["name"] == NAME and isvc["spec"][
        "predictor"]["model"]["storageUri"] == NEW)
    with pytest.raises(KServeRolloutError, match="written back") as error:
        deploy(raw, NEW, 0.95, Verifier(raw, {NEW: 0.95}), ready_timeout_seconds=0.5)
    assert error.value.result.action is Action.ROLLED_BACK
    forward, back = puts(raw)
    assert forward["spec"]["predictor"]["model"]["storageUri"] == NEW
    assert back["spec"]["predictor"]["model"]["storageUri"] == OLD
    assert model_annotations(raw.isvc()) == {ANNOTATION_TEST_ACCURACY: "0.900000",
                                             ANNOTATION_MODEL_URI: OLD}
    assert raw.answering(RAW_ADDRESS)[0] == OLD
    assert OLD in error.value.result.reason
    assert ("InferenceService", NS, CANDIDATE) not in raw.objects


def test_sigterm_during_the_candidate_deletes_it_and_leaves_the_main_service(raw):
    serve_old_model(raw)

    def terminated(url):
        os.kill(os.getpid(), signal.SIGTERM)
        return {"ok": True, "accuracy": 0.99}

    with pytest.raises(SystemExit) as error:
        deploy(raw, NEW, 0.95, Verifier(raw, raises={CANDIDATE_ADDRESS: terminated}))
    assert error.value.code == 143
    assert not puts(raw)
    assert ("InferenceService", NS, CANDIDATE) not in raw.objects


def test_a_candidate_left_by_an_interrupted_run_is_replaced(raw):
    """Issue 29: the leftover carries KServe's finalizer, so its delete leaves it terminating
    for a while (kserve v0.15.2 ``inferenceservice/controller.go`` L162-195) and a create of
    its name meanwhile is a 409; the rollout waits until it is gone (before: the 409 made the
    runner re-attach to the object being deleted, and the step failed with JobVanished)."""
    serve_old_model(raw, 0.90)
    raw.put({"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
             "metadata": {"name": CANDIDATE, "namespace": NS,
                          "finalizers": [KServeStandIn.FINALIZER]},
             "spec": {"predictor": {"model": {"modelFormat": {"name": "tensorflow"},
                                              "storageUri": "pvc://fmnist-data/stale"}}}})
    logs = []
    assert deploy(raw, NEW, 0.95, logs=logs).action is Action.PROMOTED
    assert any("left by an earlier rollout" in line for line in logs)
    assert any(f"{CANDIDATE} is gone" in line for line in logs)
    assert raw.answering(RAW_ADDRESS)[0] == NEW
    assert ("InferenceService", NS, CANDIDATE) not in raw.objects


def test_a_service_that_never_rolled_out_is_replaced_without_a_canary(standin):
    """KServe ignores canaryTrafficPercent until a revision was rolled out (ksvc_reconciler.go
    v0.20.0 L134): a canary there would take all traffic, so the new model replaces it."""
    standin.ready_for = lambda isvc: isvc["spec"]["predictor"]["model"]["storageUri"] != OLD
    with pytest.raises(ReadinessTimeout):
        deploy(standin, OLD, 0.90, ready_timeout_seconds=0.2)
    standin.calls.clear()
    logs = []
    verifier = Verifier(standin, {NEW: 0.95})
    result = deploy(standin, NEW, 0.95, verifier, logs=logs)
    assert result.action is Action.CREATED and "nothing was rolled out" in result.reason
    (replacement,) = puts(standin)
    assert "canaryTrafficPercent" not in replacement["spec"]["predictor"]
    assert verifier.calls == [(ADDRESS, NAME, NEW)]
    assert any("without a canary" in line for line in logs)


def test_a_canary_whose_rollback_fails_says_how_to_pin_the_old_model(standin):
    serve_old_model(standin)
    standin.ready_for = lambda isvc: isvc["spec"]["predictor"]["model"]["storageUri"] != NEW
    # Every update after the canary's fails: the rollback cannot be written.
    standin.faults.append(Fault("PUT", f"inferenceservices/{NAME}", status=500, times=99,
                                skip=1))
    with pytest.raises(KServeRolloutError, match="rolling it back failed.*kubectl patch "
                                                 ".*canaryTrafficPercent.*:0"):
        deploy(standin, NEW, 0.95, ready_timeout_seconds=0.2)


# -- An auth error while waiting: the rollout is left as it is ------------------------------------


def _fault_after_write(server, name: str, fault: Fault) -> None:
    """``fault`` is armed once ``name`` has been written (created or updated): it hits the
    rollout's wait, not the reads before its write."""
    original = server.after_write

    def after_write(kind, namespace, written, old):
        original(kind, namespace, written, old)
        if kind == "InferenceService" and written == name and fault not in server.faults:
            server.faults.append(fault)

    server.after_write = after_write


@pytest.mark.parametrize("status", [401, 403, 410])
def test_an_auth_or_gone_answer_during_the_canary_leaves_it_and_says_so(standin, status):
    """A 401/403 (the step's token, its RBAC) or 410 while the canary is awaited says nothing
    about the canary (Kubernetes API conventions, "HTTP Status codes": kubernetes/community
    api-conventions.md lines 1514-1530 and 1562-1566 at 24e7d8f): it is left, not rolled back
    (a rollback PUT would be refused the same way); the error says where things stand. Until
    the fix the runner's error path rolled it back and called it interrupted."""
    serve_old_model(standin)
    _fault_after_write(standin, NAME, Fault("GET", f"inferenceservices/{NAME}", status=status))
    with pytest.raises(kserve_api.RolloutLeftAsIs) as error:
        deploy(standin, NEW, 0.95)
    (canary,) = puts(standin)  # the canary's write, and no rollback
    assert canary["spec"]["predictor"]["canaryTrafficPercent"] == 10
    message = str(error.value)
    assert message.startswith(f"the canary of {NEW} on InferenceService {NS}/{NAME} was left "
                              f"as it is, taking 10% of the traffic unverified (reading "
                              f"InferenceService {NS}/{NAME} was refused (HTTP {status} ")
    assert "a retry of this step replaces it" in message
    assert "canaryTrafficPercent\":0" in message  # how to pin the old model by hand


@pytest.mark.parametrize("status", [401, 403, 410])
def test_an_auth_or_gone_answer_reading_the_candidates_deployment_leaves_it(raw, status):
    """Standard mode reads the candidate's Deployment in the wait's status callback: its 403
    is classified as the InferenceService's read is. The candidate is not deleted, and the
    message does not claim it was."""
    serve_old_model(raw)
    _fault_after_write(raw, CANDIDATE, Fault(
        "GET", f"deployments/{CANDIDATE}-predictor", status=status))
    with pytest.raises(kserve_api.RolloutLeftAsIs) as error:
        deploy(raw, NEW, 0.95)
    assert ("InferenceService", NS, CANDIDATE) in raw.objects  # not deleted
    assert not puts(raw)  # the main InferenceService untouched
    message = str(error.value)
    assert message.startswith(f"the candidate InferenceService {NS}/{CANDIDATE} of {NEW} was "
                              "left as it is (reading InferenceService")
    assert f"HTTP {status} " in message and "was deleted" not in message
    assert f"InferenceService {NS}/{NAME} was not changed and still serves {OLD}" in message


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
