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
   made on, empty when made to create it and bound to the service's uid (:func:`_bind`, on
   every path) by the first promotion that finds the service there, its holder or another,
   or that made it, even if its model then failed; a claim made on an InferenceService that
   is gone is void), compares
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
refused) is released; one created whose model then failed keeps it, bound to it.
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
)
from fmnist_kfp.serving.deploy.kserve_deployer import prepare_rollout
from fmnist_kfp.serving.deploy.rollout_base import Acceptance, Candidate, Log, Rollout
from fmnist_kfp.serving.deploy.rollout_result import Action, RolloutResult, SupersededResult
from fmnist_kfp.settings.serving import KServeSettings

CLAIM_ATTEMPTS = 10
BIND_ATTEMPTS = 5
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


class EarlyClaim(Rollout):
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


def promote_with_kserve(settings: KServeSettings, candidate: Candidate, acceptance: Acceptance,
                        *, client=None, poll_seconds: float = 5.0, log: Log = print,
                        attempts: int = CLAIM_ATTEMPTS) -> RolloutResult | SupersededResult:
    """Promotes ``candidate`` (its accuracy: the validation split's) if it is better on
    validation than the claim on the InferenceService (module docstring); returns the
    rollout's result, its ``action`` also ``rejected`` (not better) or ``unchanged`` (already
    claimed by this model), or a :class:`SupersededResult` (a better model claimed it during
    the rollout)."""
    storage_uri, validation_accuracy = candidate.storage_uri, candidate.accuracy
    model_type, tolerance = candidate.model_type, acceptance.tolerance
    data = {CLAIM_ACCURACY: format_accuracy(validation_accuracy), CLAIM_MODEL_URI: storage_uri,
            CLAIM_MODEL_TYPE: model_type}
    held = False  # this call wrote the claim (and nobody has overtaken it since, last seen)
    decision = None
    for attempt in range(1, attempts + 1):
        rollout, current = prepare_rollout(settings, candidate, acceptance, client=client,
                                           poll_seconds=poll_seconds, log=log,
                                           mixin=EarlyClaim)
        assert isinstance(rollout, EarlyClaim), "EarlyClaim is laid over the mode's rollout"
        rollout.claimed_uri = storage_uri
        api, name = rollout.api, claim_name(settings.name)
        try:
            config_map = (rollout.held_claim() if held  # still ours? (else Superseded)
                          else rollout.retrying(lambda: api.get_claim(name),  # noqa: B023
                                                f"read ConfigMap {name}"))
            config_map = _bind(rollout, current, config_map)
            if not held:
                claimed, claimed_uri, claimed_type = claim_of(config_map, current)
                served_test = (served_accuracy(current)[0]
                               if claimed is None and current is not None else None)
                decision = bless_early(validation_accuracy, claimed, served_test, tolerance)
                if current is not None and model_uri_of(current) == storage_uri:
                    return rollout.result(Action.UNCHANGED, decision, current,
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
                        return rollout.result(Action.REJECTED, decision, current,
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
                except CreatedMeanwhile as error:  # the next read binds the claim to that one
                    log(f"[kserve] serve_early: {error}; this model holds the claim, so it "
                        "rolls out over that one")
                    continue
                except Exception:  # a service made but failing stays, and so does its claim
                    _bind_or_release(rollout, data)
                    raise
                _bind_or_release(rollout, data)
                return result
            assert decision is not None, "decided before this call held the claim"
            return rollout.update(current, decision, model_uri_of(current))
        except Exception as error:  # the runner may wrap what a write raised
            superseded = _superseded(error)
            if superseded is None:
                raise
            log(f"[kserve] serve_early: {superseded}")
            return SupersededResult(reason=str(superseded), storage_uri=storage_uri)
    _bind_or_release(rollout, data)  # after a last 409 CreatedMeanwhile: not left unbound
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


def _bind(rollout: Rollout, isvc: dict | None, config_map: dict | None) -> dict | None:
    """The one place a claim is bound: a claim holding no uid (made while no InferenceService
    existed) is given ``isvc``'s, the service it was made to serve (this promotion's, or one
    created meanwhile that its holder rolls out over), so that it dies with that service
    (:func:`claim_of`). Every path calls it: on each claim read of :func:`promote_with_kserve`
    (a holder's too) and after a create, whether it succeeded or failed. A 409 or a transient
    failure is read again and decided again (the write may have applied); one that persists
    leaves the claim unbound, with a log line, for the next promotion to bind. Returns the
    claim as it now is."""
    api, name = rollout.api, claim_name(rollout.name)
    for attempt in range(1, BIND_ATTEMPTS + 1):
        data = (config_map or {}).get("data") or {}
        uid = _uid(isvc)
        if not data or data.get(CLAIM_UID) or not uid:
            return config_map
        try:
            bound = _write_claim(api, rollout.settings, config_map, {**data, CLAIM_UID: uid})
        except (Conflict, TransientApiError) as error:
            rollout.log(f"[kserve] serve_early: binding the claim to {rollout.where} failed "
                        f"({error}); reading it again ({attempt}/{BIND_ATTEMPTS})")
            if isinstance(error, TransientApiError):
                time.sleep(rollout.poll_seconds * attempt)
            try:
                config_map = rollout.retrying(lambda: api.get_claim(name),
                                              f"read ConfigMap {name}")
            except TransientApiError:
                break
            continue
        rollout.log(f"[kserve] serve_early: the claim is bound to {rollout.where} ({uid})")
        return bound
    rollout.log(f"[kserve] serve_early: the claim on {rollout.where} stays unbound; the next "
                "promotion that finds the service binds it")
    return config_map


def _bind_or_release(rollout: Rollout, data: dict[str, str]) -> None:
    """After this promotion's create, or its last try: the claim is bound to the
    InferenceService there (:func:`_bind`); with none there (nothing created), this model's
    claim is released, so none is left to reject later models with. Best effort: it never
    changes how the promotion ends."""
    api, name = rollout.api, claim_name(rollout.name)
    try:
        isvc = rollout.retrying(lambda: api.get(rollout.name), f"read {rollout.where}")
        if isvc is None:
            _swap_if_ours(rollout, data, {},
                          f"released the claim: {rollout.where} was not created")
            return
        _bind(rollout, isvc,
              rollout.retrying(lambda: api.get_claim(name), f"read ConfigMap {name}"))
    except Exception as error:  # a claim left as it is is only less precise
        rollout.log(f"[kserve] serve_early: could not bind or release ConfigMap {name} "
                    f"({error})")
