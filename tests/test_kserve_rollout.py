"""The KServe rollout against the API stand-in: create, canary → promote or roll back, blessing.

Every InferenceService and ServingRuntime body the stand-in receives is checked against the real
CRDs (strictly) when each test ends.
"""

from __future__ import annotations

import os
import signal

import pytest

from fmnist.errors import UserInputError
from serving.deploy.inference_service import (
    ANNOTATION_CANDIDATE_MODEL_URI,
    ANNOTATION_CANDIDATE_TEST_ACCURACY,
    ANNOTATION_MODEL_URI,
    ANNOTATION_PREVIOUS_MODEL_URI,
    ANNOTATION_TEST_ACCURACY,
    CANARY_ANNOTATIONS,
    TAG_ROUTING_ANNOTATION,
    KServeSettings,
)
from serving.deploy.kubernetes import KServeRolloutError, ReadinessTimeout, deploy_with_kserve
from tests.crd_schemas import validate_strict
from tests.kserve_standin import (
    ISVC_CRD,
    RUNTIME_CRD,
    KServeStandIn,
)

NS = "kubeflow"
NAME = "fashion-mnist"
OLD = "pvc://fmnist-data/models/run-1"
NEW = "pvc://fmnist-data/models/run-2"
STABLE_URL = f"http://{NAME}.{NS}.example.com"
CANARY_URL = f"http://latest-{NAME}-predictor.{NS}.example.com"
RESULT_KEYS = {"action", "blessing", "url", "canary_url", "verification", "namespace", "name",
               "runtime", "storage_uri", "canary_traffic_percent", "reason"}


class Verifier:
    """A fake ``verify``: answers per URL (default: a healthy model at ``accuracy``)."""

    def __init__(self, accuracy: float = 0.91, per_url: dict | None = None):
        self.accuracy = accuracy
        self.per_url = per_url or {}
        self.urls: list[str] = []

    def __call__(self, url: str) -> dict:
        self.urls.append(url)
        answer = self.per_url.get(url)
        if callable(answer):
            return answer(url)
        if answer is not None:
            return answer
        return {"ok": True, "accuracy": self.accuracy, "requests": 200, "failures": 0}


@pytest.fixture
def standin():
    with KServeStandIn() as server:
        yield server
        for _, body in server.isvc_writes():
            validate_strict(body, *ISVC_CRD)
        for _, body in server.runtime_writes():
            validate_strict(body, *RUNTIME_CRD)


def settings(**overrides) -> KServeSettings:
    values = {"namespace": NS, "image": "ghcr.io/fmnist-kfp/fmnist-kfp:0.1.0",
              "ready_timeout_seconds": 5}
    return KServeSettings(**{**values, **overrides})


def deploy(standin, uri, accuracy, verify=None, tolerance=0.005, logs=None, **overrides):
    return deploy_with_kserve(
        settings(**overrides), storage_uri=uri, test_accuracy=accuracy, tolerance=tolerance,
        verify=verify or Verifier(accuracy), client=standin.kserve_client(NS),
        poll_seconds=0.01, log=(logs.append if logs is not None else lambda line: None),
    )


def serve_old_model(standin, accuracy=0.90):
    """The state after a first deployment of ``OLD``; the calls it made are forgotten."""
    deploy(standin, OLD, accuracy)
    written = len(standin.isvc_writes())
    assert written == 1
    standin.calls.clear()


def puts(standin) -> list[dict]:
    return [body for method, body in standin.isvc_writes() if method == "PUT"]


def model_annotations(isvc: dict) -> dict:
    return {key: value for key, value in isvc["metadata"]["annotations"].items()
            if key.startswith("fmnist.kubeflow.org/")}


def test_first_deploy_creates_the_service(standin):
    verifier = Verifier(0.905)
    logs = []
    result = deploy(standin, OLD, 0.91, verifier, logs=logs)
    assert set(result) == RESULT_KEYS
    assert result["action"] == "created"
    assert result["url"] == STABLE_URL and result["canary_url"] is None
    assert result["verification"]["ok"] and result["verification"]["passed"]
    assert result["blessing"]["blessed"] and result["blessing"]["serving_accuracy"] is None
    assert (result["namespace"], result["name"], result["runtime"]) == (NS, NAME,
                                                                          "fmnist-predictor")
    assert result["storage_uri"] == OLD and result["canary_traffic_percent"] is None
    assert verifier.urls == [STABLE_URL]
    methods = standin.methods()
    isvc_path = f"/apis/serving.kserve.io/v1beta1/namespaces/{NS}/inferenceservices"
    runtime_path = f"/apis/serving.kserve.io/v1alpha1/namespaces/{NS}/servingruntimes"
    assert methods[:4] == [("GET", f"{isvc_path}/{NAME}"),
                           ("GET", f"{runtime_path}/fmnist-predictor"),
                           ("POST", runtime_path), ("POST", isvc_path)]
    assert ("GET", f"{isvc_path}/{NAME}") in methods[4:]  # waited for Ready
    assert not puts(standin)
    (_, body), = standin.isvc_writes()
    assert "canaryTrafficPercent" not in body["spec"]["predictor"]
    assert body["metadata"]["annotations"][TAG_ROUTING_ANNOTATION] == "true"
    assert model_annotations(standin.isvc()) == {ANNOTATION_TEST_ACCURACY: "0.910000",
                                                 ANNOTATION_MODEL_URI: OLD}
    assert any("creating InferenceService kubeflow/fashion-mnist" in line for line in logs)


def test_a_better_model_goes_through_a_canary_and_is_promoted(standin):
    serve_old_model(standin, 0.90)
    verifier = Verifier(0.912)
    result = deploy(standin, NEW, 0.915, verifier)
    assert result["action"] == "promoted"
    assert result["blessing"]["blessed"]
    assert (result["blessing"]["candidate_accuracy"],
            result["blessing"]["serving_accuracy"]) == (0.915, 0.90)
    assert result["canary_url"] == CANARY_URL and verifier.urls == [CANARY_URL]
    assert result["url"] == STABLE_URL and result["canary_traffic_percent"] == 10
    canary, promotion = puts(standin)
    assert canary["spec"]["predictor"]["canaryTrafficPercent"] == 10
    assert canary["spec"]["predictor"]["model"]["storageUri"] == NEW
    assert canary["metadata"]["resourceVersion"]
    assert model_annotations(canary) == {
        ANNOTATION_TEST_ACCURACY: "0.900000", ANNOTATION_MODEL_URI: OLD,
        ANNOTATION_CANDIDATE_TEST_ACCURACY: "0.915000", ANNOTATION_CANDIDATE_MODEL_URI: NEW,
        ANNOTATION_PREVIOUS_MODEL_URI: OLD,
    }
    assert "canaryTrafficPercent" not in promotion["spec"]["predictor"]
    assert promotion["spec"]["predictor"]["model"]["storageUri"] == NEW
    served = standin.isvc()
    assert model_annotations(served) == {ANNOTATION_TEST_ACCURACY: "0.915000",
                                         ANNOTATION_MODEL_URI: NEW}
    traffic = served["status"]["components"]["predictor"]["traffic"]
    assert [(t["tag"], t["percent"]) for t in traffic] == [("latest", 100)]


def test_a_canary_that_fails_verification_is_rolled_back(standin):
    serve_old_model(standin, 0.90)
    verifier = Verifier(per_url={CANARY_URL: {"ok": True, "accuracy": 0.62, "requests": 200,
                                              "failures": 0}})
    result = deploy(standin, NEW, 0.915, verifier)
    assert result["action"] == "rolled_back"
    assert result["verification"]["accuracy"] == 0.62 and not result["verification"]["passed"]
    assert result["canary_url"] == CANARY_URL
    assert "failed verification" in result["reason"] and OLD in result["reason"]
    canary, rollback = puts(standin)
    assert canary["spec"]["predictor"]["canaryTrafficPercent"] == 10
    assert rollback["spec"]["predictor"]["canaryTrafficPercent"] == 0
    served = standin.isvc()
    assert model_annotations(served) == {ANNOTATION_TEST_ACCURACY: "0.900000",
                                         ANNOTATION_MODEL_URI: OLD}
    traffic = {t["tag"]: t["percent"]
               for t in served["status"]["components"]["predictor"]["traffic"]}
    assert traffic == {"latest": 0, "prev": 100}


def test_a_verifier_that_raises_counts_as_a_failed_canary(standin):
    serve_old_model(standin)

    def unreachable(url):
        raise ConnectionError("connection refused")

    result = deploy(standin, NEW, 0.92, Verifier(per_url={CANARY_URL: unreachable}))
    assert result["action"] == "rolled_back"
    assert result["verification"] == {"ok": False, "passed": False,
                                      "error": "ConnectionError: connection refused"}
    assert puts(standin)[-1]["spec"]["predictor"]["canaryTrafficPercent"] == 0


def test_a_canary_below_the_tolerance_is_rolled_back_even_when_ok(standin):
    serve_old_model(standin, 0.90)
    verifier = Verifier(per_url={CANARY_URL: {"ok": True, "accuracy": 0.905}})
    result = deploy(standin, NEW, 0.92, verifier, tolerance=0.01)
    assert result["action"] == "rolled_back"  # 0.905 < 0.92 - 0.01


def test_a_worse_model_is_rejected_without_a_write(standin):
    serve_old_model(standin, 0.90)
    verifier = Verifier()
    result = deploy(standin, NEW, 0.88, verifier)
    assert result["action"] == "rejected"
    blessing = result["blessing"]
    assert not blessing["blessed"]
    assert (blessing["candidate_accuracy"], blessing["serving_accuracy"]) == (0.88, 0.90)
    assert blessing["tolerance"] == 0.005 and "serving model stays" in blessing["reason"]
    assert result["url"] == STABLE_URL and result["verification"] is None
    assert not standin.isvc_writes() and not standin.runtime_writes() and not verifier.urls
    assert model_annotations(standin.isvc())[ANNOTATION_MODEL_URI] == OLD


def test_within_the_tolerance_is_blessed(standin):
    serve_old_model(standin, 0.90)
    assert deploy(standin, NEW, 0.896, tolerance=0.005)["action"] == "promoted"


def test_the_same_model_is_unchanged_but_verified(standin):
    serve_old_model(standin, 0.90)
    verifier = Verifier(0.90)
    result = deploy(standin, OLD, 0.90, verifier)
    assert result["action"] == "unchanged"
    assert verifier.urls == [STABLE_URL] and result["verification"]["passed"]
    assert not standin.isvc_writes()


def test_an_unchanged_model_failing_verification_raises(standin):
    serve_old_model(standin, 0.90)
    verifier = Verifier(per_url={STABLE_URL: {"ok": False, "accuracy": 0.1, "requests": 10,
                                              "failures": 9}})
    with pytest.raises(KServeRolloutError, match="nothing was changed") as error:
        deploy(standin, OLD, 0.90, verifier)
    assert error.value.result["action"] == "unchanged"
    assert not standin.isvc_writes()


def test_a_created_model_failing_verification_raises(standin):
    verifier = Verifier(per_url={STABLE_URL: {"ok": False, "accuracy": 0.0, "requests": 10,
                                              "failures": 10}})
    with pytest.raises(KServeRolloutError, match="no earlier model to roll back to") as error:
        deploy(standin, OLD, 0.91, verifier)
    assert error.value.result["action"] == "created"
    assert "failures=10/10" in str(error.value)


def test_missing_accuracy_annotation_blesses_with_a_reason(standin):
    serve_old_model(standin)
    isvc = standin.isvcs[(NS, NAME)]
    del isvc["metadata"]["annotations"][ANNOTATION_TEST_ACCURACY]
    result = deploy(standin, NEW, 0.5)
    assert result["action"] == "promoted"
    assert result["blessing"]["serving_accuracy"] is None
    assert "unknown" in result["blessing"]["reason"]
    assert ANNOTATION_TEST_ACCURACY in result["blessing"]["reason"]


def test_a_canary_that_never_gets_ready_is_rolled_back_then_raised(standin):
    serve_old_model(standin, 0.90)
    # The new model's revision never becomes ready, before or after the rollback.
    standin.ready_for = lambda isvc: isvc["spec"]["predictor"]["model"]["storageUri"] != NEW
    verifier = Verifier()
    logs = []
    with pytest.raises(KServeRolloutError, match="interrupted .*ReadinessTimeout") as error:
        deploy(standin, NEW, 0.95, verifier, logs=logs, ready_timeout_seconds=0.3)
    assert isinstance(error.value.__cause__, ReadinessTimeout)
    assert "not ready after 0.3 s" in str(error.value.__cause__)
    assert "kubectl describe inferenceservice" in str(error.value.__cause__)
    assert error.value.result["action"] == "rolled_back"
    canary, rollback = puts(standin)
    assert canary["spec"]["predictor"]["canaryTrafficPercent"] == 10
    assert rollback["spec"]["predictor"]["canaryTrafficPercent"] == 0
    assert not verifier.urls
    served = standin.isvc()
    assert model_annotations(served) == {ANNOTATION_TEST_ACCURACY: "0.900000",
                                         ANNOTATION_MODEL_URI: OLD}
    traffic = served["status"]["components"]["predictor"]["traffic"]
    assert [(t["tag"], t["percent"]) for t in traffic] == [("latest", 100)]  # still the old one
    assert any("Ready=False (RevisionMissing" in line for line in logs)


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

    with pytest.raises(KServeRolloutError, match="SIGTERM") as error:
        deploy(standin, NEW, 0.95, Verifier(per_url={CANARY_URL: terminated}))
    assert error.value.result["action"] == "rolled_back"
    assert puts(standin)[-1]["spec"]["predictor"]["canaryTrafficPercent"] == 0
    assert signal.getsignal(signal.SIGTERM) is previous


def test_conflicts_are_retried_with_a_fresh_read(standin):
    serve_old_model(standin)
    standin.conflicts = 2
    logs = []
    result = deploy(standin, NEW, 0.95, logs=logs)
    assert result["action"] == "promoted"
    assert len(puts(standin)) == 4  # two refused, the canary, the promotion
    assert sum("retrying" in line for line in logs) == 2


def test_others_metadata_survives_the_rollout(standin):
    serve_old_model(standin)
    metadata = standin.isvcs[(NS, NAME)]["metadata"]
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
    assert result["runtime"] == "tensorflow"
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


def test_without_tag_routing_the_canary_is_verified_through_the_predictor_url(standin):
    serve_old_model(standin)
    standin.tag_routing = False
    verifier = Verifier()
    logs = []
    result = deploy(standin, NEW, 0.95, verifier, logs=logs)
    predictor_url = f"http://{NAME}-predictor.{NS}.example.com"
    assert verifier.urls == [predictor_url] and result["canary_url"] == predictor_url
    assert any("status.components.predictor.url" in line for line in logs)


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
