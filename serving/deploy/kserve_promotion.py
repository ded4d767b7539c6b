"""``serve_early`` on KServe: each model, as it finishes training, replaces the served one only
if it is better on validation, and two promotions racing (the ParallelFor iterations of a run
train at once) can never leave the worse model served.

Optimistic concurrency on the InferenceService, as the Kubernetes API offers it: every write is
a PUT carrying the ``resourceVersion`` of the read it was decided on, and the API server answers
409 Conflict when the object changed since (kubernetes/apiextensions-apiserver v0.36.3
``pkg/registry/customresource/strategy.go`` L268-271; the stand-in enforces it). On top of it:

1. **The claim.** A promotion reads the InferenceService, compares its validation accuracy with
   the claim there (annotations ``fmnist.kubeflow.org/early-*``, the model promoted early last
   and its validation accuracy; without one, the served model's test accuracy as blessing does:
   :func:`fmnist_kfp.serving.deploy.blessing.bless_early`), and, if better, writes its own claim
   with that read's ``resourceVersion``. A 409 means another write came first: it reads again and
   decides again. So claims only ever rise, and each was decided against the one before it.
2. **The guarded rollout.** Then the ordinary rollout of the InferenceService's mode runs
   (canary or candidate, verified with validation images, promoted or rolled back), with every
   write of it checking, on the very read whose ``resourceVersion`` it carries, that the claim
   is still its own (:meth:`EarlyClaim.check_current`). Once a better model has claimed, the
   worse one's next write is refused before it is sent, or answered 409 and then refused: it
   stops as ``superseded``, and the better promotion finishes. Claims are not model annotations,
   so rollout writes keep them as they are on the cluster.

A creation race (both find no InferenceService) is the same: the second create is answered 409
AlreadyExists, and that promotion reads again and decides against the first one's claim.
"""

from __future__ import annotations

import copy

from fmnist_kfp.kubernetes.inference_service import (
    ANNOTATION_EARLY_MODEL_TYPE,
    ANNOTATION_EARLY_MODEL_URI,
    ANNOTATION_EARLY_VALIDATION_ACCURACY,
    ANNOTATION_MODEL_URI,
    KServeSettings,
    annotations_of,
    format_accuracy,
    model_uri_of,
    served_accuracy,
)
from fmnist_kfp.kubernetes.runner import exception_chain
from fmnist_kfp.serving.deploy.blessing import bless_early
from fmnist_kfp.serving.deploy.kserve_api import Conflict, CreatedMeanwhile, KServeRolloutError
from fmnist_kfp.serving.deploy.kserve_deployer import prepare_rollout
from fmnist_kfp.serving.deploy.rollout_base import Log, Verify

CLAIM_ATTEMPTS = 10


class Superseded(KServeRolloutError):
    """Another promotion claimed the InferenceService with a better model meanwhile."""


def early_claim(isvc: dict) -> tuple[float | None, str, str]:
    """``(validation accuracy, model URI, model type)`` of the claim on ``isvc``; the
    accuracy is None without a (readable) claim."""
    annotations = annotations_of(isvc)
    try:
        accuracy = float(annotations[ANNOTATION_EARLY_VALIDATION_ACCURACY])
    except (KeyError, ValueError):
        accuracy = None
    return (accuracy, annotations.get(ANNOTATION_EARLY_MODEL_URI, ""),
            annotations.get(ANNOTATION_EARLY_MODEL_TYPE, ""))


class EarlyClaim:
    """Laid over a mode's rollout
    (:func:`~fmnist_kfp.serving.deploy.kserve_deployer.prepare_rollout`): every body carries the
    claim, no write goes out unless the claim on the cluster is still this one, and the served
    model's test accuracy is left unknown (selection measures it)."""

    claim: dict[str, str] = {}

    def build(self, model_annotations: dict[str, str], **kwargs) -> dict:
        return super().build({**model_annotations, **self.claim}, **kwargs)

    def stable_annotations(self, uri: str, accuracy: float) -> dict[str, str]:
        return {ANNOTATION_MODEL_URI: uri}

    def check_current(self, current: dict) -> None:
        accuracy, uri, model_type = early_claim(current)
        if uri != self.claim[ANNOTATION_EARLY_MODEL_URI]:
            raise Superseded(
                f"{self.where}: {model_type or uri} (validation accuracy {accuracy}) claimed it "
                "meanwhile; this promotion stops and leaves the better model to finish")


def _superseded(error: BaseException) -> Superseded | None:
    return next((e for e in exception_chain(error) if isinstance(e, Superseded)), None)


def promote_with_kserve(settings: KServeSettings, *, storage_uri: str,
                        validation_accuracy: float, model_type: str, tolerance: float,
                        verify: Verify, client=None, needs_credentials: bool = False,
                        poll_seconds: float = 5.0, log: Log = print,
                        attempts: int = CLAIM_ATTEMPTS) -> dict:
    """Promotes ``storage_uri`` if it is better on validation than the claim on the
    InferenceService (module docstring); returns the rollout's result record, its ``action``
    also ``rejected`` (not better), ``unchanged`` (already claimed by this model) or
    ``superseded`` (a better model claimed it during the rollout)."""
    claim = {ANNOTATION_EARLY_VALIDATION_ACCURACY: format_accuracy(validation_accuracy),
             ANNOTATION_EARLY_MODEL_URI: storage_uri, ANNOTATION_EARLY_MODEL_TYPE: model_type}
    for attempt in range(1, attempts + 1):
        rollout, current = prepare_rollout(
            settings, storage_uri=storage_uri, test_accuracy=validation_accuracy,
            tolerance=tolerance, verify=verify, client=client,
            needs_credentials=needs_credentials, poll_seconds=poll_seconds, log=log,
            mixin=EarlyClaim)
        rollout.claim = claim
        try:
            if current is None:
                decision = bless_early(validation_accuracy, None, None, tolerance)
                log(f"[kserve] serve_early: {model_type}: {decision.reason}")
                try:
                    return rollout.create()
                except CreatedMeanwhile as error:
                    log(f"[kserve] serve_early: {error}; deciding again")
                    continue
            claimed, claimed_uri, claimed_type = early_claim(current)
            served_test = served_accuracy(current)[0] if claimed is None else None
            decision = bless_early(validation_accuracy, claimed, served_test, tolerance)
            if storage_uri in (claimed_uri, model_uri_of(current)):
                return rollout.result("unchanged", decision, current,
                                      reason=f"{storage_uri} is already claimed or served")
            log(f"[kserve] serve_early: {model_type}: {decision.reason}"
                + (f" (claimed by {claimed_type})" if claimed_type else ""))
            if not decision.blessed:
                return rollout.result("rejected", decision, current, reason=decision.reason)
            body = copy.deepcopy(current)
            body["metadata"].setdefault("annotations", {}).update(claim)
            try:
                rollout.api.replace(body)  # the compare-and-swap: this read's resourceVersion
            except Conflict as error:
                log(f"[kserve] serve_early: {rollout.where} changed since it was read ({error});"
                    f" deciding again ({attempt}/{attempts})")
                continue
            api = rollout.api
            claimed_now = rollout.retrying(lambda: api.get(settings.name),  # noqa: B023
                                           f"read {settings.name}")
            return rollout.update(claimed_now, decision, model_uri_of(claimed_now))
        except Exception as error:  # the runner may wrap what a write raised
            superseded = _superseded(error)
            if superseded is None:
                raise
            log(f"[kserve] serve_early: {superseded}")
            return {"action": "superseded", "reason": str(superseded), "url": "",
                    "storage_uri": storage_uri, "blessing": {}, "verification": {}}
    raise KServeRolloutError(
        f"{settings.name}: the InferenceService kept changing under this promotion ({attempts} "
        "tries); is something else writing it?")
