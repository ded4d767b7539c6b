"""serve_early on KServe (issues 23 and 29): promotions against the KServe stand-in
(``tests.standins.kserve``: the API server's resourceVersion rule, 409 on a stale write, KServe's
controller over Knative or a Deployment, finalizers), one after another and racing. The races
force both promotions to read the InferenceService before either writes, then let one claim
first: in both orders, from an existing InferenceService and from none (a cold start), in both
modes, the better model ends up served, neither step fails, and the worse one is rejected or
superseded. The verifier passes only the promoting step's own model, as the real one does."""

from __future__ import annotations

import threading
import time

import pytest

from fmnist_kfp.kubernetes.inference_service import (
    ANNOTATION_EARLY_MODEL_TYPE,
    ANNOTATION_EARLY_MODEL_URI,
    ANNOTATION_EARLY_VALIDATION_ACCURACY,
    ANNOTATION_MODEL_URI,
    ANNOTATION_TEST_ACCURACY,
    candidate_name,
    model_uri_of,
)
from fmnist_kfp.serving.deploy import kserve_api
from fmnist_kfp.serving.deploy.kserve_promotion import (
    CLAIM_ACCURACY,
    CLAIM_ATTEMPTS,
    CLAIM_MODEL_TYPE,
    CLAIM_MODEL_URI,
    CLAIM_UID,
    claim_name,
    promote_with_kserve,
)
from fmnist_kfp.serving.deploy.rollout_base import Acceptance, Candidate
from fmnist_kfp.serving.deploy.rollout_result import Action, RolloutResult
from tests.serving.deploy.test_kserve_rollout import (
    NS,
    OLD,
    Verifier,
    check_writes,
    serve_old_model,
    settings,
)
from tests.standins.kserve import KServeStandIn

BETTER = "pvc://fmnist-data/models/batchnorm"
WORSE = "pvc://fmnist-data/models/basic"
ACCURACY = {OLD: 0.90, BETTER: 0.9312, WORSE: 0.9188}


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


def _promote(standin, uri: str, model_type: str, logs: list | None = None,
             client=None, verify=None, attempts: int = CLAIM_ATTEMPTS,
             **overrides) -> RolloutResult:
    return promote_with_kserve(
        settings(**overrides), Candidate(uri, ACCURACY[uri], model_type=model_type),
        Acceptance(0.005, verify or Verifier(standin, ACCURACY, own=uri)),
        client=client or standin.kserve_client(NS),
        poll_seconds=0.005, log=(logs.append if logs is not None else lambda line: None),
        attempts=attempts)


def _served(standin) -> str | None:
    return model_uri_of(standin.isvc())


def _claim(standin) -> dict:
    """The claim: the data of the ConfigMap beside the InferenceService (issue 29)."""
    return standin.get("ConfigMap", claim_name("fashion-mnist"))["data"]


def test_promotions_one_after_another_serve_each_better_model_and_reject_a_worse_one(standin):
    first = _promote(standin, WORSE, "basic")
    assert first.action is Action.CREATED and _served(standin) == WORSE
    annotations = standin.isvc()["metadata"]["annotations"]
    claim = _claim(standin)  # issue 29: in a ConfigMap, no longer in the annotations
    assert claim[CLAIM_ACCURACY] == "0.918800"
    assert claim[CLAIM_MODEL_TYPE] == "basic"
    assert claim[CLAIM_UID] == standin.isvc()["metadata"]["uid"]  # bound once created
    assert ANNOTATION_EARLY_VALIDATION_ACCURACY not in annotations
    assert ANNOTATION_EARLY_MODEL_TYPE not in annotations
    # The test split is not read for it: no test accuracy recorded.
    assert ANNOTATION_TEST_ACCURACY not in annotations
    second = _promote(standin, BETTER, "batchnorm")
    assert second.action is Action.PROMOTED and _served(standin) == BETTER
    assert _claim(standin)[CLAIM_MODEL_URI] == BETTER
    third = _promote(standin, WORSE, "basic")
    assert third.action is Action.REJECTED and _served(standin) == BETTER
    assert "0.9188" in third.reason and "0.9312" in third.reason


def test_an_ordinarily_deployed_model_is_beaten_only_within_the_blessing_tolerance(standin):
    serve_old_model(standin, accuracy=0.95)  # test accuracy 0.95 on record, no claim
    result = _promote(standin, BETTER, "batchnorm")
    assert result.action is Action.REJECTED and _served(standin) == OLD


class _ReadBarrier:
    """Holds each promotion's first read of the claim (it reads the InferenceService just
    before) until both have read it, then lets them go after their own delay: both decide on
    the same state, one writes first."""

    def __init__(self, delays: dict[str, float]):
        self.barrier = threading.Barrier(len(delays))
        self.delays = delays
        self.seen: set[str] = set()
        self.real_get_claim = kserve_api.KServeApi.get_claim

    def get_claim(self, api, name: str):
        result = self.real_get_claim(api, name)
        who = threading.current_thread().name
        if who in self.delays and who not in self.seen:
            self.seen.add(who)
            self.barrier.wait(timeout=60)
            time.sleep(self.delays[who])
        return result


@pytest.mark.parametrize("first", ["better", "worse"])
def test_racing_promotions_never_leave_the_worse_model_served(standin, monkeypatch, first):
    serve_old_model(standin, accuracy=0.90)
    gate = _ReadBarrier({"better": 0.0 if first == "better" else 0.3,
                         "worse": 0.0 if first == "worse" else 0.3})
    monkeypatch.setattr(kserve_api.KServeApi, "get_claim",
                        lambda api, name: gate.get_claim(api, name))
    results: dict[str, dict] = {}
    errors: dict[str, BaseException] = {}
    logs: dict[str, list] = {"better": [], "worse": []}
    # Made here, not in the threads: the first KServeClient imports kserve, which can take
    # longer than the barrier would wait for the other thread.
    clients = {which: standin.kserve_client(NS) for which in logs}

    def run(which: str, uri: str, model_type: str) -> None:
        try:
            results[which] = _promote(standin, uri, model_type, logs[which], clients[which])
        except BaseException as error:  # reported below, with both threads' logs
            errors[which] = error

    threads = [threading.Thread(target=run, name="better", args=("better", BETTER, "batchnorm")),
               threading.Thread(target=run, name="worse", args=("worse", WORSE, "basic"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and set(results) == {"better", "worse"}, (errors, logs)
    assert _served(standin) == BETTER
    annotations = standin.isvc()["metadata"]["annotations"]
    assert _claim(standin)[CLAIM_MODEL_URI] == BETTER
    assert ANNOTATION_EARLY_MODEL_URI not in annotations
    assert annotations[ANNOTATION_MODEL_URI] == BETTER
    assert results["better"].action is Action.PROMOTED, logs["better"]
    # Both read the old model; one claimed first, so the other's write was answered 409.
    loser = "worse" if first == "better" else "better"
    assert any("changed since it was read" in line for line in logs[loser]), logs[loser]
    if first == "better":
        assert results["worse"].action is Action.REJECTED
    else:  # the worse one claimed first; the better one overtook it
        assert results["worse"].action in ("superseded", "promoted")


# -- issue 29: cold starts, a claim that restarts nothing -------------------------------------


def _run_both(standin, starts: dict, **overrides) -> tuple[dict, dict, dict]:
    """Runs the better and the worse promotion in threads named ``better`` and ``worse``;
    ``starts[which]()`` runs first in its thread. Returns ``(results, errors, logs)``."""
    results: dict[str, dict] = {}
    errors: dict[str, BaseException] = {}
    logs: dict[str, list] = {"better": [], "worse": []}
    clients = {which: standin.kserve_client(NS) for which in logs}  # kserve imported here
    models = {"better": (BETTER, "batchnorm"), "worse": (WORSE, "basic")}

    def run(which: str) -> None:
        try:
            starts.get(which, lambda: None)()
            results[which] = _promote(standin, *models[which], logs[which], clients[which],
                                      **overrides)
        except BaseException as error:  # reported by the caller, with both threads' logs
            errors[which] = error

    threads = [threading.Thread(target=run, name=which, args=(which,)) for which in models]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results, errors, logs


def _until(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.002)


def _exists(standin, name: str = "fashion-mnist") -> bool:
    with standin.lock:
        return ("InferenceService", NS, name) in standin.objects


def test_a_better_model_overtaking_a_cold_start_supersedes_it():
    """Issue 29 item 1: A (basic) creates the InferenceService; B (batchnorm) reads it while
    it cold-starts, claims it and, nothing being rolled out yet, replaces A's predictor
    (KServe gives the latest revision all traffic then: ksvc_reconciler.go v0.15.2 L115-147).
    A's create-wait must stop as superseded, not verify B's revision against A's answers
    (before: ``KServeRolloutError ... failed verification``, A's step failed)."""
    with KServeStandIn(ready_after=40) as standin:
        results, errors, logs = _run_both(standin, {
            "better": lambda: _until(lambda: _exists(standin), "A's InferenceService")},
            ready_timeout_seconds=30)
        check_writes(standin)
        assert not errors and set(results) == {"better", "worse"}, (errors, logs)
        assert results["worse"].action is Action.SUPERSEDED, logs["worse"]
        # What the step's outputs carry: why, and no URL, blessing or verification of its own.
        superseded = results["worse"].record()
        assert superseded == {"action": "superseded", "reason": superseded["reason"], "url": "",
                              "storage_uri": WORSE, "blessing": {}, "verification": {},
                              "backend": "kubernetes"}
        assert "batchnorm claim (validation accuracy 0.931200) replaced this one" in \
            superseded["reason"], superseded
        assert results["better"].action is Action.CREATED, logs["better"]
        assert _served(standin) == BETTER and _claim(standin)[CLAIM_MODEL_URI] == BETTER
        assert standin.answering(f"http://fashion-mnist.{NS}.svc.cluster.local")[0] == BETTER


class _ColdStartGate:
    """Both promotions read "no InferenceService" (a barrier on each one's first read); then
    ``first`` goes on, and the other only once the first one's InferenceService exists."""

    def __init__(self, standin, first: str):
        self.standin, self.first = standin, first
        self.barrier = threading.Barrier(2)
        self.seen: set[str] = set()
        self.real_get = kserve_api.KServeApi.get

    def get(self, api, name: str, *, absent_ok: bool = True):
        result = self.real_get(api, name, absent_ok=absent_ok)
        who = threading.current_thread().name
        if who in ("better", "worse") and who not in self.seen and name == "fashion-mnist":
            self.seen.add(who)
            assert result is None
            self.barrier.wait(timeout=60)
            if who != self.first:
                _until(lambda: _exists(self.standin), "the first one's InferenceService")
        return result


@pytest.mark.parametrize("mode", ["Serverless", "RawDeployment"])
@pytest.mark.parametrize("first", ["better", "worse"])
def test_racing_promotions_from_a_cold_start_serve_the_better_model(monkeypatch, mode, first):
    """Issue 29: no InferenceService yet; both promotions find none, one claims and creates it
    first. In both finishing orders and both modes the better model is served, neither step
    fails, and the worse one ends rejected (it came second) or superseded (it came first and
    was overtaken while its InferenceService cold-started: ``ready_after`` keeps that wait
    going until the better one has claimed)."""
    with KServeStandIn(default_mode=mode, ready_after=40) as standin:
        gate = _ColdStartGate(standin, first)
        monkeypatch.setattr(kserve_api.KServeApi, "get",
                            lambda api, name, absent_ok=True: gate.get(api, name,
                                                                       absent_ok=absent_ok))
        results, errors, logs = _run_both(standin, {}, ready_timeout_seconds=30)
        monkeypatch.undo()
        check_writes(standin)
        assert not errors and set(results) == {"better", "worse"}, (errors, logs)
        assert _served(standin) == BETTER, logs
        assert _claim(standin)[CLAIM_MODEL_URI] == BETTER
        assert results["better"].action in ("created", "promoted"), logs["better"]
        expected = "rejected" if first == "better" else "superseded"
        assert results["worse"].action == expected, logs["worse"]
        address = (f"http://fashion-mnist.{NS}.svc.cluster.local" if mode == "Serverless"
                   else f"http://fashion-mnist-predictor.{NS}.svc.cluster.local")
        assert standin.answering(address)[0] == BETTER
        # Issue 41: the claim is bound to the service, also when its holder's create was
        # answered 409 and it rolled out over the other's (first == "worse").
        assert _claim(standin)[CLAIM_UID] == standin.isvc()["metadata"]["uid"], logs
        # Standard mode: no candidate is left behind.
        assert [key for key in standin.objects if key[0] == "InferenceService"] == [
            ("InferenceService", NS, "fashion-mnist")]


@pytest.mark.parametrize("mode", ["Serverless", "RawDeployment"])
def test_a_claim_write_restarts_nothing(mode):
    """Issue 29 item 4: KServe copies the InferenceService's annotations into the revision
    template and the pod template (kserve v0.15.2 components/predictor.go L99-101, L444-462;
    deployment_reconciler.go L141-155): a claim written there made a new revision (Serverless)
    or a rolling restart (Standard) of the *old* model before the new one was even tried. The
    claim lives in a ConfigMap: every revision or pod template rolled for the promotion serves
    the new model."""
    with KServeStandIn(default_mode=mode) as standin:
        serve_old_model(standin, accuracy=0.90)
        assert standin.rollouts() == [OLD]
        result = _promote(standin, BETTER, "batchnorm")
        check_writes(standin)
        assert result.action is Action.PROMOTED and _served(standin) == BETTER
        assert standin.rollouts()[0] == OLD
        assert set(standin.rollouts()[1:]) == {BETTER}, standin.rollouts()
        # A worse model's decision writes nothing the controller sees.
        rolled = standin.rollouts()
        assert _promote(standin, WORSE, "basic").action is Action.REJECTED
        assert standin.rollouts() == rolled


def test_a_transient_read_after_a_cold_start_create_neither_fails_nor_unbinds(
        standin, monkeypatch):
    """The first promotion creates the InferenceService, then reads it to bind the claim to
    its uid: a 504 on that read (the stand-ins' fault mode gave one, seed 22) failed the step
    with its model served, and left the claim unbound, alive past a deletion of the service.
    It is asked again."""
    from fmnist_kfp.serving.deploy.rollout_base import Rollout

    created, faulted = [], []
    create, get = Rollout.create, kserve_api.KServeApi.get

    def create_then_fault(self):
        result = create(self)
        created.append(True)
        return result

    def get_faulted_once(self, name, **kwargs):
        if created and not faulted:
            faulted.append(name)
            raise kserve_api.TransientApiError(f"could not read {name}: HTTP 504 injected")
        return get(self, name, **kwargs)

    monkeypatch.setattr(Rollout, "create", create_then_fault)
    monkeypatch.setattr(kserve_api.KServeApi, "get", get_faulted_once)
    result = _promote(standin, BETTER, "batchnorm")
    assert result.action is Action.CREATED and _served(standin) == BETTER
    assert faulted == ["fashion-mnist"]
    assert _claim(standin)[CLAIM_UID] == standin.isvc()["metadata"]["uid"]


def test_a_claim_made_on_an_inference_service_deleted_since_is_void(standin):
    """A claim records the uid of the InferenceService it was made on; once that one is
    deleted (and its finalizer removed), a worse model may serve again."""
    assert _promote(standin, BETTER, "batchnorm").action is Action.CREATED
    client = standin.kserve_client(NS)
    api = kserve_api.KServeApi(client.api_instance.api_client, NS)
    api.delete("fashion-mnist")
    _until(lambda: api.get("fashion-mnist") is None, "the deletion")
    assert _promote(standin, WORSE, "basic").action is Action.CREATED
    assert _served(standin) == WORSE and _claim(standin)[CLAIM_MODEL_URI] == WORSE


@pytest.mark.parametrize("holder", ["this model", "another model"])
def test_a_claim_left_unbound_is_bound_and_dies_with_its_inference_service(standin, holder):
    """Issue 41 item 4: a claim made while no InferenceService existed (``inference-service-uid``
    empty) whose holder stopped before binding it: a retried step of the same model, or
    another model's promotion. The next promotion that finds the service binds it, so that
    deleting the service voids it as docs/serving.md says; before, a uid-less claim was honoured
    against any service, and a worse model was refused with nothing served."""
    serve_old_model(standin, accuracy=0.90)
    client = standin.kserve_client(NS)
    api = kserve_api.KServeApi(client.api_instance.api_client, NS)
    api.create_claim({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": claim_name("fashion-mnist"), "namespace": NS},
                      "data": {CLAIM_ACCURACY: f"{ACCURACY[BETTER]:.6f}",
                               CLAIM_MODEL_URI: BETTER, CLAIM_MODEL_TYPE: "batchnorm",
                               CLAIM_UID: ""}})
    logs: list[str] = []
    if holder == "this model":  # the retried step: it rolls its model out
        assert _promote(standin, BETTER, "batchnorm", logs).action is Action.PROMOTED, logs
    else:  # a worse model: refused against the claim, which it binds
        assert _promote(standin, WORSE, "basic", logs).action is Action.REJECTED, logs
    assert _claim(standin)[CLAIM_UID] == standin.isvc()["metadata"]["uid"], logs
    api.delete("fashion-mnist")
    _until(lambda: api.get("fashion-mnist") is None, "the deletion")
    logs.clear()
    assert _promote(standin, WORSE, "basic", logs).action is Action.CREATED, logs
    assert _served(standin) == WORSE and _claim(standin)[CLAIM_MODEL_URI] == WORSE


def _api(standin) -> kserve_api.KServeApi:
    return kserve_api.KServeApi(standin.kserve_client(NS).api_instance.api_client, NS)


def _delete_isvc(standin) -> None:
    api = _api(standin)
    api.delete("fashion-mnist")
    _until(lambda: api.get("fashion-mnist") is None, "the deletion")


def _created_meanwhile(standin, monkeypatch) -> None:
    """Another deploy creates the InferenceService right after the promotion's claim, made
    while there was none, so the promotion's create is answered 409 ``CreatedMeanwhile``."""
    create_claim = kserve_api.KServeApi.create_claim

    def claim_then_someone_creates(api, body):
        made = create_claim(api, body)
        monkeypatch.setattr(kserve_api.KServeApi, "create_claim", create_claim)
        serve_old_model(standin, accuracy=0.90)
        return made

    monkeypatch.setattr(kserve_api.KServeApi, "create_claim", claim_then_someone_creates)


def test_a_claim_made_before_a_409_created_meanwhile_dies_with_the_service_it_rolled_over(
        standin, monkeypatch):
    """Issue 41 item 4: the claim is made while no InferenceService exists (uid empty), another
    deploy creates one before this promotion's create (409 ``CreatedMeanwhile``), and the
    promotion rolls its model out over that one. Once that service is deleted and another made,
    the old claim must not refuse a model better than the new service's."""
    _created_meanwhile(standin, monkeypatch)
    logs: list[str] = []
    assert _promote(standin, BETTER, "batchnorm", logs).action is Action.PROMOTED, logs
    assert any("rolls out over that one" in line for line in logs), logs
    assert _claim(standin)[CLAIM_UID] == standin.isvc()["metadata"]["uid"], logs
    _delete_isvc(standin)
    standin.calls.clear()
    serve_old_model(standin, accuracy=0.90)  # a new service, a new uid
    logs.clear()
    assert _promote(standin, WORSE, "basic", logs).action is Action.PROMOTED, logs
    assert _served(standin) == WORSE and _claim(standin)[CLAIM_MODEL_URI] == WORSE


def test_a_last_try_answered_created_meanwhile_leaves_its_claim_bound(standin, monkeypatch):
    """Issue 41 item 4: the 409 ``CreatedMeanwhile`` comes on the promotion's last try, so no
    next read binds the claim: it is bound before the promotion gives up."""
    _created_meanwhile(standin, monkeypatch)
    with pytest.raises(kserve_api.KServeRolloutError, match="kept changing"):
        _promote(standin, BETTER, "batchnorm", attempts=1)
    assert _claim(standin)[CLAIM_UID] == standin.isvc()["metadata"]["uid"]


@pytest.mark.parametrize("failure", ["verification", "readiness"])
def test_a_cold_start_that_fails_after_creating_binds_its_claim(standin, failure):
    """Issue 41 item 4: a promotion's create made the InferenceService, then its model failed
    verification or never got ready. The service stays (the error says to delete it), and so
    did the claim, unbound: once the service was deleted, nothing served, the next run's worse
    model was refused against it. The claim is bound to the service it was made for."""
    verify, ready_for = None, standin.ready_for
    if failure == "verification":  # another model's answers: the verifier refuses them
        verify = Verifier(standin, ACCURACY, own=WORSE)
    else:
        standin.ready_for = lambda isvc: False
    with pytest.raises(kserve_api.KServeRolloutError):
        _promote(standin, BETTER, "batchnorm", verify=verify, ready_timeout_seconds=0.3)
    standin.ready_for = ready_for
    assert _claim(standin)[CLAIM_UID] == standin.isvc()["metadata"]["uid"]
    _delete_isvc(standin)
    logs: list[str] = []
    assert _promote(standin, WORSE, "basic", logs).action is Action.CREATED, logs
    assert _served(standin) == WORSE and _claim(standin)[CLAIM_MODEL_URI] == WORSE


@pytest.mark.parametrize("applied", [False, True], ids=["lost", "applied"])
@pytest.mark.parametrize("path", ["own create", "held over a service"])
def test_a_transient_failure_binding_the_claim_is_asked_again(standin, monkeypatch, path,
                                                              applied):
    """Issue 41 item 4: the write that binds the claim answered 504 (before or after the API
    server applied it) and the claim stayed unbound, outliving its InferenceService. The bind
    is read and written again until it holds."""
    if path == "held over a service":  # a claim left unbound by this model, a service made
        serve_old_model(standin, accuracy=0.90)
        _api(standin).create_claim({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": claim_name("fashion-mnist"), "namespace": NS},
            "data": {CLAIM_ACCURACY: f"{ACCURACY[BETTER]:.6f}", CLAIM_MODEL_URI: BETTER,
                     CLAIM_MODEL_TYPE: "batchnorm", CLAIM_UID: ""}})
    replace_claim, faulted = kserve_api.KServeApi.replace_claim, []

    def replace_faulted_once(api, body):
        if not faulted and body["data"].get(CLAIM_UID):  # the bind's write
            faulted.append(body["data"][CLAIM_UID])
            if applied:
                replace_claim(api, body)
            raise kserve_api.TransientApiError("could not update configmaps: HTTP 504 injected")
        return replace_claim(api, body)

    monkeypatch.setattr(kserve_api.KServeApi, "replace_claim", replace_faulted_once)
    logs: list[str] = []
    expected = "created" if path == "own create" else "promoted"
    assert _promote(standin, BETTER, "batchnorm", logs).action == expected, logs
    assert faulted, logs
    assert _claim(standin)[CLAIM_UID] == standin.isvc()["metadata"]["uid"], logs


def test_standard_promotions_racing_keep_their_own_candidates():
    """Issue 29 item 3: an old model served in Standard mode, A (basic) promoting, B
    (batchnorm) promoting once A's candidate exists. With one shared ``<name>-canary``, B
    deleted A's live candidate as "left by an earlier rollout" and A's cleanup deleted B's
    (A failed with JobVanished, naming the old model as served). Each model has its own
    candidate now: A is overtaken (or had finished first), B is served, none is left."""
    with KServeStandIn(default_mode="RawDeployment", ready_after=40) as standin:
        serve_old_model(standin, accuracy=0.90)
        a_candidate = candidate_name("fashion-mnist", WORSE)
        results, errors, logs = _run_both(standin, {
            "better": lambda: _until(lambda: _exists(standin, a_candidate),
                                     "A's candidate")}, ready_timeout_seconds=30)
        check_writes(standin)
        assert not errors and set(results) == {"better", "worse"}, (errors, logs)
        assert results["better"].action is Action.PROMOTED, logs["better"]
        assert results["worse"].action in ("superseded", "promoted"), logs["worse"]
        assert _served(standin) == BETTER
        assert standin.answering(f"http://fashion-mnist-predictor.{NS}.svc.cluster.local")[0] \
            == BETTER
        assert [key for key in standin.objects if key[0] == "InferenceService"] == [
            ("InferenceService", NS, "fashion-mnist")]
