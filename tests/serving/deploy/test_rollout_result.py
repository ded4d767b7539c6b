"""A rollout's result and verification are dataclasses in ``serving/deploy``; the record the
steps hand to KFP is the one it always was: the same keys, in the same order, the same values."""

from __future__ import annotations

import json

from fmnist_kfp.serving.deploy.blessing import bless
from fmnist_kfp.serving.deploy.rollout_result import RolloutResult, SupersededResult, Verification


def test_a_rollout_result_is_recorded_as_the_fourteen_key_record():
    decision = bless(0.91, 0.90, 0.005)
    verification = Verification.judged({"ok": True, "accuracy": 0.905}, 0.91, 0.005)
    result = RolloutResult(
        action="promoted", blessing=decision, url="http://a", external_url="http://b",
        canary_url="http://c", verification=verification, namespace="ns", name="fm",
        mode="Serverless", runtime="fmnist-predictor", storage_uri="pvc://d/m",
        service_account=None, canary_traffic_percent=10, reason="why")
    record = result.as_dict()
    assert json.dumps(record) == json.dumps({
        "action": "promoted", "blessing": decision.as_dict(), "url": "http://a",
        "external_url": "http://b", "canary_url": "http://c",
        "verification": {"ok": True, "accuracy": 0.905, "passed": True}, "namespace": "ns",
        "name": "fm", "mode": "Serverless", "runtime": "fmnist-predictor",
        "storage_uri": "pvc://d/m", "service_account": None, "canary_traffic_percent": 10,
        "reason": "why"})
    assert RolloutResult(**{**result.__dict__, "verification": None}).as_dict()[
        "verification"] is None


def test_verification_is_judged_against_the_expected_accuracy_less_the_tolerance():
    assert not Verification.judged({"ok": True, "accuracy": 0.905}, 0.92, 0.01).passed
    assert Verification.judged({"ok": True, "accuracy": 0.80, "expected_accuracy": 0.805},
                               0.92, 0.01).passed
    assert not Verification.judged({"ok": False, "accuracy": 0.99}, 0.92, 0.01).passed
    failed = Verification.failed(ConnectionError("connection refused"))
    assert failed.as_dict() == {"ok": False, "error": "ConnectionError: connection refused",
                                "passed": False}
    assert failed.describe() == "ConnectionError: connection refused"


def test_a_superseded_promotion_is_recorded_as_before():
    assert json.dumps(SupersededResult(reason="r", storage_uri="s3://b/m").as_dict()) == \
        json.dumps({"action": "superseded", "reason": "r", "url": "", "storage_uri": "s3://b/m",
                    "blessing": {}, "verification": {}})
