"""Standard (raw) mode: a candidate InferenceService verified before the main one changes.

KServe's raw mode reads no ``canaryTrafficPercent`` (only the Knative reconciler does:
kserve#5335) and splits no traffic on any version Kubeflow ships (``spec.canary`` came in 0.20
and only sets replica counts). So:

1. **Absent** → create the main InferenceService, wait until its Deployment has rolled out,
   verify it at its cluster-local address.
2. **Blessed** → create the model's own candidate ``<name>-c<hash of its URI>``
   (:func:`~fmnist_kfp.kubernetes.inference_service.candidate_name`: two promotions racing
   never touch each other's) serving the new model, wait, verify it at *its* cluster-local
   address. Failed → delete it; the main one was never touched (``candidate_failed``; nothing
   is rolled back because nothing changed).
3. **Passed** → update the main InferenceService. Its Deployment replaces pods with
   ``maxUnavailable: 0`` behind an HTTP readiness probe on the model (``inference_service``),
   so old pods serve until new ones have loaded it. Wait until the Deployment has rolled the
   new template out (``kubectl rollout status``'s rule, on a template carrying our model-URI
   annotation: the InferenceService's observedGeneration is the Deployment's, not its own),
   verify the main address, delete the candidate: ``promoted``. A rollout that does not finish
   is undone by writing the previous model back: ``rolled_back``, then raised.

**Deletion is asynchronous.** An InferenceService has KServe's finalizer
(``inferenceservice.finalizers``, added on its first reconcile and removed once the controller
has cleaned up: kserve v0.15.2 ``pkg/controller/v1beta1/inferenceservice/controller.go``
L162-195), so a delete leaves it in place, ``metadata.deletionTimestamp`` set, until then, and
a create of its name meanwhile is answered 409. Every candidate deletion here waits until the
API server answers 404 for it.

upstream: docs/upstream.md#kserve
"""

from __future__ import annotations

from dataclasses import dataclass

from fmnist_kfp.kubernetes.inference_service import (
    ANNOTATION_MODEL_URI,
    ANNOTATION_TEST_ACCURACY,
    annotations_of,
    candidate_name,
)
from fmnist_kfp.kubernetes.inference_service_status import (
    cluster_local_url,
    deployment_failed,
    deployment_rolled_out,
    describe,
    is_true,
    predictor_deployment_name,
)
from fmnist_kfp.serving.deploy.blessing import BlessingDecision
from fmnist_kfp.serving.deploy.kserve_api import KServeRolloutError, RolloutLeftAsIs
from fmnist_kfp.serving.deploy.rollout_base import Check, Rollout, Written
from fmnist_kfp.serving.deploy.rollout_result import Action, RolloutResult


@dataclass
class _Cleanup:
    """What a job's cleanup did: ``done`` once it finished; ``failure``, the error that stopped
    it; ``isvc``, the InferenceService written back (the rollover's cleanup)."""

    done: bool = False
    failure: Exception | None = None
    isvc: dict | None = None


def _template_annotations(deployment: dict | None) -> dict:
    template = ((deployment or {}).get("spec") or {}).get("template") or {}
    return (template.get("metadata") or {}).get("annotations") or {}


class StandardRollout(Rollout):

    def update(self, current: dict, decision: BlessingDecision,
               served: str | None) -> RolloutResult:
        candidate = candidate_name(self.name, self.storage_uri)
        stable = {key: value for key, value in annotations_of(current).items()
                  if key in (ANNOTATION_TEST_ACCURACY, ANNOTATION_MODEL_URI)}
        previous_uri = served or (((current.get("spec") or {}).get("predictor") or {})
                                  .get("model") or {}).get("storageUri")
        self.ensure_serving_runtime()
        self.delete_candidate(candidate, f"left by an earlier rollout of {self.storage_uri}")
        self.log(f"[kserve] candidate: {self.api.where(candidate)} serves {self.storage_uri} "
                 f"beside {self.where}, which keeps serving {previous_uri}")
        body = self.build(self.stable_annotations(self.storage_uri, self.test_accuracy),
                          name=candidate)
        written = Written()
        deleted = _Cleanup()

        def cleanup(why: str) -> None:
            try:
                self.delete_candidate(candidate, f"the rollout {why}")
            except Exception as failure:
                deleted.failure = failure
                raise
            deleted.done = True

        try:
            _, candidate_url, verification = self.verified_job(
                "candidate", candidate, create=lambda: written.record(self.create_object(body)),
                rolled_out=lambda isvc: self.rolled_out(isvc, written.response, candidate),
                cleanup=cleanup)
        except RolloutLeftAsIs as error:  # not deleted: nothing was cleaned up
            raise RolloutLeftAsIs(
                f"the candidate {self.api.where(candidate)} of {self.storage_uri} was left as "
                f"it is ({error.__cause__ or error}); {self.where} was not changed and still "
                f"serves {previous_uri}; a retry of this step replaces the candidate") from error
        except Exception as error:
            raise KServeRolloutError(
                f"the candidate of {self.storage_uri} did not come up ({type(error).__name__}: "
                f"{error}); {self.candidate_removed(candidate, deleted)}, and {self.where} was "
                f"not changed and still serves {previous_uri}") from error
        if not verification.passed:
            result = self.result(
                Action.CANDIDATE_FAILED, decision, current, canary_url=candidate_url,
                verification=verification,
                reason=f"the candidate failed verification ({verification.describe()}); "
                       f"{self.where} was not changed and still serves {previous_uri}")
            if not deleted.done:
                # A rejected model must not keep running at its own address.
                raise KServeRolloutError(
                    f"{result.reason}, but {self.candidate_removed(candidate, deleted)}",
                    result)
            return result
        try:
            promoted = self.promote_main(decision, candidate, stable, previous_uri)
        except Exception:
            # promote_main's cleanup deletes it when the rollover job ran; a write refused
            # before it was sent (an early promotion overtaken) runs no cleanup.
            self.candidate_removed(candidate, _Cleanup())
            raise
        self.delete_candidate(candidate, "the main InferenceService serves its model now")
        return self.result(
            Action.PROMOTED, decision, promoted, canary_url=candidate_url,
            verification=verification,
            reason=f"the candidate passed verification ({verification.describe()}) and "
                   f"{self.where} was rolled over to it")

    def promote_main(self, decision: BlessingDecision, candidate: str, stable: dict[str, str],
                     previous_uri: str | None) -> dict:
        """Rolls the main InferenceService over to the verified model; if that does not
        finish (deadline, failed verification, an error, SIGTERM), the job's cleanup writes the
        previous model back and deletes the candidate."""
        from fmnist_kfp.kubernetes.runner import JobFailed

        self.log(f"[kserve] updating {self.where} to {self.storage_uri} (maxUnavailable 0: "
                 "its old pods serve until the new ones are ready)")
        body = self.build(self.stable_annotations(self.storage_uri, self.test_accuracy))
        written = Written()
        undone = _Cleanup()

        def restore(why: str) -> None:
            try:
                undone.isvc = self.restore_main(stable, previous_uri)
            except Exception as failure:
                undone.failure = failure
                raise
            finally:
                self.delete_candidate(candidate, f"the rollover {why}")

        try:
            isvc, url, verification = self.verified_job(
                "main InferenceService", self.name,
                create=lambda: written.record(self.write(body)),
                rolled_out=lambda isvc: self.rolled_out(isvc, written.response, self.name),
                cleanup=restore)
            if verification.passed:
                return isvc
            why = f"it failed verification after the rollover ({verification.describe()})"
            error: Exception = JobFailed(why)
        except RolloutLeftAsIs as failure:  # nothing written back, the candidate kept
            raise RolloutLeftAsIs(
                f"{self.where} was being moved to {self.storage_uri} and was left as it is "
                f"({failure.__cause__ or failure}): it serves {previous_uri} until KServe has "
                f"rolled {self.storage_uri} out, and a retry of this step then verifies it; "
                f"the candidate {self.api.where(candidate)} stays until the next rollout "
                "deletes it") from failure
        except Exception as failure:
            why, error = f"{type(failure).__name__}: {failure}", failure
        if undone.failure is not None or undone.isvc is None:
            raise KServeRolloutError(
                f"{self.where} was being moved to {self.storage_uri} ({why}), and writing "
                f"{previous_uri} back failed ({undone.failure}); set "
                f"spec.predictor.model.storageUri back to {previous_uri} by hand (kubectl edit "
                f"inferenceservice -n {self.api.namespace} {self.name})") from error
        result = self.result(Action.ROLLED_BACK, decision, undone.isvc,
                             reason=f"the rollover did not finish ({why}); {previous_uri} is "
                                    "served again")
        raise KServeRolloutError(
            f"{self.where} was being moved to {self.storage_uri} ({why}); {previous_uri} was "
            "written back", result) from error

    def restore_main(self, stable: dict[str, str], previous_uri: str | None) -> dict:
        if not previous_uri:
            raise KServeRolloutError("the previous model's URI is unknown")
        self.log(f"[kserve] rolling back: {self.where} serves {previous_uri} again")
        annotations = {**stable, ANNOTATION_MODEL_URI: previous_uri}
        body = self.build(annotations, storage_uri=previous_uri)
        written = Written()
        return self.run_job("rollback", read=self.reader(),
                            create=lambda: written.record(self.write(body)),
                            check=lambda isvc: self.rolled_out(isvc, written.response, self.name))

    def candidate_removed(self, candidate: str, deleted: _Cleanup) -> str:
        """Says whether the candidate is gone, deleting it once more if the job's cleanup did
        not (it is not called when the API stayed unreachable) or failed."""
        if not deleted.done:
            try:
                self.delete_candidate(candidate, "the rollout is over")
            except Exception as failure:
                return (f"deleting the candidate failed ({failure}); delete it: kubectl delete "
                        f"inferenceservice -n {self.api.namespace} {candidate}")
        deleted.done = True
        return f"the candidate {self.api.where(candidate)} is gone"

    def delete_candidate(self, candidate: str, why: str) -> None:
        """Deletes the candidate and waits until it is gone (the module docstring: a
        finalizer keeps it, terminating, for a while)."""
        import time

        existing = self.retrying(lambda: self.api.get(candidate), f"read {candidate}")
        if existing is None:
            return
        if (existing.get("metadata") or {}).get("deletionTimestamp"):
            self.log(f"[kserve] {self.api.where(candidate)} is being deleted already ({why})")
        else:
            self.log(f"[kserve] deleting {self.api.where(candidate)}: {why}")
            self.retrying(lambda: self.api.delete(candidate), f"delete {candidate}")
        timeout = self.settings.ready_timeout_seconds
        deadline = time.monotonic() + timeout
        while self.retrying(lambda: self.api.get(candidate), f"read {candidate}") is not None:
            if time.monotonic() >= deadline:
                raise KServeRolloutError(
                    f"{self.api.where(candidate)} was deleted but was still there after "
                    f"{timeout:g} s (KServe's finalizer not removed yet: is its controller "
                    f"running?); look at kubectl get inferenceservice -n {self.api.namespace} "
                    f"{candidate} -o yaml")
            time.sleep(self.poll_seconds)
        self.log(f"[kserve] {self.api.where(candidate)} is gone")

    # -- what "rolled out" means here --------------------------------------------------------

    def rolled_out(self, isvc: dict, written: dict, name: str) -> Check:
        """Ready, an address, and the Deployment rolled out on a template whose model-URI
        annotation is the ``storageUri`` written (the pod template carries the
        InferenceService's annotations: kserve v0.15.2 ``components/predictor.go`` L99-101 and
        L444-458, ``deployment_reconciler.go`` L141-155)."""
        expected = (((written.get("spec") or {}).get("predictor") or {}).get("model")
                    or {}).get("storageUri")
        deployment = self.retrying(
            lambda: self.api.get_deployment(predictor_deployment_name(name)),
            f"read deployment of {name}")
        failed = deployment_failed(deployment)
        if failed:
            raise KServeRolloutError(f"the Deployment of {self.api.where(name)} cannot roll "
                                     f"out: {failed}")
        carries = _template_annotations(deployment).get(ANNOTATION_MODEL_URI) == expected
        if (is_true(isvc) and carries and deployment_rolled_out(deployment)
                and cluster_local_url(isvc)):
            return Check(True, f"rolled out {expected}")
        status = (deployment or {}).get("status") or {}
        return Check(False, f"{describe(isvc)}; Deployment "
                     + ("not created yet" if deployment is None else
                        f"{'on' if carries else 'not yet on'} the new template, "
                        f"{status.get('updatedReplicas', 0)} updated / "
                        f"{status.get('availableReplicas', 0)} available / "
                        f"{status.get('replicas', 0)} replicas"))
