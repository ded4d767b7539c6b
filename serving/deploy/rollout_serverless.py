"""Serverless (Knative) mode: a canary on the InferenceService itself.

1. **Absent** → create it (all traffic), wait until its revision is rolled out, verify it at
   its cluster-local address.
2. **Blessed** → replace the spec with the new ``storageUri`` and ``canaryTrafficPercent``
   (KServe sends that share to the new revision, the rest to the last rolled-out one), wait
   until the new revision is ready and holds that share, verify it through the cluster-local
   host of its ``latest`` tag, then **promote** (drop ``canaryTrafficPercent``) or **roll
   back**.
3. **Roll back** re-applies the last good predictor, in two writes. KServe's own pin
   (``canaryTrafficPercent: 0`` alone) leaves the rejected revision behind the ``latest`` tag at
   0 %: Knative labels every revision its Route names, at any percent, ``routingState: active``, an
   active revision is Reachable, and a reachable one keeps its min-scale (KServe sets it from
   ``minReplicas``): the rejected model keeps running and answering. So: (a) the previous
   predictor with ``canaryTrafficPercent: 0``: all traffic stays on the rolled-out revision while
   a new revision of the previous model starts (the ``latestRevision`` target follows the latest
   *ready* revision, which is the rejected one until then: dropping the field now would give it
   all traffic); (b) once that revision is ready, the same without ``canaryTrafficPercent``: it
   takes all traffic, and the rejected revision, named by no target, scales to zero. The
   rollback's template carries the rejected model (annotation
   ``fmnist.kubeflow.org/rolled-back``), so it always makes a new revision: were it the rolled-out
   template and KServe never saw the canary (a run terminated right after writing it),
   ``canaryTrafficPercent: 0`` on it would read to KServe as a rollback of the last promotion and
   send all traffic to the model before it.

**When a write is rolled out.** The status is written after the write, by the controllers, and its
``observedGeneration`` is the *Knative Service's* generation (``PropagateStatus`` copies it), not
the InferenceService's: it moves once per change KServe renders into the Knative Service, so a
write KServe renders the same, or two writes it sees as one, leave it behind the
InferenceService's generation for good, and an annotation (no generation) or a newly rolled-out
revision under a canary (the ``prev`` target moves) puts it ahead. The two counters are never
compared here. A wait reads what Knative reports in one status snapshot (KServe copies one Knative
Service status): ``Ready`` (a Knative Service is Ready only once its Configuration has reconciled
the current template, whose latest created revision is then ready, and its Route serves the
traffic asked for), the latest created revision also the latest ready one, the ``latestRevision``
target on it with the share the write asks for and the rest on ``latestRolledoutRevision``, and,
where that share cannot tell the write from the state before it, a revision no status named before
the write.

A failed canary is *returned* (``action == "rolled_back"``); a canary that cannot be judged
(readiness timeout, an API error while it runs) is rolled back and then raised as
:class:`KServeRolloutError`, with the result in ``error.result``; SIGTERM rolls it back and
exits the step (the runner's rule).

upstream: docs/upstream.md#kserve, #knative-serving
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from fmnist_kfp.kubernetes.inference_service import (
    ANNOTATION_CANDIDATE_MODEL_URI,
    ANNOTATION_CANDIDATE_TEST_ACCURACY,
    ANNOTATION_MODEL_URI,
    ANNOTATION_PREVIOUS_MODEL_URI,
    ANNOTATION_ROLLED_BACK,
    ANNOTATION_TEST_ACCURACY,
    annotations_of,
    format_accuracy,
)
from fmnist_kfp.kubernetes.inference_service_status import (
    CANARY_TAG,
    cluster_local_url,
    describe,
    generation,
    is_true,
    latest_target,
    pinned_target,
    predictor_status,
    revisions_named,
    tag_url,
)
from fmnist_kfp.serving.deploy.blessing import BlessingDecision
from fmnist_kfp.serving.deploy.kserve_api import (
    KServeRolloutError,
    ReadinessTimeout,
    RolloutLeftAsIs,
)
from fmnist_kfp.serving.deploy.rollout_base import Check, Rollout
from fmnist_kfp.serving.deploy.rollout_result import Action, RolloutResult, Verification


def _template(isvc: dict) -> tuple:
    """What KServe copies into the Knative revision template: the predictor (less
    canaryTrafficPercent, which only sets the traffic), the annotations and the labels (kserve
    v0.15.2 components/predictor.go L99-101 and L444-458, ksvc_reconciler.go L149-166)."""
    predictor = dict(((isvc.get("spec") or {}).get("predictor")) or {})
    predictor.pop("canaryTrafficPercent", None)
    labels = dict((isvc.get("metadata") or {}).get("labels") or {})
    return predictor, annotations_of(isvc), labels


def makes_revision(current: dict, written: dict) -> bool:
    """Whether ``written`` makes Knative create a revision: its template changed."""
    return _template(current) != _template(written)


@dataclass
class _Write:
    """One write: the body, what the API server answered (the new spec with the status as it
    was), and the revisions any status had named before it."""

    body: dict
    response: dict = field(default_factory=dict)
    before: frozenset[str] = frozenset()


@dataclass
class _Rollback:
    """What the canary's cleanup did: the InferenceService and a note on where things stand
    once rolled back, or the error that stopped the rollback."""

    isvc: dict | None = None
    note: str = ""
    failure: Exception | None = None

    @property
    def done(self) -> bool:
        return self.isvc is not None


class ServerlessRollout(Rollout):

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: set[str] = set()  # every revision a status read so far has named

    def observed(self, isvc: dict) -> None:
        self.seen |= revisions_named(isvc)

    def send(self, write: _Write) -> None:
        """Writes ``write.body``; records the response and the revisions known before it."""
        known = set(self.seen)
        write.response = self.write(write.body)
        write.before = frozenset(known | revisions_named(write.response))

    def update(self, current: dict, decision: BlessingDecision,
               served: str | None) -> RolloutResult:
        self.seen |= revisions_named(current)
        if not predictor_status(current).get("latestRolledoutRevision"):
            # KServe ignores canaryTrafficPercent until a revision was rolled out
            # (ksvc_reconciler.go v0.20.0 L134): the new model would take all traffic.
            return self.replace_unrolled(current, decision)
        return self.canary(current, decision, served)

    def replace_unrolled(self, current: dict, decision: BlessingDecision) -> RolloutResult:
        self.log(f"[kserve] {self.where} never rolled a revision out; the new model replaces "
                 "it without a canary")
        self.ensure_serving_runtime()
        write = _Write(self.build(self.stable_annotations(self.storage_uri, self.test_accuracy)))
        isvc, url, verification = self.verified_job(
            "replacement", self.name, create=lambda: self.send(write),
            rolled_out=lambda isvc: self.revision(
                isvc, write.before, None, new_revision=makes_revision(current, write.response)))
        result = self.result(Action.CREATED, decision, isvc, verification=verification,
                             reason="nothing was rolled out; the new model replaced it")
        if not verification.passed:
            raise KServeRolloutError(
                f"{self.where}: {self.storage_uri} failed verification at {url} "
                f"({verification.describe()}) and nothing was rolled out before it", result)
        return result

    def canary(self, current: dict, decision: BlessingDecision,
               served: str | None) -> RolloutResult:
        """The canary is one job on the runner: written, waited for, verified; a failure,
        the deadline, an error or SIGTERM roll it back (the job's cleanup)."""
        percent = self.settings.canary_traffic_percent
        stable = {key: value for key, value in annotations_of(current).items()
                  if key in (ANNOTATION_TEST_ACCURACY, ANNOTATION_MODEL_URI)}
        candidate = {**stable, ANNOTATION_CANDIDATE_TEST_ACCURACY:
                     format_accuracy(self.test_accuracy),
                     ANNOTATION_CANDIDATE_MODEL_URI: self.storage_uri}
        if served:
            candidate[ANNOTATION_PREVIOUS_MODEL_URI] = served
        previous = served or "the previous model"
        self.ensure_serving_runtime()
        write = _Write(self.build(candidate, canary_percent=percent))
        undone = _Rollback()

        def rollback(why: str) -> None:
            try:
                undone.isvc, undone.note = self.rollback(current, stable, served, write)
            except Exception as failure:
                undone.failure = failure
                raise

        self.log(f"[kserve] canary: {percent}% of traffic to {self.storage_uri}, the rest to "
                 f"the revision serving {previous}")
        try:
            isvc, canary_url, verification = self.verified_job(
                "canary", self.name, create=lambda: self.send(write),
                rolled_out=lambda isvc: self.revision(
                    isvc, write.before, percent,
                    new_revision=makes_revision(current, write.response)),
                url_of=self.canary_url, cleanup=rollback)
        except Exception as error:
            self.interrupted(error, undone, decision, percent, previous)
        if not verification.passed:
            return self.result(
                Action.ROLLED_BACK, decision, undone.isvc, canary_url=canary_url,
                verification=verification, canary_percent=percent,
                reason=f"the canary failed verification ({verification.describe()}); "
                       f"{undone.note or 'it was rolled back'}")
        return self.promote(decision, verification, canary_url, percent, isvc)

    def canary_url(self, isvc: dict) -> str:
        """The cluster-local URL reaching only the new revision: its ``latest`` tag's host."""
        url = tag_url(isvc, CANARY_TAG)
        if url:
            return url
        fallback = (predictor_status(isvc).get("address") or {}).get("url") or \
            cluster_local_url(isvc)
        if not fallback:
            raise KServeRolloutError(f"{self.where} reports no cluster-local address for its "
                                     "canary")
        self.log(f"[kserve] no '{CANARY_TAG}' tag in the predictor's traffic (is the annotation "
                 "serving.kserve.io/enable-tag-routing honoured?); verifying through the "
                 f"predictor's address {fallback}, which splits traffic between the canary and "
                 "the stable revision")
        return fallback

    def interrupted(self, error: Exception, undone: _Rollback, decision: BlessingDecision,
                    percent: int, previous: str):
        """Raises for a canary that could not be judged (the runner has rolled it back, unless
        the API server refused the wait's reads: then it was left as it is)."""
        if isinstance(error, RolloutLeftAsIs):
            raise RolloutLeftAsIs(
                f"the canary of {self.storage_uri} on {self.where} was left as it is, taking "
                f"{percent}% of the traffic unverified ({error.__cause__ or error}); a retry "
                "of this step replaces it, or roll it back by hand: kubectl patch "
                f"inferenceservice -n {self.api.namespace} {self.name} --type=merge -p "
                "'{\"spec\":{\"predictor\":{\"canaryTrafficPercent\":0}}}', then set "
                f"spec.predictor.model.storageUri back to {previous} and, once its new revision "
                "is ready, remove canaryTrafficPercent") from error
        why = f"{type(error).__name__}: {error}"
        if undone.failure is not None:
            raise KServeRolloutError(
                f"the canary of {self.storage_uri} on {self.where} was interrupted ({why}) "
                f"and rolling it back failed ({undone.failure}); pin the previous model by "
                f"hand: kubectl patch inferenceservice -n {self.api.namespace} {self.name} "
                "--type=merge -p '{\"spec\":{\"predictor\":{\"canaryTrafficPercent\":0}}}', "
                f"then set spec.predictor.model.storageUri back to {previous} (kubectl edit), "
                "and only once its new revision is ready remove canaryTrafficPercent (before "
                "that, all traffic would go to the rejected revision)") from error
        if not undone.done:
            raise error  # nothing was written: nothing to roll back
        result = self.result(Action.ROLLED_BACK, decision, undone.isvc, canary_percent=percent,
                             reason=f"canary interrupted: {why}; {undone.note}")
        raise KServeRolloutError(
            f"the canary of {self.storage_uri} on {self.where} was interrupted ({why}); "
            f"{undone.note}", result) from error

    def promote(self, decision: BlessingDecision, verification: Verification,
                canary_url: str, percent: int, canary: dict) -> RolloutResult:
        """Drops canaryTrafficPercent. A verified model is not rolled back if the promotion is
        interrupted: the job's cleanup only says where things stand."""
        stable = self.stable_annotations(self.storage_uri, self.test_accuracy)
        self.log(f"[kserve] promoting {self.storage_uri} to all traffic")
        write = _Write(self.build(stable))
        isvc = self.run_job(
            "promotion", read=self.reader(), create=lambda: self.send(write),
            check=lambda isvc: self.revision(
                isvc, write.before, None, new_revision=makes_revision(canary, write.response)),
            cleanup=lambda why: self.log(f"[kserve] promotion of the verified canary "
                                         f"{self.storage_uri} interrupted ({why}); it is "
                                         "written and KServe completes it"))
        return self.result(
            Action.PROMOTED, decision, isvc, canary_url=canary_url,
            verification=verification, canary_percent=percent,
            reason=f"the canary passed verification ({verification.describe()}) and was "
                   "promoted to all traffic")

    # -- the rollback ----------------------------------------------------------------------

    def previous_spec(self, current: dict, stable: dict[str, str], served: str | None,
                      canary: _Write, percent: int | None) -> dict:
        """The InferenceService as it was before the canary (its spec; the model it served;
        our stable annotations), marked with the rejected model, with ``percent``."""
        spec = copy.deepcopy(current.get("spec") or {})
        predictor = spec.setdefault("predictor", {})
        predictor.pop("canaryTrafficPercent", None)
        if served and isinstance(predictor.get("model"), dict):
            # A canary left by an interrupted rollout is in the spec; the annotation says
            # which model the rolled-out revision serves.
            predictor["model"]["storageUri"] = served
        if percent is not None:
            predictor["canaryTrafficPercent"] = percent
        # The canary write's generation makes the mark unique to this rollout.
        written = generation(canary.response) or generation(current) + 1
        marked = {**stable, ANNOTATION_ROLLED_BACK: f"{self.storage_uri} (generation {written})"}
        return {**self.build(marked), "spec": spec}  # build: our metadata; the spec as it was

    def rollback(self, current: dict, stable: dict[str, str], served: str | None,
                 canary: _Write) -> tuple[dict, str]:
        """Re-applies the predictor that was rolled out before the canary, in the two writes
        the module docstring explains; returns the InferenceService and what was achieved.

        A deadline is logged, not raised: after the first write all traffic is on the
        rolled-out revision, which is what matters most."""
        previous = served or "the previous model"
        self.log(f"[kserve] rolling back: {previous} again, with canaryTrafficPercent 0 until "
                 "its new revision is ready (all traffic stays on the rolled-out revision)")
        pin = _Write(self.previous_spec(current, stable, served, canary, 0))
        try:
            isvc = self.run_job(
                "rollback", read=self.reader(), create=lambda: self.send(pin),
                check=lambda isvc: self.revision(isvc, pin.before, 0, new_revision=True))
        except ReadinessTimeout as error:
            if not pin.response:  # the deadline came while the write was being retried
                raise KServeRolloutError(f"the rollback could not be written: {error}"
                                         ) from error
            isvc = self.retrying(self.reader(), f"read {self.name}")
            if self.pinned(isvc):
                note = (f"all traffic is back on {self.pinned(isvc)}, serving {previous}, but "
                        "the previous model's new revision was not ready in time, so the "
                        "rejected revision keeps its 'latest' tag, with no traffic, until it "
                        "is; then remove spec.predictor.canaryTrafficPercent")
            else:
                note = (f"the previous model {previous} was written back with "
                        "canaryTrafficPercent 0, but KServe had not moved the traffic yet")
            self.log(f"[kserve] warning: {error}; {note}")
            return isvc, note
        revision = predictor_status(isvc).get("latestReadyRevision")
        self.log(f"[kserve] {revision} serves {previous}; giving it all traffic")
        restore = _Write(self.previous_spec(current, stable, served, canary, None))
        try:
            isvc = self.run_job(
                "rollback", read=self.reader(), create=lambda: self.send(restore),
                check=lambda isvc: self.revision(isvc, restore.before, None, new_revision=False,
                                                 expected=revision))
        except ReadinessTimeout as error:
            note = (f"{previous} is written back and its revision {revision} is ready, but "
                    + ("KServe had not given it all traffic yet" if restore.response else
                       "removing spec.predictor.canaryTrafficPercent could not be written; "
                       f"all traffic stays on {self.pinned(isvc) or 'the rolled-out revision'}"
                       ", and the rejected revision is named by no traffic target"))
            self.log(f"[kserve] warning: {error}; {note}")
            return self.retrying(self.reader(), f"read {self.name}"), note
        return isvc, (f"{previous} is served again, by its new revision {revision}; the "
                      "rejected revision has no traffic and no tag, so it scales to zero")

    @staticmethod
    def pinned(isvc: dict) -> str | None:
        """The rolled-out revision when it holds all traffic through the ``prev`` target."""
        target = pinned_target(isvc)
        rolled_out = predictor_status(isvc).get("latestRolledoutRevision")
        if rolled_out and target.get("revisionName") == rolled_out and \
                target.get("percent") == 100:
            return rolled_out
        return None

    # -- what "rolled out" means here ------------------------------------------------------

    def rolled_out(self, isvc: dict, written: dict, name: str) -> Check:
        return self.revision(isvc, frozenset(), None, new_revision=True)

    def revision(self, isvc: dict, before: frozenset[str], percent: int | None, *,
                 new_revision: bool, expected: str | None = None) -> Check:
        """Whether Knative reports the write done: Ready, its latest created revision is the
        latest ready one (a revision named by no status before the write when
        ``new_revision``: the template changed; ``expected`` when given), and the
        ``latestRevision`` target gives it ``percent`` of the traffic and the ``prev`` target
        the rest on the rolled-out revision (None: all of it, and it is rolled out)."""
        predictor = predictor_status(isvc)
        created = predictor.get("latestCreatedRevision")
        ready = predictor.get("latestReadyRevision")
        target = latest_target(isvc)
        done = (is_true(isvc) and bool(created) and created == ready
                and (not new_revision or created not in before)
                and (expected is None or created == expected)
                and target.get("revisionName") == ready
                and target.get("percent") == (100 if percent is None else percent))
        if done and percent is None:
            done = predictor.get("latestRolledoutRevision") == ready
        elif done and percent is not None:
            rest = pinned_target(isvc)
            done = (rest.get("percent") == 100 - percent
                    and rest.get("revisionName") == predictor.get("latestRolledoutRevision"))
        if not done:
            return Check(False, describe(isvc))
        share = f"{percent}% of the traffic" if percent is not None else "all traffic"
        return Check(True, f"{ready} ready with {share}")
