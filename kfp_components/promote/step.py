"""The early promotion step (``serve_early``): a model that just finished training is scored on
the validation split, as selection scores it, and served at once if nothing is served or it is
better than the served model; verified with validation images, so the test split stays unread
until selection. The promotion is atomic on both backends: locally under the deployment's lock
(:func:`fmnist_kfp.serving.deploy.local_deployer.promote_locally`), on KServe by a compare-and-swap
on a claim ConfigMap beside the InferenceService that every create, write and wait of the rollout
re-checks (:func:`fmnist_kfp.serving.deploy.kserve_promotion.promote_with_kserve`)."""

from __future__ import annotations

from typing import Any

from fmnist_kfp.backends import require_backend
from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kfp_components import reports_errors_briefly
from fmnist_kfp.kfp_components.deploy.step import (
    from_kfp_store,
    kserve_settings,
    serving_problems,
    storage_uri_for,
)
from fmnist_kfp.settings.serving import ServingSettings


@reports_errors_briefly
def promote(*, model_dir: str, model_uri: str, model_type: str, data_dir: str, backend: str,
            model_name: str, tolerance: float, verification_images: int,
            serving: dict[str, Any], image: str = "", log=print, kserve_client=None) -> dict:
    """Promotes the model if it is the best trained so far; returns the decision record
    (``action``: created, promoted, unchanged, rejected, rolled_back or failed)."""
    import time

    from fmnist_kfp.selection.select import validation_accuracy
    from fmnist_kfp.serving.deploy.verification import make_verifier, test_sample

    problems = serving_problems(serving, backend, model_name, tolerance, verification_images,
                                image)
    if problems:
        raise UserInputError("invalid serving parameters:\n  - " + "\n  - ".join(problems))
    settings = ServingSettings.from_dict(serving)
    accuracy = validation_accuracy(model_dir, data_dir)
    log(f"{model_type}: validation accuracy {accuracy:.4f}")
    images, labels = test_sample(data_dir, verification_images, split="validation")
    verify = make_verifier(model_dir, model_name, images, labels, log=log)

    require_backend("deployment", backend)
    if backend == "local":
        from fmnist_kfp.serving.deploy.local_deployer import promote_locally

        decision = promote_locally(
            model_name, model_dir, accuracy, model_type=model_type, tolerance=tolerance,
            verify=verify, server_args=settings.local_server_args(serving), log=log)
    else:
        from fmnist_kfp.serving.deploy.kserve_promotion import promote_with_kserve

        service = kserve_settings(model_name, settings, model_uri, image)
        rollout = promote_with_kserve(
            service, storage_uri=storage_uri_for(model_uri, settings.storage_uri),
            validation_accuracy=accuracy, model_type=model_type, tolerance=tolerance,
            verify=verify, client=kserve_client, log=log,
            needs_credentials=from_kfp_store(model_uri, settings.storage_uri))
        decision = {**rollout.as_dict(), "backend": "kubernetes"}
    serving_since = time.time() if decision["action"] in ("created", "promoted") else None
    return {**decision, "model_type": model_type, "validation_accuracy": accuracy,
            "serving_since": serving_since}
