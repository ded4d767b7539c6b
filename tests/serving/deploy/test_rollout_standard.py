"""Standard (raw Deployment) mode's rollout (serving/deploy/rollout_standard.py): its fault
cases, against the KServe stand-in (``tests.standins.kserve``), which injects them on cue: a
failed, unready or interrupted candidate deleted with the main service left as it was; a main
rollout that does not finish written back to the previous model; an HPA that moved the
observed generation; answers that lose a write. The rollout itself (created with a safe
rollout strategy, a new model verified on a candidate InferenceService of its own before the
main one is rolled over, the candidate deleted through KServe's finalizer) runs on the real
KServe v0.15.2 and v0.16.0: tests/serving/deploy/test_kserve_on_the_cluster.py. The verifier and
the deploy helper are tests/serving/deploy/test_kserve_rollout.py's (what both modes share is
tested there); every body the stand-in receives is checked against the real CRDs when each
test ends."""

from __future__ import annotations

import os
import signal

import pytest

from fmnist_kfp.kubernetes.inference_service import (
    ANNOTATION_MODEL_URI,
    ANNOTATION_TEST_ACCURACY,
)
from fmnist_kfp.serving.deploy import kserve_api
from fmnist_kfp.serving.deploy.kserve_deployer import KServeRolloutError
from fmnist_kfp.serving.deploy.rollout_result import Action
from tests.serving.deploy.test_kserve_rollout import (
    CANDIDATE,
    CANDIDATE_ADDRESS,
    NAME,
    NEW,
    NS,
    OLD,
    RAW_ADDRESS,
    Verifier,
    _fault_after_write,
    check_writes,
    deploy,
    model_annotations,
    puts,
    serve_old_model,
)
from tests.standins.apiserver import Fault
from tests.standins.kserve import KServeStandIn


@pytest.fixture
def raw():
    with KServeStandIn(default_mode="RawDeployment") as server:
        yield server
        check_writes(server)


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
