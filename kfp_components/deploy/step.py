"""The deploy step: blessing, then a local or KServe rollout, verified with real test images.
Two backends (``local`` and ``kubernetes``) chosen the way training and tuning choose theirs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fmnist_kfp.backends import require_backend
from fmnist_kfp.errors import FmnistError, UserInputError
from fmnist_kfp.kfp_components import reports_errors_briefly
from fmnist_kfp.kfp_components.outputs import StepOutputs
from fmnist_kfp.settings.jobs import BACKENDS
from fmnist_kfp.settings.serving import (
    FMNIST_RUNTIME,
    KFP_STORE_SERVICE_ACCOUNT,
    DeploySettings,
    KServeSettings,
    ServingSettings,
    check_storage_uri,
)

if TYPE_CHECKING:  # the serving modules are imported where a step runs, not by its checks
    from fmnist_kfp.serving.deploy.local_deployer import LocalDeployment
    from fmnist_kfp.serving.deploy.rollout_base import Candidate
    from fmnist_kfp.serving.deploy.rollout_result import RolloutResult

    # How a deployment ended, on either backend.
    Deployment = LocalDeployment | RolloutResult


class DeploymentError(FmnistError, RuntimeError):
    """The new model could not be served; what still serves is in the message."""


def serving_problems(serving: dict[str, Any], backend: str, model_name: str,
                     tolerance: float, verification_images: int, image: str = "") -> list[str]:
    """Every problem with the serving parameters, before any work starts (``image``: the
    deploy step's image input, the predictor's unless ``serving`` names another)."""
    problems = DeploySettings(model_name=model_name, blessing_tolerance=tolerance,
                              verification_images=verification_images).problems()
    if backend not in BACKENDS:
        problems.append(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    typed, type_problems = ServingSettings.coerce_values(dict(serving))
    if type_problems or backend not in BACKENDS:
        return problems + type_problems
    settings = ServingSettings(**typed)
    if backend == "kubernetes":
        service = KServeSettings(name=model_name, **{**typed, "image": settings.image or image})
        if service.runtime == FMNIST_RUNTIME and not service.image:
            problems.append("no predictor image: give the deploy step's image input (a compiled "
                            "component defaults it to the image it was compiled with) or "
                            "serving.image")
        return problems + service.problems()
    return problems + settings.local_problems()


@dataclass(frozen=True)
class ServingInputs:
    """How the deploy and promote steps serve a model, one object for the components' flat
    inputs of those names: the backend, the served model's name, the blessing's
    ``tolerance``, the images that verify a new server, the ``serving`` parameter and the
    step's ``image`` input (our predictor's, unless ``serving.image`` names another)."""

    backend: str
    model_name: str
    tolerance: float
    verification_images: int
    serving: dict[str, Any]
    image: str = ""

    def checked(self) -> ServingSettings:
        """The ``serving`` parameter's settings, once every problem with these inputs
        (:func:`serving_problems`) is ruled out; else ``UserInputError`` naming them all."""
        problems = serving_problems(self.serving, self.backend, self.model_name,
                                    self.tolerance, self.verification_images, self.image)
        if problems:
            raise UserInputError("invalid serving parameters:\n  - " + "\n  - ".join(problems))
        return ServingSettings.from_dict(self.serving)


def kserve_candidate(model_uri: str, settings: ServingSettings, accuracy: float,
                     model_type: str = "") -> Candidate:
    """The model artifact at ``model_uri`` as KServe fetches it (:func:`storage_uri_for`,
    with KFP's store credentials when it is there), with the accuracy its blessing compares."""
    from fmnist_kfp.serving.deploy.rollout_base import Candidate

    return Candidate(storage_uri_for(model_uri, settings.storage_uri), accuracy,
                     needs_credentials=from_kfp_store(model_uri, settings.storage_uri),
                     model_type=model_type)


def storage_uri_for(model_uri: str, override: str = "") -> str:
    """Where KServe's storage initializer fetches the model: the override, else the model
    artifact's own URI (KFP's object store speaks S3, so ``minio://`` becomes ``s3://``)."""
    from fmnist_kfp.serving.deploy.credentials import as_s3

    if override:
        return check_storage_uri(override)
    model_uri = as_s3(model_uri)
    try:
        return check_storage_uri(model_uri)
    except UserInputError:
        raise UserInputError(
            f"the model artifact is stored at {model_uri!r}, which KServe cannot fetch; set "
            "serving.storage_uri to a pvc://, s3:// or gs:// copy of it"
        ) from None


def from_kfp_store(model_uri: str, override: str = "") -> bool:
    """Whether KServe fetches the model from KFP's own object store (and so needs the
    credentials of ``manifests/serving-credentials``)."""
    from fmnist_kfp.serving.deploy.credentials import in_kfp_store

    return not override and in_kfp_store(model_uri)


def service_account_for(model_uri: str, settings: ServingSettings) -> str:
    """The predictor's ServiceAccount: the setting, else ``fmnist-serving`` (the one the setup
    manifests create) for a model in KFP's object store, else none."""
    if settings.service_account:
        return settings.service_account
    return KFP_STORE_SERVICE_ACCOUNT if from_kfp_store(model_uri, settings.storage_uri) else ""


def kserve_settings(model_name: str, settings: ServingSettings, model_uri: str,
                    image: str) -> KServeSettings:
    """The InferenceService's settings: the ``serving`` parameter's, the predictor running
    ``serving.image`` or else the step's ``image`` input, the ServiceAccount
    :func:`service_account_for` the model."""
    values = {**settings.as_dict(), "image": settings.image or image,
              "service_account": service_account_for(model_uri, settings)}
    return KServeSettings(name=model_name, **values).validate()


def deployment_outputs(deployment: Deployment) -> StepOutputs:
    """What the deploy step hands to KFP: the record (the ``deployment`` artifact's file, and
    its metadata without the empty values), the blessing's metrics, and the outputs ``url``,
    ``action`` and ``serves_model``."""
    record = deployment.record()
    blessing = deployment.blessing
    return StepOutputs(
        metadata={key: value for key, value in record.items() if value is not None},
        record=record,
        metrics={"candidate_test_accuracy": blessing.candidate_accuracy,
                 **({} if blessing.serving_accuracy is None
                    else {"serving_test_accuracy": blessing.serving_accuracy}),
                 "blessed": int(blessing.blessed)},
        returns=(deployment.url or "", deployment.action, deployment.action.serves_candidate))


@reports_errors_briefly
def deploy(*, model_dir: str, model_uri: str, test_accuracy: float, data_dir: str, log=print,
           kserve_client=None, **serving_inputs: Any) -> Deployment:
    """Blesses, deploys and verifies the model; returns how the deployment ended.

    ``serving_inputs``: the fields of :class:`ServingInputs`, as the component passes its
    inputs (the compiled component calls the step with them).

    ``kserve_client``: the ``kserve.KServeClient`` of the kubernetes backend (None: one from
    the pod's or the kubeconfig's credentials).

    Raises ``DeploymentError`` when the new model failed verification (after rolling back) or
    nothing could be served; a model that is not blessed is a normal outcome (``rejected``).
    """
    from fmnist_kfp.serving.deploy.verification import make_verifier, test_sample

    inputs = ServingInputs(**serving_inputs)
    settings = inputs.checked()
    model_name, tolerance = inputs.model_name, inputs.tolerance
    images, labels = test_sample(data_dir, inputs.verification_images)
    verify = make_verifier(model_dir, model_name, images, labels, log=log)

    require_backend("deployment", inputs.backend)
    deployment: Deployment
    if inputs.backend == "local":
        from fmnist_kfp.serving.deploy.local_deployer import deploy_locally

        deployment = deploy_locally(
            model_name, model_dir, test_accuracy, tolerance=tolerance, verify=verify,
            server_args=settings.local_server_args(inputs.serving), log=log)
    else:
        from fmnist_kfp.serving.deploy.kserve_deployer import deploy_with_kserve
        from fmnist_kfp.serving.deploy.rollout_base import Acceptance

        deployment = deploy_with_kserve(
            kserve_settings(model_name, settings, model_uri, inputs.image),
            kserve_candidate(model_uri, settings, test_accuracy), Acceptance(tolerance, verify),
            client=kserve_client, log=log)
    if deployment.action.failed_verification:
        raise DeploymentError(
            f"{model_name}: the new model failed verification when served and was not "
            f"promoted ({deployment.action}); still serving: {deployment.url or 'nothing'}. "
            f"Verification: {deployment.record()['verification']}"
        )
    return deployment
