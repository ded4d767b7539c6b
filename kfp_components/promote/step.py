"""The early promotion step (``serve_early``): a model that just finished training is scored on
the validation split, as selection scores it, and served at once if nothing is served or it is
better than the served model; verified with validation images, so the test split stays unread
until selection. The promotion is atomic on both backends: locally under the deployment's lock
(:func:`fmnist_kfp.serving.deploy.local_deployer.promote_locally`), on KServe by a compare-and-swap
on a claim ConfigMap beside the InferenceService that every create, write and wait of the rollout
re-checks (:func:`fmnist_kfp.serving.deploy.kserve_promotion.promote_with_kserve`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fmnist_kfp.backends import require_backend
from fmnist_kfp.kfp_components import reports_errors_briefly
from fmnist_kfp.kfp_components.deploy.step import ServingInputs, kserve_candidate, kserve_settings
from fmnist_kfp.kfp_components.outputs import StepOutputs

if TYPE_CHECKING:  # the serving modules are imported where the step runs
    from fmnist_kfp.serving.deploy.local_deployer import LocalPromotion
    from fmnist_kfp.serving.deploy.rollout_result import Action, RolloutResult, SupersededResult


@dataclass(frozen=True)
class Promotion:
    """How an early promotion ended: the backend's result, which model it was, its
    validation accuracy and, when it started serving, since when (``time.time()``)."""

    result: LocalPromotion | RolloutResult | SupersededResult
    model_type: str
    validation_accuracy: float
    serving_since: float | None

    @property
    def action(self) -> Action:
        return self.result.action

    @property
    def url(self) -> str:
        """Where the deployment answers now ("" when nothing does)."""
        return self.result.url or ""

    def record(self) -> dict[str, Any]:
        """The ``promotion`` artifact's record: the backend's, then the model's."""
        return {**self.result.record(), "model_type": self.model_type,
                "validation_accuracy": self.validation_accuracy,
                "serving_since": self.serving_since}

    def kfp_outputs(self) -> StepOutputs:
        """The record (its plain values also the artifact's metadata) and the outputs ``url``
        and ``action``."""
        record = self.record()
        return StepOutputs(
            metadata={key: value for key, value in record.items()
                      if isinstance(value, str | int | float | bool)},
            record=record, returns=(self.url, self.action))


@reports_errors_briefly
def promote(*, model_dir: str, model_uri: str, model_type: str, data_dir: str, log=print,
            kserve_client=None, **serving_inputs: Any) -> Promotion:
    """Promotes the model if it is the best trained so far; returns how it ended
    (``action``: created, promoted, unchanged, rejected, superseded, rolled_back or
    failed). ``serving_inputs``: the fields of
    :class:`~fmnist_kfp.kfp_components.deploy.step.ServingInputs`, as the component passes
    its inputs."""
    import time

    from fmnist_kfp.selection.select import validation_accuracy
    from fmnist_kfp.serving.deploy.verification import make_verifier, test_sample

    inputs = ServingInputs(**serving_inputs)
    settings = inputs.checked()
    model_name, tolerance = inputs.model_name, inputs.tolerance
    accuracy = validation_accuracy(model_dir, data_dir)
    log(f"{model_type}: validation accuracy {accuracy:.4f}")
    images, labels = test_sample(data_dir, inputs.verification_images, split="validation")
    verify = make_verifier(model_dir, model_name, images, labels, log=log)

    require_backend("deployment", inputs.backend)
    result: LocalPromotion | RolloutResult | SupersededResult
    if inputs.backend == "local":
        from fmnist_kfp.serving.deploy.local_deployer import promote_locally

        result = promote_locally(
            model_name, model_dir, accuracy, model_type=model_type, tolerance=tolerance,
            verify=verify, server_args=settings.local_server_args(inputs.serving), log=log)
    else:
        from fmnist_kfp.serving.deploy.kserve_promotion import promote_with_kserve
        from fmnist_kfp.serving.deploy.rollout_base import Acceptance

        result = promote_with_kserve(
            kserve_settings(model_name, settings, model_uri, inputs.image),
            kserve_candidate(model_uri, settings, accuracy, model_type),
            Acceptance(tolerance, verify), client=kserve_client, log=log)
    return Promotion(result, model_type=model_type, validation_accuracy=accuracy,
                     serving_since=time.time() if result.action.started_serving else None)
