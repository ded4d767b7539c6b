"""What a deployment reports, on either backend: the one verdict on a served model
(:class:`Verification`, :meth:`Verification.judged` the one rule), how the rollout ended
(:class:`Action`) and the KServe rollout's result.

Frozen dataclasses inside ``serving/deploy``; each result's ``record`` is the one place it becomes
the dict the deploy and promote steps hand to KFP (the same keys and values the steps have always
recorded), and :func:`fmnist_kfp.kfp_components.outputs.publish` the one place that writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

from fmnist_kfp.serving.deploy.blessing import BlessingDecision

__all__ = ["Action", "RolloutResult", "SupersededResult", "Verification", "report_of"]


class Action(str, Enum):
    """How a deployment or an early promotion ended; the value is what the steps output.

    A ``str`` enum rather than ``enum.StrEnum``, which Python 3.10 (supported) does not have;
    ``__str__`` gives the value, so f-strings read the same on every version."""

    CREATED = "created"  # nothing was served: the model serves now
    UNCHANGED = "unchanged"  # the model was already served
    REJECTED = "rejected"  # not blessed: the serving model stays
    PROMOTED = "promoted"  # the model replaced the serving one
    ROLLED_BACK = "rolled_back"  # it failed verification: the previous model serves again
    CANDIDATE_FAILED = "candidate_failed"  # KServe Standard: the candidate failed, nothing changed
    FAILED = "failed"  # local: it failed verification and nothing was served before
    SUPERSEDED = "superseded"  # serve_early: a better model claimed the InferenceService

    def __str__(self) -> str:
        return self.value

    @classmethod
    def serving(cls, replaced: bool) -> Action:
        """A model that passed and now serves: it replaced one (``replaced``) or none."""
        return cls.PROMOTED if replaced else cls.CREATED

    @classmethod
    def undone(cls, replaced: bool) -> Action:
        """A model that failed verification, locally: the previous one serves again, or none."""
        return cls.ROLLED_BACK if replaced else cls.FAILED

    @property
    def serves_candidate(self) -> bool:
        """Whether the deployment now serves the model this rollout was for."""
        return self in (Action.CREATED, Action.PROMOTED, Action.UNCHANGED)

    @property
    def started_serving(self) -> bool:
        """Whether this rollout put the model into service (it was not served before)."""
        return self in (Action.CREATED, Action.PROMOTED)

    @property
    def failed_verification(self) -> bool:
        """Whether the model failed when served, so that it does not serve."""
        return self in (Action.ROLLED_BACK, Action.CANDIDATE_FAILED, Action.FAILED)


def report_of(found: Any) -> dict[str, Any]:
    """A verifier's answer as a plain record: a
    :class:`~fmnist_kfp.serving.deploy.verification.Comparison` (what the pipeline's verifier
    returns) through its ``as_dict``, any other mapping (a test's verifier) as it is."""
    as_dict = getattr(found, "as_dict", None)
    return dict(as_dict() if callable(as_dict) else found)


@dataclass(frozen=True)
class Verification:
    """One verification of a served model: what the verifier reported (at least ``ok`` and
    ``accuracy``; ``error`` when it could not finish) and whether that passes the rule
    (:meth:`judged`, the one rule: the KServe rollouts, the local deployer and the predict step
    all judge with it)."""

    report: Mapping[str, Any] = field(default_factory=dict)
    passed: bool = False

    @classmethod
    def judged(cls, found: Any, test_accuracy: float, tolerance: float) -> Verification:
        """The verifier's answer ``found`` (a Comparison or a mapping) judged: passed when ``ok``
        and its accuracy is at least what the model should score minus ``tolerance``. A
        verifier that scores a sample says what the model should score on that sample
        (``expected_accuracy``); the test-split accuracy is the yardstick otherwise."""
        report = report_of(found)
        accuracy = report.get("accuracy")
        expected = report.get("expected_accuracy", test_accuracy)
        passed = (report.get("ok") is True and isinstance(accuracy, int | float)
                  and accuracy >= expected - tolerance)
        return cls(report, passed)

    @classmethod
    def failed(cls, error: BaseException) -> Verification:
        """A verifier that could not reach the model: a failure."""
        return cls({"ok": False, "error": f"{type(error).__name__}: {error}"}, False)

    @classmethod
    def of(cls, check: Callable[[], Any], test_accuracy: float, tolerance: float
           ) -> Verification:
        """``check()`` (a verifier called on one address) :meth:`judged`; a check that raises
        could not reach the model, and fails (:meth:`failed`)."""
        try:
            return cls.judged(check(), test_accuracy, tolerance)
        except Exception as error:
            return cls.failed(error)

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
    """How one KServe rollout ended (``action``: created, unchanged, rejected, promoted,
    rolled_back, candidate_failed) and where the model is served."""

    BACKEND: ClassVar[str] = "kubernetes"

    action: Action
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

    def record(self) -> dict[str, Any]:
        """The record the deploy and promote steps hand to KFP: the fourteen fields, then the
        backend."""
        return {
            "action": self.action.value,
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
            "backend": self.BACKEND,
        }


@dataclass(frozen=True)
class SupersededResult:
    """An early promotion that stopped because a better model claimed the InferenceService
    meanwhile (:mod:`fmnist_kfp.serving.deploy.kserve_promotion`)."""

    reason: str
    storage_uri: str
    action: Action = Action.SUPERSEDED
    url: str = ""
    blessing: BlessingDecision | None = None  # none was decided for this model
    verification: Verification | None = None  # nor verified

    def record(self) -> dict[str, Any]:
        """The record the promote step hands to KFP."""
        return {"action": self.action.value, "reason": self.reason, "url": self.url,
                "storage_uri": self.storage_uri, "blessing": {}, "verification": {},
                "backend": RolloutResult.BACKEND}
