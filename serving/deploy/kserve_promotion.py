"""``serve_early`` on KServe: each model, as it finishes training, replaces the served one only
if it is better on validation, and two promotions racing (the ParallelFor iterations of a run
train at once) can never leave the worse model served.

Optimistic concurrency, as the Kubernetes API offers it: every update is a PUT carrying the
``resourceVersion`` of the read it was decided on, and the API server answers 409 Conflict when
the object changed since (kubernetes/apiextensions-apiserver v0.36.3
``pkg/registry/customresource/strategy.go`` L268-271 for the InferenceService; the same
precondition for a ConfigMap, kubernetes/apiserver ``pkg/registry/generic/registry/store.go``
``Update``; the stand-in enforces it on every PUT).

**Where the claim lives.** Not on the InferenceService: KServe copies its annotations into the
Knative revision template and the Deployment's pod template (kserve v0.15.2
``pkg/controller/v1beta1/inferenceservice/components/predictor.go`` L99-101, L444-462;
``reconcilers/deployment/deployment_reconciler.go`` L141-155), so every claim write there rolled a
new revision (Serverless) or restarted the pods (Standard) of the model being served. KServe
does leave out the keys of ``serviceAnnotationDisallowedList`` (predictor.go v0.15.2 L99-101,
v0.16.0 L100-102), but that list is read from ``inferenceservice-config`` in KServe's own
namespace (``pkg/apis/serving/v1beta1/configmap.go`` v0.15.2 L87-91 and L192-204, v0.16.0
L97-101 and L231-243: the configured keys are appended to KServe's defaults, which hold none of
ours): a cluster administrator's edit that a pipeline step can neither make nor check. So the
claim is a ConfigMap ``<name>-serve-early`` beside the InferenceService (:func:`claim_name`),
which nothing copies anywhere, with the same compare-and-swap: its ``resourceVersion`` on
every update, 409 AlreadyExists on a second create.

1. **The claim.** A promotion reads the InferenceService and then the claim (its data: the model
   promoted early last, its validation accuracy, and the uid of the InferenceService it was
   made on, empty when made to create it and bound to the service's uid by the first
   promotion that finds the service there, its holder or another, on every path; a claim
   made on an InferenceService that is gone is void), compares
   (:func:`fmnist_kfp.serving.deploy.blessing.bless_early`; without a claim,
   the served model's test accuracy as blessing does), and, if better, writes its own claim
   with that read's ``resourceVersion`` (or creates it). A 409 means another promotion wrote
   first: it reads again and decides again. So claims only ever rise, and each was decided
   against the one before it.
2. **The guarded rollout.** Then the ordinary rollout of the InferenceService's mode runs, the
   create of a new InferenceService and its wait included, with :meth:`EarlyClaim.guard`
   reading the claim before every create, after the read each write's ``resourceVersion``
   comes from, and on every read a wait judges. A write decided on a read made before a better
   claim is refused (the guard's claim read comes after it) or answered 409 (a write since);
   a wait on an InferenceService that a better model took over meanwhile (nothing rolled out
   yet: KServe gives the latest revision all traffic, ``ksvc_reconciler.go`` v0.15.2 L115-147)
   stops before verifying the other model's revision. The overtaken promotion ends
   ``superseded``, and the better one finishes.

A creation race (both find no InferenceService) is the same: both claim, one after the other;
the second create is answered 409 (:class:`CreatedMeanwhile`) and that promotion, still
holding the claim, rolls its model out over the InferenceService the other created (or finds
it was overtaken). The claim of an InferenceService that was never created (its create
refused) is released.
"""

from __future__ import annotations

import time

from fmnist_kfp.kubernetes import keys
from fmnist_kfp.kubernetes.api_errors import exception_chain
from fmnist_kfp.kubernetes.inference_service import (
    ANNOTATION_EARLY_MODEL_TYPE,
    ANNOTATION_EARLY_MODEL_URI,
    ANNOTATION_EARLY_VALIDATION_ACCURACY,
    ANNOTATION_MODEL_URI,
    PART_OF_LABEL,
    annotations_of,
    format_accuracy,
    model_uri_of,
    served_accuracy,
)
from fmnist_kfp.serving.deploy.blessing import bless_early
from fmnist_kfp.serving.deploy.kserve_api import (
    Conflict,
    CreatedMeanwhile,
    KServeApi,
    KServeRolloutError,
    TransientApiError,
    retrying,
)
from fmnist_kfp.serving.deploy.kserve_deployer import prepare_rollout
from fmnist_kfp.serving.deploy.rollout_base import Log, Rollout, Verify
from fmnist_kfp.serving.deploy.rollout_result import RolloutResult, SupersededResult
from fmnist_kfp.settings.serving import KServeSettings

CLAIM_ATTEMPTS = 10
CLAIM_SUFFIX = "-serve-early"
CLAIM_LABEL = keys.key("serve-early-claim-of")
# The claim ConfigMap's data keys.
CLAIM_ACCURACY = "validation-accuracy"
CLAIM_MODEL_URI = "model-uri"
CLAIM_MODEL_TYPE = "model-type"
CLAIM_UID = "inference-service-uid"


class Superseded(KServeRolloutError):
    """Another promotion claimed the InferenceService with a better model meanwhile."""


def claim_name(name: str) -> str:
    """The claim ConfigMap of InferenceService ``name``."""
    return name + CLAIM_SUFFIX


def early_claim(isvc: dict) -> tuple[float | None, str, str]:
    """``(validation accuracy, model URI, model type)`` of a claim left in the InferenceService's
    annotations by an earlier version (read only where there is no claim ConfigMap); the
    accuracy is None without a (readable) claim."""
    annotations = annotations_of(isvc)
    try:
        accuracy = float(annotations[ANNOTATION_EARLY_VALIDATION_ACCURACY])
    except (KeyError, ValueError):
        accuracy = None
    return (accuracy, annotations.get(ANNOTATION_EARLY_MODEL_URI, ""),
            annotations.get(ANNOTATION_EARLY_MODEL_TYPE, ""))


def claim_of(config_map: dict | None, isvc: dict | None) -> tuple[float | None, str, str]:
    """``(validation accuracy, model URI, model type)`` of the claim in force: the ConfigMap's,
    unless made on an InferenceService that is no longer there (then none); without a
    ConfigMap, one an earlier version left in the annotations. The accuracy is None without
    a claim."""
    if config_map is None:
        return early_claim(isvc) if isvc is not None else (None, "", "")
    data = config_map.get("data") or {}
    uid = data.get(CLAIM_UID, "")
    if uid and uid != _uid(isvc):
        return None, "", ""  # made on an InferenceService deleted since
    try:
        accuracy = float(data[CLAIM_ACCURACY])
    except (KeyError, ValueError):
        return None, "", ""
    return accuracy, data.get(CLAIM_MODEL_URI, ""), data.get(CLAIM_MODEL_TYPE, "")


class EarlyClaim:
    """Laid over a mode's rollout
    (:func:`~fmnist_kfp.serving.deploy.kserve_deployer.prepare_rollout`): nothing is created or
    written, and no wait goes on, unless the claim on the cluster is still this model's; the
    served model's test accuracy is left unknown (selection measures it)."""

    claimed_uri: str = ""

    def stable_annotations(self, uri: str, accuracy: float) -> dict[str, str]:
        return {ANNOTATION_MODEL_URI: uri}

    def guard(self) -> None:
        self.held_claim()

    def held_claim(self) -> dict:
        """The claim ConfigMap, read now; raises :class:`Superseded` unless it is still this
        model's."""
        api: KServeApi = self.api
        name = claim_name(self.name)
        config_map = self.retrying(lambda: api.get_claim(name), f"read ConfigMap {name}")
        data = (config_map or {}).get("data") or {}
        if data.get(CLAIM_MODEL_URI) != self.claimed_uri:
            raise Superseded(
                f"{self.where}: {data.get(CLAIM_MODEL_TYPE) or data.get(CLAIM_MODEL_URI) or 'no'}"
                f" claim (validation accuracy {data.get(CLAIM_ACCURACY)}) replaced this one "
                "meanwhile; this promotion stops and leaves the better model to finish")
        return config_map


def _superseded(error: BaseException) -> Superseded | None:
    return next((e for e in exception_chain(error) if isinstance(e, Superseded)), None)


def promote_with_kserve(settings: KServeSettings, *, storage_uri: str,
                        validation_accuracy: float, model_type: str, tolerance: float,
                        verify: Verify, client=None, needs_credentials: bool = False,
                        poll_seconds: float = 5.0, log: Log = print,
                        attempts: int = CLAIM_ATTEMPTS) -> RolloutResult | SupersededResult:
    """Promotes ``storage_uri`` if it is better on validation than the claim on the
    InferenceService (module docstring); returns the rollout's result, its ``action`` also
    ``rejected`` (not better) or ``unchanged`` (already claimed by this model), or a
    :class:`SupersededResult` (a better model claimed it during the rollout)."""
    data = {CLAIM_ACCURACY: format_accuracy(validation_accuracy), CLAIM_MODEL_URI: storage_uri,
            CLAIM_MODEL_TYPE: model_type}
    held = False  # this call wrote the claim (and nobody has overtaken it since, last seen)
    decision = None
    for attempt in range(1, attempts + 1):
        rollout, current = prepare_rollout(
            settings, storage_uri=storage_uri, test_accuracy=validation_accuracy,
            tolerance=tolerance, verify=verify, client=client,
            needs_credentials=needs_credentials, poll_seconds=poll_seconds, log=log,
            mixin=EarlyClaim)
        rollout.claimed_uri = storage_uri
        api, name = rollout.api, claim_name(settings.name)
        try:
            config_map = (rollout.held_claim() if held  # still ours? (else Superseded)
                          else rollout.retrying(lambda: api.get_claim(name),  # noqa: B023
                                                f"read ConfigMap {name}"))
            config_map = _bind_unbound(rollout, config_map, current)
            if not held:
                claimed, claimed_uri, claimed_type = claim_of(config_map, current)
                served_test = (served_accuracy(current)[0]
                               if claimed is None and current is not None else None)
                decision = bless_early(validation_accuracy, claimed, served_test, tolerance)
                if current is not None and model_uri_of(current) == storage_uri:
                    return rollout.result("unchanged", decision, current,
                                          reason=f"{storage_uri} is already served")
                log(f"[kserve] serve_early: {model_type}: {decision.reason}"
                    + (f" (claimed by {claimed_type})" if claimed_type else ""))
                if claimed_uri == storage_uri:
                    # Claimed by this model already (a retried step, or a claim write that
                    # failed transiently after it was applied) but not served: roll it out.
                    log(f"[kserve] serve_early: {model_type} holds the claim already")
                    decision = bless_early(validation_accuracy, None, None, tolerance)
                else:
                    if not decision.blessed:
                        return rollout.result("rejected", decision, current,
                                              reason=decision.reason)
                    try:
                        _write_claim(api, settings, config_map,
                                     {**data, CLAIM_UID: _uid(current)})
                    except Conflict as error:
                        log(f"[kserve] serve_early: {rollout.where} changed since it was read "
                            f"(its claim: {error}); deciding again ({attempt}/{attempts})")
                        continue
                    except TransientApiError as error:
                        # It may have been written: whether it is ours now, a fresh read says.
                        log(f"[kserve] serve_early: writing the claim failed transiently "
                            f"({error}); reading it again ({attempt}/{attempts})")
                        time.sleep(poll_seconds * attempt)
                        continue
                held = True
            if current is None:
                try:
                    result = rollout.create()
                except CreatedMeanwhile as error:
                    log(f"[kserve] serve_early: {error}; this model holds the claim, so it "
                        "rolls out over that one")
                    continue
                except Exception:
                    _release(rollout, data)
                    raise
                _bind(rollout, data)
                return result
            return rollout.update(current, decision, model_uri_of(current))
        except Exception as error:  # the runner may wrap what a write raised
            superseded = _superseded(error)
            if superseded is None:
                raise
            log(f"[kserve] serve_early: {superseded}")
            return SupersededResult(reason=str(superseded), storage_uri=storage_uri)
    raise KServeRolloutError(
        f"{settings.name}: the InferenceService kept changing under this promotion ({attempts} "
        "tries); is something else writing it?")


def _write_claim(api: KServeApi, settings: KServeSettings, config_map: dict | None,
                 data: dict[str, str]) -> dict:
    """The compare-and-swap: creates the claim ConfigMap (409 if another promotion created it
    since ``config_map`` was read as absent), or replaces it with that read's
    ``resourceVersion`` (409 if written since). Both raise :class:`Conflict`."""
    if config_map is None:
        return api.create_claim({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": claim_name(settings.name), "namespace": api.namespace,
                         "labels": {**PART_OF_LABEL, CLAIM_LABEL: settings.name}},
            "data": data})
    metadata = {key: value for key, value in config_map["metadata"].items()
                if key != "managedFields"}
    return api.replace_claim({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
                              "data": data})


def _swap_if_ours(rollout: Rollout, data: dict[str, str], new: dict[str, str], why: str) -> None:
    """Best effort: replaces the claim with ``new`` if it is still this model's."""
    api, name = rollout.api, claim_name(rollout.name)
    try:
        config_map = api.get_claim(name)
        held = (config_map or {}).get("data") or {}
        if held.get(CLAIM_MODEL_URI) != data[CLAIM_MODEL_URI] or held == new:
            return
        _write_claim(api, rollout.settings, config_map, new)
        rollout.log(f"[kserve] serve_early: {why}")
    except Exception as error:  # a claim left as it is is only less precise
        rollout.log(f"[kserve] serve_early: could not update ConfigMap {name} ({error})")


def _uid(isvc: dict | None) -> str:
    return ((isvc or {}).get("metadata") or {}).get("uid") or ""


def _bind(rollout: Rollout, data: dict[str, str]) -> None:
    """Records the uid of the InferenceService just created in this model's claim: a claim
    then dies with its InferenceService (:func:`claim_of`). The service is made already: a
    read answered transiently is asked again, and one that still fails leaves the claim
    unbound rather than failing a promotion that served its model."""
    try:
        isvc = retrying(rollout.api.get, rollout.name)
    except Exception as error:
        rollout.log(f"[kserve] serve_early: could not read {rollout.where} to bind the claim "
                    f"to it ({error}); the claim stays unbound")
        return
    if uid := _uid(isvc):
        _swap_if_ours(rollout, data, {**data, CLAIM_UID: uid},
                      f"the claim is bound to {rollout.where} ({uid})")


def _bind_unbound(rollout: Rollout, config_map: dict | None, isvc: dict | None) -> dict | None:
    """A claim read with no uid while the InferenceService exists, this promotion's or
    another's: made before any service was, so this one was created since, to serve it (or a
    racing promotion's was, that its holder rolls out over: a 409 ``CreatedMeanwhile``, a
    retried step). Bound to it here, on every path that reads the claim, with the read's
    ``resourceVersion``, so that it dies with the service even if its holder stopped before
    binding it; a conflict leaves it to whoever wrote since. Returns the claim as it now is."""
    data = (config_map or {}).get("data") or {}
    if config_map is None or not data or data.get(CLAIM_UID) or not _uid(isvc):
        return config_map
    try:
        bound = _write_claim(rollout.api, rollout.settings, config_map,
                             {**data, CLAIM_UID: _uid(isvc)})
    except (Conflict, TransientApiError) as error:
        rollout.log(f"[kserve] serve_early: could not bind the claim to {rollout.where} "
                    f"({error}); deciding on it as read")
        return config_map
    rollout.log(f"[kserve] serve_early: bound the claim left unbound to {rollout.where} "
                f"({_uid(isvc)})")
    return bound


def _release(rollout: Rollout, data: dict[str, str]) -> None:
    """A create that failed with nothing created leaves no claim behind to reject later
    models with."""
    try:
        if rollout.api.get(rollout.name) is not None:
            return
    except Exception:
        return
    _swap_if_ours(rollout, data, {}, f"released the claim: {rollout.where} was not created")
