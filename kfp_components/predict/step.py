"""The prediction step: real test images sent to the served model over HTTP, judged by the one
verification rule (:meth:`fmnist_kfp.serving.deploy.rollout_result.Verification.judged`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from fmnist_kfp.errors import FmnistError
from fmnist_kfp.kfp_components import reports_errors_briefly
from fmnist_kfp.kfp_components.outputs import StepOutputs
from fmnist_kfp.serving.deploy.rollout_result import Verification
from fmnist_kfp.serving.deploy.verification import (
    Comparison,
    compare,
    model_probabilities,
    test_sample,
)
from fmnist_kfp.settings.serving import DeploySettings

# The step has no tolerance input: the served accuracy may fall short of the model's own on
# the sample by what a deployment's blessing allows by default.
TOLERANCE = DeploySettings().blessing_tolerance


class ServedModelMismatch(FmnistError, RuntimeError):
    """The server failed requests, or answered differently from the selected model."""


@dataclass(frozen=True)
class Prediction:
    """The served model measured on a sample of the test split; the fields, in order, are the
    step's metrics."""

    served_accuracy: float
    selection_accuracy: float  # the selected model's own accuracy on the same images
    agreement: float  # the share of images given the same class
    near_ties: int
    unexplained_disagreements: int
    requests: int
    failures: int
    images: int
    seconds: float

    @classmethod
    def of(cls, result: Comparison) -> Prediction:
        return cls(served_accuracy=result.accuracy, selection_accuracy=result.expected_accuracy,
                   agreement=result.agreement, near_ties=result.near_ties,
                   unexplained_disagreements=result.unexplained_disagreements,
                   requests=result.requests, failures=result.failures, images=result.images,
                   seconds=result.seconds)

    def metrics(self) -> dict[str, float]:
        return asdict(self)

    def kfp_outputs(self) -> StepOutputs:
        """The metrics, and the served accuracy as the step's output."""
        return StepOutputs(metrics=self.metrics(), returns=(float(self.served_accuracy),))


def judge(result: Comparison, url: str, serves_model: bool,
          tolerance: float = TOLERANCE) -> Verification:
    """Raises when requests failed, or when the server serves this model (``serves_model``)
    and its answers do not pass the one rule
    (:meth:`~fmnist_kfp.serving.deploy.rollout_result.Verification.judged`: the same answers,
    float rounding and near-ties aside, :func:`fmnist_kfp.serving.deploy.verification.agreement`);
    an earlier model kept in service by blessing is only measured. Returns the verdict."""
    if result.failures:
        raise ServedModelMismatch(f"{result.failures} requests to {url} failed: "
                                  f"{result.errors}")
    verification = Verification.judged(result, result.expected_accuracy, tolerance)
    if serves_model and not verification.passed:
        raise ServedModelMismatch(
            f"the served model at {url} does not answer like the selected model: "
            f"{result.describe()}; served accuracy {result.accuracy:.4f} vs "
            f"{result.expected_accuracy:.4f}; errors: {result.errors}"
        )
    return verification


@reports_errors_briefly
def predict_step(*, model_dir: str, data_dir: str, url: str, model_name: str,
                 sample_size: int, serves_model: bool, log=print) -> Prediction:
    """Sends ``sample_size`` test images to ``url``; returns what was measured."""
    images, labels = test_sample(data_dir, sample_size)
    expected = model_probabilities(model_dir, images, log=log)
    result = compare(url, model_name, images, labels, expected, log=log)
    log(f"served accuracy {result.accuracy:.4f} on {result.images} test images "
        f"(selection: {result.expected_accuracy:.4f}), {result.failures} failed requests")
    if not serves_model:
        log("the server keeps an earlier model (this one was not blessed): no comparison")
    judge(result, url, serves_model)
    return Prediction.of(result)
