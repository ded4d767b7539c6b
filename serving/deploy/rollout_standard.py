"""Standard (raw) mode: a candidate InferenceService verified before the main one changes.

KServe's raw mode reads no ``canaryTrafficPercent`` (only the Knative reconciler does:
kserve v0.15.2 ``reconcilers/knative/ksvc_reconciler.go`` L113-128, kserve#5335) and splits no
traffic on any version Kubeflow ships (``spec.canary`` came in 0.20 and only sets replica
counts: ``components/predictor.go`` v0.20.0 L886-956). So:

1. **Absent** → create the main InferenceService, wait until its Deployment has rolled out,
   verify it at its cluster-local address.
2. **Blessed** → create the candidate ``<name>-canary`` serving the new model, wait, verify it
   at *its* cluster-local address. Failed → delete it; the main one was never touched
   (``candidate_failed``; nothing is rolled back because nothing changed).
3. **Passed** → update the main InferenceService. Its Deployment replaces pods with
   ``maxUnavailable: 0`` behind an HTTP readiness probe on the model (``inference_service``),
   so old pods serve until new ones have loaded it. Wait until the Deployment has rolled the
   new template out (``kubectl rollout status``'s rule, on a template carrying our model-URI
   annotation: the InferenceService's observedGeneration is the Deployment's, not its own,
   ``inference_service_status.go`` v0.20.0 L449-456), verify the main address, delete the
   candidate: ``promoted``. A rollout that does not finish is undone by writing the previous
   model back: ``rolled_back``, then raised.
"""

from __future__ import annotations

from serving.deploy.blessing import BlessingDecision
from serving.deploy.inference_service import (
    ANNOTATION_MODEL_URI,
    ANNOTATION_TEST_ACCURACY,
    candidate_name,
)
from serving.deploy.kserve_api import KServeRolloutError
from serving.deploy.kserve_status import (
    cluster_local_url,
    deployment_failed,
    deployment_rolled_out,
    describe,
    is_true,
    predictor_deployment_name,
)
from serving.deploy.rollout_base import (
    Rollout,
    Terminated,
    annotations_of,
    sigterm_guard,
)


def _template_annotations(deployment: dict | None) -> dict:
    template = ((deployment or {}).get("spec") or {}).get("template") or {}
    return (template.get("metadata") or {}).get("annotations") or {}


class StandardRollout(Rollout):

    def update(self, current: dict, decision: BlessingDecision, served: str | None) -> dict:
        candidate = candidate_name(self.name)
        stable = {key: value for key, value in annotations_of(current).items()
                  if key in (ANNOTATION_TEST_ACCURACY, ANNOTATION_MODEL_URI)}
        previous_uri = served or (((current.get("spec") or {}).get("predictor") or {})
                                  .get("model") or {}).get("storageUri")
        self.ensure_serving_runtime()
        self.delete_candidate(candidate, "left by an earlier rollout")
        stage = "candidate"
        with sigterm_guard(self.log) as guard:
            try:
                self.log(f"[kserve] candidate: {self.api.where(candidate)} serves "
                         f"{self.storage_uri} beside {self.where}, which keeps serving "
                         f"{previous_uri}")
                body = self.build(self.stable_annotations(self.storage_uri, self.test_accuracy),
                                  name=candidate)
                created = self.create_object(body)
                isvc = self.wait_rolled_out(created, "candidate", name=candidate)
                candidate_url = self.require_address(isvc)
                verification = self.verify(candidate_url, candidate, "candidate")
                if not verification["passed"]:
                    guard.hold()
                    self.delete_candidate(candidate, "it failed verification")
                    return self.result(
                        "candidate_failed", decision, current, canary_url=candidate_url,
                        verification=verification,
                        reason=f"the candidate failed verification "
                               f"({self.describe(verification)}); {self.where} was not "
                               f"changed and still serves {previous_uri}")
                stage = "main"
                promoted = self.promote_main()
            except BaseException as error:
                guard.hold()
                self.interrupted(error, stage, candidate, stable, previous_uri, decision)
            guard.hold()
            self.delete_candidate(candidate, "the main InferenceService serves its model now")
        return self.result(
            "promoted", decision, promoted, canary_url=candidate_url, verification=verification,
            reason=f"the candidate passed verification ({self.describe(verification)}) and "
                   f"{self.where} was rolled over to it")

    def promote_main(self) -> dict:
        self.log(f"[kserve] updating {self.where} to {self.storage_uri} (maxUnavailable 0: "
                 "its old pods serve until the new ones are ready)")
        written = self.write(self.build(self.stable_annotations(self.storage_uri,
                                                                self.test_accuracy)))
        isvc = self.wait_rolled_out(written, "main InferenceService")
        url = self.require_address(isvc)
        check = self.verify(url, self.name, "main InferenceService")
        if not check["passed"]:
            raise KServeRolloutError(f"{self.where} fails verification after the rollover "
                                     f"({self.describe(check)})")
        return isvc

    def interrupted(self, error: BaseException, stage: str, candidate: str,
                    stable: dict[str, str], previous_uri: str | None,
                    decision: BlessingDecision):
        """Undoes what this rollout changed, then raises."""
        why = "SIGTERM" if isinstance(error, Terminated) else f"{type(error).__name__}: {error}"
        try:
            self.delete_candidate(candidate, f"the rollout was interrupted ({why})")
        except Exception as failure:  # the main InferenceService matters more
            self.log(f"[kserve] warning: could not delete {candidate}: {failure}")
        if stage == "candidate":
            raise KServeRolloutError(
                f"the candidate of {self.storage_uri} was interrupted ({why}); {self.where} "
                f"was not changed and still serves {previous_uri}") from error
        try:
            isvc = self.restore_main(stable, previous_uri)
        except Exception as failure:
            raise KServeRolloutError(
                f"{self.where} was being moved to {self.storage_uri} when the rollout was "
                f"interrupted ({why}), and writing {previous_uri} back failed ({failure}); "
                f"set spec.predictor.model.storageUri back to {previous_uri} by hand "
                f"(kubectl edit inferenceservice -n {self.api.namespace} {self.name})"
            ) from error
        result = self.result("rolled_back", decision, isvc,
                             reason=f"the rollover was interrupted ({why}); {previous_uri} is "
                                    "served again")
        raise KServeRolloutError(
            f"{self.where} was being moved to {self.storage_uri} when the rollout was "
            f"interrupted ({why}); {previous_uri} was written back", result) from error

    def restore_main(self, stable: dict[str, str], previous_uri: str | None) -> dict:
        if not previous_uri:
            raise KServeRolloutError("the previous model's URI is unknown")
        self.log(f"[kserve] rolling back: {self.where} serves {previous_uri} again")
        annotations = {**stable, ANNOTATION_MODEL_URI: previous_uri}
        written = self.write(self.build(annotations, storage_uri=previous_uri))
        return self.wait_rolled_out(written, "rollback", uri=previous_uri)

    def delete_candidate(self, candidate: str, why: str) -> None:
        existing = self.retrying(lambda: self.api.get(candidate), f"read {candidate}")
        if existing is not None:
            self.log(f"[kserve] deleting {self.api.where(candidate)}: {why}")
            self.retrying(lambda: self.api.delete(candidate), f"delete {candidate}")

    # -- waits -------------------------------------------------------------------------------

    def wait_rolled_out(self, written: dict, what: str, *, name: str | None = None,
                        uri: str | None = None) -> dict:
        """Ready, an address, and the Deployment rolled out on a template that carries the
        model written (its annotations come from the InferenceService's, kserve v0.15.2
        ``components/predictor.go`` L99-101 and L444-458, ``deployment_reconciler.go``
        L141-155)."""
        name = name or self.name
        expected = uri or annotations_of(written).get(ANNOTATION_MODEL_URI)
        state = {}

        def read() -> dict:
            isvc = self.api.get(name)
            if isvc is None:
                raise KServeRolloutError(f"{self.api.where(name)} disappeared while waiting "
                                         "for it")
            state["deployment"] = self.api.get_deployment(predictor_deployment_name(name))
            return isvc

        def check(isvc: dict) -> tuple[bool, str]:
            deployment = state.get("deployment")
            failed = deployment_failed(deployment)
            if failed:
                raise KServeRolloutError(f"the Deployment of {self.api.where(name)} cannot "
                                         f"roll out: {failed}")
            carries = _template_annotations(deployment).get(ANNOTATION_MODEL_URI) == expected
            done = (is_true(isvc) and carries and deployment_rolled_out(deployment)
                    and bool(cluster_local_url(isvc)))
            if done:
                return True, f"rolled out {expected}"
            status = (deployment or {}).get("status") or {}
            return False, (f"{describe(isvc)}; Deployment "
                           + ("not created yet" if deployment is None else
                              f"{'on' if carries else 'not yet on'} the new template, "
                              f"{status.get('updatedReplicas', 0)} updated / "
                              f"{status.get('availableReplicas', 0)} available / "
                              f"{status.get('replicas', 0)} replicas"))

        return self.wait(what, read, check)
