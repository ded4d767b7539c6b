"""Model blessing: deploy a new model only when it is not worse than the one being served.

As TFX's Evaluator does with a baseline: the candidate is blessed when its test accuracy is at
least the serving model's minus a tolerance, or when nothing is being served yet.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from fmnist_kfp.settings.serving import check_tolerance


@dataclass(frozen=True)
class BlessingDecision:
    blessed: bool
    candidate_accuracy: float
    serving_accuracy: float | None  # None: nothing served yet
    tolerance: float
    reason: str

    def as_dict(self) -> dict:
        return asdict(self)


# Why a first model is blessed: read after the action ("created: nothing was served before").
NOTHING_SERVED = "nothing was served before"


def bless(candidate_accuracy: float, serving_accuracy: float | None,
          tolerance: float) -> BlessingDecision:
    """Decides whether the candidate may replace the serving model."""
    check_tolerance(tolerance)
    if serving_accuracy is None:
        return BlessingDecision(True, candidate_accuracy, None, tolerance,
                                NOTHING_SERVED)
    threshold = serving_accuracy - tolerance
    if candidate_accuracy >= threshold:
        reason = (f"test accuracy {candidate_accuracy:.4f} >= serving {serving_accuracy:.4f} "
                  f"- tolerance {tolerance:.4f}")
        return BlessingDecision(True, candidate_accuracy, serving_accuracy, tolerance, reason)
    reason = (f"test accuracy {candidate_accuracy:.4f} < serving {serving_accuracy:.4f} "
              f"- tolerance {tolerance:.4f}: the serving model stays")
    return BlessingDecision(False, candidate_accuracy, serving_accuracy, tolerance, reason)


def bless_early(candidate_validation: float, served_validation: float | None,
                served_test: float | None, tolerance: float) -> BlessingDecision:
    """``serve_early``: may a model that just finished training replace the served one?

    Blessed when nothing is served, or when its validation accuracy is strictly above the
    served model's (a tie keeps the model already serving). A model served by an ordinary
    deployment has a test accuracy only: the candidate must then reach it minus the tolerance,
    as :func:`bless` asks. The final selection confirms the best either way."""
    check_tolerance(tolerance)
    if served_validation is None and served_test is None:
        return BlessingDecision(True, candidate_validation, None, tolerance,
                                NOTHING_SERVED)
    if served_validation is not None:
        better = candidate_validation > served_validation
        comparison = (f"validation accuracy {candidate_validation:.4f} "
                      f"{'>' if better else '<='} served {served_validation:.4f}")
        return BlessingDecision(better, candidate_validation, served_validation, 0.0,
                                comparison + ("" if better else ": the serving model stays"))
    decision = bless(candidate_validation, served_test, tolerance)
    return BlessingDecision(decision.blessed, candidate_validation, served_test, tolerance,
                            "validation " + decision.reason.replace("serving", "served test"))
