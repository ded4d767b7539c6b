"""serve_early on KServe (issue 23): promotions against the KServe stand-in
(``tests.standins.kserve``: the API server's resourceVersion rule, 409 on a stale write, and
KServe's controller over Knative), one after another and racing. The race forces both
promotions to read the InferenceService before either writes, then lets one claim first: in
both orders the better model ends up served, and the worse one is rejected or superseded."""

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
    model_uri_of,
)
from fmnist_kfp.serving.deploy import kserve_api
from fmnist_kfp.serving.deploy.kserve_promotion import promote_with_kserve
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


def _promote(standin, uri: str, model_type: str, logs: list | None = None,
             client=None) -> dict:
    return promote_with_kserve(
        settings(), storage_uri=uri, validation_accuracy=ACCURACY[uri], model_type=model_type,
        tolerance=0.005, verify=Verifier(standin, ACCURACY),
        client=client or standin.kserve_client(NS),
        poll_seconds=0.005, log=(logs.append if logs is not None else lambda line: None))


def _served(standin) -> str | None:
    return model_uri_of(standin.isvc())


def test_promotions_one_after_another_serve_each_better_model_and_reject_a_worse_one(standin):
    first = _promote(standin, WORSE, "basic")
    assert first["action"] == "created" and _served(standin) == WORSE
    annotations = standin.isvc()["metadata"]["annotations"]
    assert annotations[ANNOTATION_EARLY_VALIDATION_ACCURACY] == "0.918800"
    assert annotations[ANNOTATION_EARLY_MODEL_TYPE] == "basic"
    # The test split is not read for it: no test accuracy recorded.
    assert ANNOTATION_TEST_ACCURACY not in annotations
    second = _promote(standin, BETTER, "batchnorm")
    assert second["action"] == "promoted" and _served(standin) == BETTER
    assert standin.isvc()["metadata"]["annotations"][ANNOTATION_EARLY_MODEL_URI] == BETTER
    third = _promote(standin, WORSE, "basic")
    assert third["action"] == "rejected" and _served(standin) == BETTER
    assert "0.9188" in third["reason"] and "0.9312" in third["reason"]


def test_an_ordinarily_deployed_model_is_beaten_only_within_the_blessing_tolerance(standin):
    serve_old_model(standin, accuracy=0.95)  # test accuracy 0.95 on record, no claim
    result = _promote(standin, BETTER, "batchnorm")
    assert result["action"] == "rejected" and _served(standin) == OLD


class _ReadBarrier:
    """Holds each promotion's first read of the InferenceService until both have read it, then
    lets them go after their own delay: both decide on the same state, one writes first."""

    def __init__(self, delays: dict[str, float]):
        self.barrier = threading.Barrier(len(delays))
        self.delays = delays
        self.seen: set[str] = set()
        self.real_get = kserve_api.KServeApi.get

    def get(self, api, name: str, *, absent_ok: bool = True):
        result = self.real_get(api, name, absent_ok=absent_ok)
        who = threading.current_thread().name
        if who in self.delays and who not in self.seen and name == "fashion-mnist":
            self.seen.add(who)
            self.barrier.wait(timeout=60)
            time.sleep(self.delays[who])
        return result


@pytest.mark.parametrize("first", ["better", "worse"])
def test_racing_promotions_never_leave_the_worse_model_served(standin, monkeypatch, first):
    serve_old_model(standin, accuracy=0.90)
    gate = _ReadBarrier({"better": 0.0 if first == "better" else 0.3,
                         "worse": 0.0 if first == "worse" else 0.3})
    monkeypatch.setattr(kserve_api.KServeApi, "get",
                        lambda api, name, absent_ok=True: gate.get(api, name,
                                                                   absent_ok=absent_ok))
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
    assert annotations[ANNOTATION_EARLY_MODEL_URI] == BETTER
    assert annotations[ANNOTATION_MODEL_URI] == BETTER
    assert results["better"]["action"] == "promoted", logs["better"]
    # Both read the old model; one claimed first, so the other's write was answered 409.
    loser = "worse" if first == "better" else "better"
    assert any("changed since it was read" in line for line in logs[loser]), logs[loser]
    if first == "better":
        assert results["worse"]["action"] == "rejected"
    else:  # the worse one claimed first; the better one overtook it
        assert results["worse"]["action"] in ("superseded", "promoted")
