"""What a deployment reports, on either backend: dataclasses in ``serving/deploy`` whose records
are the ones the steps always handed to KFP (the same keys, in the same order, the same values),
the rollout's action an enum of the strings the steps output, and one verification rule that the
KServe rollout, the local deployer and the predict step all follow."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from fmnist_kfp.kfp_components.predict import step as predict
from fmnist_kfp.serving.deploy import local_deployer
from fmnist_kfp.serving.deploy.blessing import bless, bless_early
from fmnist_kfp.serving.deploy.kserve_api import KServeRolloutError
from fmnist_kfp.serving.deploy.local_deployer import (
    LocalDeployment,
    LocalPromotion,
    LocalServer,
    deploy_locally,
    promote_locally,
)
from fmnist_kfp.serving.deploy.rollout_result import (
    Action,
    RolloutResult,
    SupersededResult,
    Verification,
)
from fmnist_kfp.serving.deploy.verification import PROBABILITY_TOLERANCE, Comparison
from tests.serving.deploy.test_kserve_rollout import OLD, Verifier, check_writes, deploy
from tests.standins.kserve import KServeStandIn


def test_a_rollout_result_is_recorded_as_the_fourteen_key_record_and_its_backend():
    decision = bless(0.91, 0.90, 0.005)
    verification = Verification.judged({"ok": True, "accuracy": 0.905}, 0.91, 0.005)
    result = RolloutResult(
        action=Action.PROMOTED, blessing=decision, url="http://a", external_url="http://b",
        canary_url="http://c", verification=verification, namespace="ns", name="fm",
        mode="Serverless", runtime="fmnist-predictor", storage_uri="pvc://d/m",
        service_account=None, canary_traffic_percent=10, reason="why")
    record = result.record()
    assert json.dumps(record) == json.dumps({
        "action": "promoted", "blessing": decision.as_dict(), "url": "http://a",
        "external_url": "http://b", "canary_url": "http://c",
        "verification": {"ok": True, "accuracy": 0.905, "passed": True}, "namespace": "ns",
        "name": "fm", "mode": "Serverless", "runtime": "fmnist-predictor",
        "storage_uri": "pvc://d/m", "service_account": None, "canary_traffic_percent": 10,
        "reason": "why", "backend": "kubernetes"})
    assert type(record["action"]) is str  # a plain string in KFP's outputs and the JSON
    assert RolloutResult(**{**result.__dict__, "verification": None}).record()[
        "verification"] is None


def test_verification_is_judged_against_the_expected_accuracy_less_the_tolerance():
    assert not Verification.judged({"ok": True, "accuracy": 0.905}, 0.92, 0.01).passed
    assert Verification.judged({"ok": True, "accuracy": 0.80, "expected_accuracy": 0.805},
                               0.92, 0.01).passed
    assert not Verification.judged({"ok": False, "accuracy": 0.99}, 0.92, 0.01).passed
    assert not Verification.judged({"ok": True}, 0.92, 0.01).passed  # no accuracy: no pass
    failed = Verification.failed(ConnectionError("connection refused"))
    assert failed.as_dict() == {"ok": False, "error": "ConnectionError: connection refused",
                                "passed": False}
    assert failed.describe() == "ConnectionError: connection refused"


def test_a_check_that_raises_is_a_failed_verification():
    def unreachable():
        raise ConnectionError("connection refused")

    assert Verification.of(unreachable, 0.9, 0.005) == \
        Verification.failed(ConnectionError("connection refused"))
    assert Verification.of(lambda: {"ok": True, "accuracy": 0.9}, 0.9, 0.005).passed


def test_a_superseded_promotion_is_recorded_as_before():
    assert json.dumps(SupersededResult(reason="r", storage_uri="s3://b/m").record()) == \
        json.dumps({"action": "superseded", "reason": "r", "url": "", "storage_uri": "s3://b/m",
                    "blessing": {}, "verification": {}, "backend": "kubernetes"})


def test_the_actions_are_the_strings_the_steps_output():
    assert [action.value for action in Action] == [
        "created", "unchanged", "rejected", "promoted", "rolled_back", "candidate_failed",
        "failed", "superseded"]
    assert [a for a in Action if a.serves_candidate] == [
        Action.CREATED, Action.UNCHANGED, Action.PROMOTED]
    assert [a for a in Action if a.started_serving] == [Action.CREATED, Action.PROMOTED]
    assert [a for a in Action if a.failed_verification] == [
        Action.ROLLED_BACK, Action.CANDIDATE_FAILED, Action.FAILED]
    assert f"{Action.ROLLED_BACK}" == "rolled_back" and Action.CREATED == "created"


def test_local_results_are_recorded_with_the_verdict_as_kserve_rollouts_are():
    report = {"ok": True, "accuracy": 0.9}
    deployment = LocalDeployment(
        name="fm", action=Action.CREATED, url="http://127.0.0.1:1",
        blessing=bless(0.9, None, 0.005), previous_url="",
        verification=Verification.judged(report, 0.9, 0.005))
    assert json.dumps(deployment.record()) == json.dumps({
        "name": "fm", "backend": "local", "blessing": bless(0.9, None, 0.005).as_dict(),
        "previous_url": "", "action": "created", "url": "http://127.0.0.1:1",
        "verification": {**report, "passed": True}})  # the verdict beside the report
    early = bless_early(0.9, 0.8, None, 0.005)
    promotion = LocalPromotion(
        name="fm", action=Action.REJECTED, url="http://127.0.0.1:2", blessing=early,
        previous_url="http://127.0.0.1:2", verification=None, model_type="basic",
        previous_model_type="batchnorm")
    assert json.dumps(promotion.record()) == json.dumps({
        "name": "fm", "backend": "local", "blessing": early.as_dict(), "model_type": "basic",
        "previous_url": "http://127.0.0.1:2", "previous_model_type": "batchnorm",
        "action": "rejected", "url": "http://127.0.0.1:2", "verification": {}})


# -- one rule -------------------------------------------------------------------------------

SHORT = 0.003  # what each served model scores below its yardstick: within 0.005, not within 0


@pytest.fixture
def sleeper():
    """A process to stand for a local model server (stopped when it fails verification)."""
    processes: list[subprocess.Popen] = []

    def start(name: str, model_dir: str, **kwargs) -> LocalServer:
        process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        processes.append(process)
        return LocalServer(name=name, url="http://127.0.0.1:9", port=9, pid=process.pid,
                           model_dir=model_dir, model_fingerprint="candidate",
                           test_accuracy=kwargs.get("test_accuracy"), log_file="",
                           started=time.time())

    yield start
    for process in processes:
        process.kill()
        process.wait()


def _kserve_passed(accuracy: float) -> bool:
    with KServeStandIn() as standin:
        try:
            result = deploy(standin, OLD, accuracy, Verifier(standin, {OLD: accuracy - SHORT}))
        except KServeRolloutError as error:  # created, but failed: nothing to roll back to
            result = error.result
        check_writes(standin)
    assert result.action is Action.CREATED
    return result.verification.passed


def _local_passed(tmp_path, monkeypatch, start, accuracy: float) -> bool:
    monkeypatch.setenv(local_deployer.STATE_DIR_ENV, str(tmp_path / "deployments"))
    monkeypatch.setattr(local_deployer, "model_fingerprint", lambda model_dir: "candidate")
    monkeypatch.setattr(local_deployer, "start_server", start)
    verify = lambda url: {"ok": True, "accuracy": accuracy - SHORT,  # noqa: E731
                          "expected_accuracy": accuracy}
    deployed = deploy_locally("first", "m", accuracy, tolerance=0.005, verify=verify,
                              log=lambda line: None)
    promoted = promote_locally("early", "m", accuracy, model_type="basic", tolerance=0.005,
                               verify=verify, start=start, log=lambda line: None)
    assert deployed.verification.passed == promoted.verification.passed
    assert deployed.action in (Action.CREATED, Action.FAILED)
    assert deployed.action.serves_candidate == deployed.verification.passed
    assert promoted.action.serves_candidate == promoted.verification.passed
    return deployed.verification.passed


def _predict_passed(monkeypatch, accuracy: float) -> bool:
    served = Comparison(
        url="http://127.0.0.1:9", requests=13, failures=0, images=200, correct=0,
        accuracy=accuracy - SHORT, seconds=0.5, errors=[], ok=True, agreement=0.995,
        near_ties=1, unexplained_disagreements=0, max_probability_difference=3e-7,
        probability_tolerance=PROBABILITY_TOLERANCE, expected_accuracy=accuracy)
    monkeypatch.setattr(predict, "test_sample", lambda *a, **k: (np.zeros(1), np.zeros(1)))
    monkeypatch.setattr(predict, "model_probabilities", lambda *a, **k: None)
    monkeypatch.setattr(predict, "compare", lambda *a, **k: served)
    try:
        predict.predict_step(model_dir="m", data_dir="d", url=served.url, model_name="fm",
                             sample_size=200, serves_model=True, log=lambda line: None)
    except predict.ServedModelMismatch:
        return False
    return True


@pytest.mark.parametrize("strict", [False, True], ids=["the rule", "no tolerance"])
def test_changing_the_one_rule_changes_every_path(strict, tmp_path, monkeypatch, sleeper):
    """Each path's served model scores 0.003 below what it should: the rule's tolerance
    (0.005) lets it pass. Changed once, in :meth:`Verification.judged`, to allow nothing
    less, the KServe rollout, the local deployer (deploy and serve_early) and the predict step
    all fail it."""
    if strict:
        rule = Verification.judged.__func__
        monkeypatch.setattr(Verification, "judged", classmethod(
            lambda cls, found, test_accuracy, tolerance: rule(cls, found, test_accuracy, 0.0)))
    verdicts = {"kserve": _kserve_passed(0.91),
                "local": _local_passed(tmp_path, monkeypatch, sleeper, 0.91),
                "predict": _predict_passed(monkeypatch, 0.91)}
    assert verdicts == dict.fromkeys(verdicts, not strict)
