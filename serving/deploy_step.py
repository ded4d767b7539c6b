"""What the deploy component runs: blessing, then a local or KServe rollout, verified with real
test images. One interface, two backends (``local`` and ``kubernetes``), like training."""

from __future__ import annotations

import dataclasses
from typing import Any

from fmnist.errors import UserInputError
from serving.blessing import check_tolerance

SERVING_KEYS_LOCAL = ("max_batch_size", "max_batch_latency_ms")
DEPLOY_BACKENDS = ("local", "kubernetes")
# Outcomes after which the deployment serves the candidate model.
SERVES_CANDIDATE = ("created", "promoted", "unchanged")


class DeploymentError(RuntimeError):
    """The new model could not be served; what still serves is in the message."""


def serving_problems(serving: dict[str, Any], backend: str, model_name: str,
                     tolerance: float, verification_images: int) -> list[str]:
    """Every problem with the serving parameters, before any work starts."""
    from serving.inference_service import KServeSettings, check_storage_uri

    problems = []
    known = {f.name for f in dataclasses.fields(KServeSettings)} - {"name"} | {"storage_uri"}
    unknown = sorted(set(serving) - known)
    if unknown:
        problems.append(f"unknown serving settings {unknown}; known: {sorted(known)}")
    try:
        check_tolerance(tolerance)
    except UserInputError as error:
        problems.append(str(error))
    if verification_images < 1:
        problems.append(f"verification_images must be at least 1, got {verification_images}")
    if backend not in DEPLOY_BACKENDS:
        problems.append(f"unknown backend {backend!r}; choose one of {DEPLOY_BACKENDS}")
    if unknown or backend not in DEPLOY_BACKENDS:
        return problems
    options = {k: v for k, v in serving.items() if k != "storage_uri"}
    try:
        settings = KServeSettings(name=model_name, **options)
        if backend == "kubernetes":
            settings.validate()
            if serving.get("storage_uri"):
                check_storage_uri(serving["storage_uri"])
        else:
            settings._validate_names()
            settings._validate_batching()
    except (UserInputError, TypeError) as error:
        problems.append(str(error))
    return problems


def storage_uri_for(model_uri: str, override: str = "") -> str:
    """Where KServe's storage initializer fetches the model: the override, else the model
    artifact's own URI (KFP's MinIO store speaks S3, so ``minio://`` becomes ``s3://``)."""
    from serving.inference_service import check_storage_uri

    if override:
        return check_storage_uri(override)
    if model_uri.startswith("minio://"):
        model_uri = "s3://" + model_uri[len("minio://"):]
    try:
        return check_storage_uri(model_uri)
    except UserInputError:
        raise UserInputError(
            f"the model artifact is stored at {model_uri!r}, which KServe cannot fetch; set "
            "serving.storage_uri to a pvc://, s3:// or gs:// copy of it"
        ) from None


def deploy(*, model_dir: str, model_uri: str, test_accuracy: float, data_dir: str,
           backend: str, model_name: str, tolerance: float, verification_images: int,
           serving: dict[str, Any], log=print) -> dict:
    """Blesses, deploys and verifies the model; returns the decision record.

    Raises ``DeploymentError`` when the new model failed verification (after rolling back) or
    nothing could be served; a model that is not blessed is a normal outcome (``rejected``).
    """
    from serving.verification import make_verifier, test_sample

    problems = serving_problems(serving, backend, model_name, tolerance, verification_images)
    if problems:
        raise UserInputError("invalid serving parameters:\n  - " + "\n  - ".join(problems))
    images, labels = test_sample(data_dir, verification_images)
    verify = make_verifier(model_dir, model_name, images, labels, log=log)
    if backend == "local":
        from serving.local_deploy import deploy_locally

        server_args = [f"--{key}={serving[key]}" for key in SERVING_KEYS_LOCAL if key in serving]
        decision = deploy_locally(model_name, model_dir, test_accuracy, tolerance=tolerance,
                                  verify=verify, server_args=server_args, log=log)
    else:
        from serving.inference_service import KServeSettings
        from serving.kserve_rollout import deploy_with_kserve

        options = {k: v for k, v in serving.items() if k != "storage_uri"}
        settings = KServeSettings(name=model_name, **options).validate()
        decision = deploy_with_kserve(
            settings, storage_uri=storage_uri_for(model_uri, serving.get("storage_uri", "")),
            test_accuracy=test_accuracy, tolerance=tolerance, verify=verify, log=log)
        decision["backend"] = "kubernetes"
    if decision["action"] not in (*SERVES_CANDIDATE, "rejected"):
        still = decision.get("url") or "nothing"
        raise DeploymentError(
            f"{model_name}: the new model failed verification when served and was not "
            f"promoted ({decision['action']}); still serving: {still}. "
            f"Verification: {decision.get('verification')}"
        )
    return decision
