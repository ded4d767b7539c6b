"""Serverless (Knative) mode's rollout (serving/deploy/rollout_serverless.py) against the KServe
stand-in (``tests.standins.kserve``): a canary on the InferenceService itself, verified at its
``latest`` tag and promoted, or rolled back in two writes so that no revision of the rejected
model keeps running; judged on the canary's own revision whatever the generations say; a
service that never rolled out replaced without a canary; an interrupted or unjudgeable canary
left or undone as the step says. The verifier and the deploy helper are
tests/serving/deploy/test_kserve_rollout.py's (what both modes share is tested there); every
body the stand-in receives is checked against the real CRDs when each test ends."""

from __future__ import annotations

import os
import signal

import pytest

from fmnist_kfp.kubernetes.inference_service import (
    ANNOTATION_CANDIDATE_MODEL_URI,
    ANNOTATION_CANDIDATE_TEST_ACCURACY,
    ANNOTATION_MODEL_URI,
    ANNOTATION_PREVIOUS_MODEL_URI,
    ANNOTATION_ROLLED_BACK,
    ANNOTATION_TEST_ACCURACY,
)
from fmnist_kfp.serving.deploy import kserve_api
from fmnist_kfp.serving.deploy.kserve_deployer import KServeRolloutError, ReadinessTimeout
from fmnist_kfp.serving.deploy.rollout_result import Action
from tests.serving.deploy.test_kserve_rollout import (
    ADDRESS,
    CANARY_URL,
    NAME,
    NEW,
    NS,
    OLD,
    Verifier,
    _fault_after_write,
    check_writes,
    deploy,
    model_annotations,
    puts,
    rolled_back_to,
    serve_old_model,
)
from tests.standins.apiserver import Fault
from tests.standins.kserve import KServeStandIn


@pytest.fixture
def standin():
    with KServeStandIn() as server:
        yield server
        check_writes(server)


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



def test_an_inference_service_deleted_mid_canary_is_a_clear_error(standin):
    serve_old_model(standin)

    def deleted(url):
        standin.objects.pop(("InferenceService", NS, NAME))
        return {"ok": True, "accuracy": 0.99}

    with pytest.raises(KServeRolloutError, match="disappeared"):
        deploy(standin, NEW, 0.95, Verifier(standin, raises={CANARY_URL: deleted}))



def test_without_tag_routing_the_canary_is_verified_through_the_predictor_address(standin):
    serve_old_model(standin)
    standin.honour_tag_routing = False
    verifier = Verifier(standin)
    logs = []
    result = deploy(standin, NEW, 0.95, verifier, logs=logs)
    predictor = f"http://{NAME}-predictor.{NS}.svc.cluster.local"
    assert verifier.urls == [predictor] and result.canary_url == predictor
    assert any("splits traffic" in line for line in logs)



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
