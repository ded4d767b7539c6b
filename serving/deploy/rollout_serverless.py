"""Serverless (Knative) mode: a canary on the InferenceService itself.

1. **Absent** → create it (all traffic), wait until its revision is rolled out, verify it at
   its cluster-local address.
2. **Blessed** → replace the spec with the new ``storageUri`` and ``canaryTrafficPercent``
   (KServe sends that share to the new revision, the rest to the last rolled-out one), wait
   until the new revision is ready and holds that share, verify it through the cluster-local
   host of its ``latest`` tag, then **promote** (drop ``canaryTrafficPercent``) or **roll
   back** (``canaryTrafficPercent: 0`` pins all traffic to the previously rolled-out revision).

"Ready" alone does not say a write was rolled out: the status is written after the write, by
the controller. A wait therefore also needs ``status.observedGeneration`` (the Knative
Service's, which moves with each spec change KServe passes on; kserve v0.20.0
``inference_service_status.go`` L635, ``test/e2e/predictor/test_canary.py`` L85-92), a *new*
``latestCreatedRevision`` that is also ``latestReadyRevision``, and the traffic split asked for
(``ksvc_reconciler.go`` v0.15.2 L113-140; v0.20.0 L132-164).

A failed canary is *returned* (``action == "rolled_back"``); a canary that cannot be judged
(readiness timeout, an API error while it runs) is rolled back and then raised as
:class:`KServeRolloutError`, with the result in ``error.result``; SIGTERM rolls it back and
exits the step (the runner's rule).
"""

from __future__ import annotations

from serving.deploy.blessing import BlessingDecision
from serving.deploy.inference_service import (
    ANNOTATION_CANDIDATE_MODEL_URI,
    ANNOTATION_CANDIDATE_TEST_ACCURACY,
    ANNOTATION_MODEL_URI,
    ANNOTATION_PREVIOUS_MODEL_URI,
    ANNOTATION_TEST_ACCURACY,
    annotations_of,
    format_accuracy,
)
from serving.deploy.kserve_api import KServeRolloutError, ReadinessTimeout, RolloutLeftAsIs
from serving.deploy.kserve_status import (
    CANARY_TAG,
    cluster_local_url,
    describe,
    generation,
    is_true,
    latest_target,
    observed_generation,
    pinned_target,
    predictor_status,
    tag_url,
)
from serving.deploy.rollout_base import Check, Rollout


def _observed(isvc: dict, written: dict) -> bool:
    return observed_generation(isvc) >= generation(written)


def _template(isvc: dict) -> tuple:
    """What KServe copies into the Knative revision template: the predictor (less
    canaryTrafficPercent, which only sets the traffic) and the annotations (kserve v0.15.2
    components/predictor.go L99-101 and L444-458, ksvc_reconciler.go L149-166)."""
    predictor = dict(((isvc.get("spec") or {}).get("predictor")) or {})
    predictor.pop("canaryTrafficPercent", None)
    return predictor, annotations_of(isvc)


def makes_revision(current: dict, written: dict) -> bool:
    """Whether ``written`` makes Knative create a revision: its template changed."""
    return _template(current) != _template(written)


class ServerlessRollout(Rollout):

    def update(self, current: dict, decision: BlessingDecision, served: str | None) -> dict:
        if not predictor_status(current).get("latestRolledoutRevision"):
            # KServe ignores canaryTrafficPercent until a revision was rolled out
            # (ksvc_reconciler.go v0.20.0 L134): the new model would take all traffic.
            return self.replace_unrolled(current, decision)
        return self.canary(current, decision, served)

    def replace_unrolled(self, current: dict, decision: BlessingDecision) -> dict:
        self.log(f"[kserve] {self.where} never rolled a revision out; the new model replaces "
                 "it without a canary")
        before = predictor_status(current).get("latestCreatedRevision")
        self.ensure_serving_runtime()
        body = self.build(self.stable_annotations(self.storage_uri, self.test_accuracy))
        written: dict = {}
        isvc, url, verification, passed = self.verified_job(
            "replacement", self.name, create=lambda: written.update(self.write(body)),
            rolled_out=lambda isvc: self.revision(isvc, written, before, None,
                                                  new_revision=makes_revision(current, written)))
        result = self.result("created", decision, isvc, verification=verification,
                             reason="nothing was rolled out; the new model replaced it")
        if not passed:
            raise KServeRolloutError(
                f"{self.where}: {self.storage_uri} failed verification at {url} "
                f"({self.describe(verification)}) and nothing was rolled out before it", result)
        return result

    def canary(self, current: dict, decision: BlessingDecision, served: str | None) -> dict:
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
        before = predictor_status(current).get("latestCreatedRevision")
        self.ensure_serving_runtime()
        body = self.build(candidate, canary_percent=percent)
        written: dict = {}
        undone: dict = {}

        def rollback(why: str) -> None:
            try:
                undone["isvc"] = self.rollback(stable)
            except Exception as failure:
                undone["failure"] = failure
                raise

        self.log(f"[kserve] canary: {percent}% of traffic to {self.storage_uri}, the rest to "
                 f"the revision serving {previous}")
        try:
            isvc, canary_url, verification, passed = self.verified_job(
                "canary", self.name, create=lambda: written.update(self.write(body)),
                rolled_out=lambda isvc: self.revision(
                    isvc, written, before, percent, new_revision=makes_revision(current, written)),
                url_of=self.canary_url, cleanup=rollback)
        except Exception as error:
            self.interrupted(error, undone, decision, percent)
        if not passed:
            return self.result(
                "rolled_back", decision, undone.get("isvc"), canary_url=canary_url,
                verification=verification, canary_percent=percent,
                reason=f"the canary failed verification ({self.describe(verification)}); "
                       f"all traffic is pinned to the revision serving {previous}")
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

    def interrupted(self, error: Exception, undone: dict, decision: BlessingDecision,
                    percent: int):
        """Raises for a canary that could not be judged (the runner has rolled it back, unless
        the API server refused the wait's reads: then it was left as it is)."""
        if isinstance(error, RolloutLeftAsIs):
            raise RolloutLeftAsIs(
                f"the canary of {self.storage_uri} on {self.where} was left as it is, taking "
                f"{percent}% of the traffic unverified ({error.__cause__ or error}); a retry "
                "of this step replaces it, or pin the previous model by hand: kubectl patch "
                f"inferenceservice -n {self.api.namespace} {self.name} --type=merge -p "
                "'{\"spec\":{\"predictor\":{\"canaryTrafficPercent\":0}}}'") from error
        why = f"{type(error).__name__}: {error}"
        if "failure" in undone:
            raise KServeRolloutError(
                f"the canary of {self.storage_uri} on {self.where} was interrupted ({why}) "
                f"and rolling it back failed ({undone['failure']}); pin the previous model by "
                f"hand: kubectl patch inferenceservice -n {self.api.namespace} {self.name} "
                "--type=merge -p '{\"spec\":{\"predictor\":{\"canaryTrafficPercent\":0}}}'"
            ) from error
        if "isvc" not in undone:
            raise error  # nothing was written: nothing to roll back
        result = self.result("rolled_back", decision, undone["isvc"], canary_percent=percent,
                             reason=f"canary interrupted: {why}")
        raise KServeRolloutError(
            f"the canary of {self.storage_uri} on {self.where} was interrupted ({why}); it "
            "was rolled back and the previous model keeps all traffic", result) from error

    def promote(self, decision, verification: dict, canary_url: str, percent: int,
                canary: dict) -> dict:
        """Drops canaryTrafficPercent. A verified model is not rolled back if the promotion is
        interrupted: the job's cleanup only says where things stand."""
        stable = self.stable_annotations(self.storage_uri, self.test_accuracy)
        self.log(f"[kserve] promoting {self.storage_uri} to all traffic")
        before = predictor_status(canary).get("latestCreatedRevision")
        body = self.build(stable)
        written: dict = {}
        isvc = self.run_job(
            "promotion", read=self.reader(), create=lambda: written.update(self.write(body)),
            check=lambda isvc: self.revision(isvc, written, before, None,
                                             new_revision=makes_revision(canary, written)),
            cleanup=lambda why: self.log(f"[kserve] promotion of the verified canary "
                                         f"{self.storage_uri} interrupted ({why}); it is "
                                         "written and KServe completes it"))
        return self.result(
            "promoted", decision, isvc, canary_url=canary_url,
            verification=verification, canary_percent=percent,
            reason=f"the canary passed verification ({self.describe(verification)}) and was "
                   "promoted to all traffic")

    def rollback(self, stable: dict[str, str]) -> dict:
        """Pins all traffic to the last rolled-out revision (``canaryTrafficPercent: 0``).

        The latest revision may never become Ready (a broken canary), so this waits only for
        the controller to pin the traffic, and logs rather than raises if it does not."""
        self.log(f"[kserve] rolling back: canaryTrafficPercent 0 pins traffic to the previous "
                 f"revision ({stable.get(ANNOTATION_MODEL_URI, 'model unknown')})")
        written = self.write(self.build(stable, canary_percent=0))

        def pinned(isvc: dict) -> Check:
            target = pinned_target(isvc)
            rolled_out = predictor_status(isvc).get("latestRolledoutRevision")
            done = (_observed(isvc, written) and target.get("percent") == 100
                    and target.get("revisionName") == rolled_out)
            return Check(done, f"all traffic on {rolled_out}" if done else describe(isvc))

        try:
            return self.run_job("rollback", read=self.reader(), check=pinned)
        except ReadinessTimeout as error:
            self.log(f"[kserve] warning: {error}")
            return written

    # -- what "rolled out" means here ------------------------------------------------------

    def rolled_out(self, isvc: dict, written: dict, name: str) -> Check:
        return self.revision(isvc, written, None, None, new_revision=True)

    def revision(self, isvc: dict, written: dict, before: str | None, percent: int | None,
                 *, new_revision: bool) -> Check:
        """Whether the controller has observed ``written``, its latest revision (a new one
        after ``before`` when ``new_revision``: the template changed) is ready, and it holds
        ``percent`` of the traffic (None: it is rolled out to all of it)."""
        predictor = predictor_status(isvc)
        created = predictor.get("latestCreatedRevision")
        ready_revision = predictor.get("latestReadyRevision")
        target = latest_target(isvc)
        done = (is_true(isvc) and _observed(isvc, written) and bool(created)
                and created == ready_revision
                and (not new_revision or created != before)
                and target.get("revisionName") == ready_revision)
        if done and percent is None:
            done = (predictor.get("latestRolledoutRevision") == ready_revision
                    and target.get("percent") == 100)
        elif done:
            done = target.get("percent") == percent
        if not done:
            return Check(False, describe(isvc))
        share = f"{percent}% of the traffic" if percent else "all traffic"
        return Check(True, f"{ready_revision} ready with {share}")
