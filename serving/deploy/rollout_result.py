"""What a KServe rollout reports: the verification of a served model and the rollout's result.

Both are frozen dataclasses inside ``serving/deploy``; :meth:`RolloutResult.as_dict` is the one
place they become the dict the deploy and promote steps hand to KFP (the same keys and values
the steps have always recorded).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fmnist_kfp.serving.deploy.blessing import BlessingDecision

__all__ = ["RolloutResult", "SupersededResult", "Verification", "report_of"]


def report_of(found: Any) -> dict[str, Any]:
    """A verifier's answer as a plain record: a
    :class:`~fmnist_kfp.serving.deploy.verification.Comparison` (what the pipeline's verifier
    returns) through its ``as_dict``, any other mapping (a test's verifier) as it is."""
    as_dict = getattr(found, "as_dict", None)
    return dict(as_dict() if callable(as_dict) else found)


@dataclass(frozen=True)
class Verification:
    """One verification of a served model: what the verifier reported (at least ``ok`` and
    ``accuracy``; ``error`` when it could not finish) and whether that passes the rule."""

    report: Mapping[str, Any] = field(default_factory=dict)
    passed: bool = False

    @classmethod
    def judged(cls, report: Mapping[str, Any], test_accuracy: float,
               tolerance: float) -> Verification:
        """``report`` judged: passed when ``ok`` and its accuracy is at least what the model
        should score minus ``tolerance``. A verifier that scores a sample says what the model
        should score on that sample (``expected_accuracy``); the test-split accuracy is the
        yardstick otherwise."""
        accuracy = report.get("accuracy")
        expected = report.get("expected_accuracy", test_accuracy)
        passed = (report.get("ok") is True and isinstance(accuracy, int | float)
                  and accuracy >= expected - tolerance)
        return cls(dict(report), passed)

    @classmethod
    def failed(cls, error: BaseException) -> Verification:
        """A verifier that could not reach the model: a failure."""
        return cls({"ok": False, "error": f"{type(error).__name__}: {error}"}, False)

    def describe(self) -> str:
        """One line for logs and errors."""
        report = self.report
        if "error" in report:
            return str(report["error"])
        errors = report.get("errors") or []
        return (f"ok={report.get('ok')}, accuracy={report.get('accuracy')}, "
                f"failures={report.get('failures')}/{report.get('requests')}"
                + (f", agreement={report['agreement']:.4f}"
                   if isinstance(report.get("agreement"), int | float) else "")
                + (f", first error: {errors[0]}" if errors else ""))

    def as_dict(self) -> dict[str, Any]:
        """The report with ``passed`` added, as the steps record it."""
        return {**self.report, "passed": self.passed}


@dataclass(frozen=True)
class RolloutResult:
    """How one rollout ended (``action``: created, unchanged, rejected, promoted,
    rolled_back, candidate_failed) and where the model is served."""

    action: str
    blessing: BlessingDecision
    url: str | None
    external_url: str | None
    canary_url: str | None
    verification: Verification | None
    namespace: str
    name: str
    mode: str
    runtime: str
    storage_uri: str
    service_account: str | None
    canary_traffic_percent: int | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """The record the steps hand to KFP."""
        return {
            "action": self.action,
            "blessing": self.blessing.as_dict(),
            "url": self.url,
            "external_url": self.external_url,
            "canary_url": self.canary_url,
            "verification": None if self.verification is None else self.verification.as_dict(),
            "namespace": self.namespace,
            "name": self.name,
            "mode": self.mode,
            "runtime": self.runtime,
            "storage_uri": self.storage_uri,
            "service_account": self.service_account,
            "canary_traffic_percent": self.canary_traffic_percent,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class SupersededResult:
    """An early promotion that stopped because a better model claimed the InferenceService
    meanwhile (:mod:`fmnist_kfp.serving.deploy.kserve_promotion`)."""

    reason: str
    storage_uri: str
    action: str = "superseded"
    url: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The record the promote step hands to KFP."""
        return {"action": self.action, "reason": self.reason, "url": self.url,
                "storage_uri": self.storage_uri, "blessing": {}, "verification": {}}
