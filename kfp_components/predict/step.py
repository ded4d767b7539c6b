"""The prediction step: real test images sent to the served model over HTTP, and the rule
that decides whether the served model answers as the selected one does."""

from __future__ import annotations

from typing import Any

from fmnist_kfp.errors import FmnistError
from fmnist_kfp.kfp_components import reports_errors_briefly
from fmnist_kfp.serving.deploy.verification import (
    Comparison,
    compare,
    model_probabilities,
    test_sample,
)


class ServedModelMismatch(FmnistError, RuntimeError):
    """The server failed requests, or answered differently from the selected model."""


def judge(result: Comparison, url: str, serves_model: bool) -> None:
    """Raises when requests failed, or when the server serves this model (``serves_model``)
    and its answers are not the selected model's (float rounding and near-ties aside:
    :func:`fmnist_kfp.serving.deploy.verification.agreement`); an earlier model kept in service by
    blessing is only measured."""
    if result.failures:
        raise ServedModelMismatch(f"{result.failures} requests to {url} failed: "
                                  f"{result.errors}")
    if serves_model and not result.ok:
        raise ServedModelMismatch(
            f"the served model at {url} does not answer like the selected model: "
            f"{result.describe()}; served accuracy {result.accuracy:.4f} vs "
            f"{result.expected_accuracy:.4f}; errors: {result.errors}"
        )


@reports_errors_briefly
def predict_step(*, model_dir: str, data_dir: str, url: str, model_name: str,
                 sample_size: int, serves_model: bool, log=print) -> dict[str, Any]:
    """Sends ``sample_size`` test images to ``url``; returns the metrics to record."""
    images, labels = test_sample(data_dir, sample_size)
    expected = model_probabilities(model_dir, images, log=log)
    result = compare(url, model_name, images, labels, expected, log=log)
    log(f"served accuracy {result.accuracy:.4f} on {result.images} test images "
        f"(selection: {result.expected_accuracy:.4f}), {result.failures} failed requests")
    if not serves_model:
        log("the server keeps an earlier model (this one was not blessed): no comparison")
    judge(result, url, serves_model)
    names = {"accuracy": "served_accuracy", "expected_accuracy": "selection_accuracy"}
    return {names.get(key, key): getattr(result, key) for key in (
        "accuracy", "expected_accuracy", "agreement", "near_ties", "unexplained_disagreements",
        "requests", "failures", "images", "seconds")}
