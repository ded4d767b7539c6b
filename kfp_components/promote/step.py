"""The early promotion step (``serve_early``): a model that just finished training is scored on
the validation split, as selection scores it, and served at once if nothing is served or it is
better than the served model; verified with validation images, so the test split stays unread
until selection. Locally the promotion is atomic under the deployment's lock
(:func:`serving.deploy.local_deployer.promote_locally`). On KServe it is not built yet: the
step refuses ``serve_early`` there before any work (see :data:`KSERVE_NOT_YET`)."""

from __future__ import annotations

from typing import Any

from fmnist.backends import choose_backend
from fmnist.errors import UserInputError
from fmnist.settings.serving import SERVE_EARLY_KSERVE_NOT_YET, ServingSettings
from kfp_components.deploy.step import serving_problems

KSERVE_NOT_YET = SERVE_EARLY_KSERVE_NOT_YET


def promote(*, model_dir: str, model_type: str, data_dir: str, backend: str,
            model_name: str, tolerance: float, verification_images: int,
            serving: dict[str, Any], log=print) -> dict:
    """Promotes the model if it is the best trained so far; returns the decision record
    (``action``: created, promoted, unchanged, rejected, rolled_back or failed)."""
    import time

    from fmnist.selection.select import validation_accuracy
    from serving.deploy.verification import make_verifier, test_sample

    if backend == "kubernetes":
        raise UserInputError(KSERVE_NOT_YET)
    problems = serving_problems(serving, backend, model_name, tolerance, verification_images)
    if problems:
        raise UserInputError("invalid serving parameters:\n  - " + "\n  - ".join(problems))
    settings = ServingSettings.from_dict(serving)
    accuracy = validation_accuracy(model_dir, data_dir)
    log(f"{model_type}: validation accuracy {accuracy:.4f}")
    images, labels = test_sample(data_dir, verification_images, split="validation")
    verify = make_verifier(model_dir, model_name, images, labels, log=log)

    def local():
        from serving.deploy.local_deployer import promote_locally

        return lambda: promote_locally(
            model_name, model_dir, accuracy, model_type=model_type, tolerance=tolerance,
            verify=verify, server_args=settings.local_server_args(serving), log=log)

    decision = choose_backend("deployment", backend, local=local)()
    decision.setdefault("serving_since", time.time() if decision["action"] in (
        "created", "promoted") else None)
    return {**decision, "model_type": model_type, "validation_accuracy": accuracy}
