"""Checks a served model with real test images against the same model run in process.

The served answers must match what the exported SavedModel predicts for the same images:
that is what proves the right model is up and decoding images the way training saw them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from serving.deploy.client import check_predictions


def test_sample(data_dir: str, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``count`` images of the ingested test split (uint8 [N,28,28], labels [N])."""
    from fmnist.dataset.pipeline import load_arrays

    if count < 1:
        raise ValueError(f"at least one test image is needed to verify a server, got {count}")
    return load_arrays(data_dir, "test", take=count)


def in_process_predictions(model_dir: str, images: np.ndarray) -> np.ndarray:
    from fmnist.selection.evaluate import predict_classes
    from serving.model_server.predictor import resolve_saved_model_dir

    return predict_classes(resolve_saved_model_dir(model_dir), images)


def compare(url: str, model_name: str, images: np.ndarray, labels: np.ndarray,
            expected: np.ndarray, *, min_agreement: float = 1.0, log=None) -> dict:
    """Sends the images to ``url`` and compares the answers with ``expected`` class indices."""
    check = check_predictions(url, model_name, images, labels, log=log)
    predicted = np.asarray(check.predicted)
    agreement = float(np.mean(predicted == expected)) if len(expected) else 0.0
    result = check.as_dict()
    result.pop("predicted")
    result.update({
        "agreement": agreement,
        "expected_accuracy": float(np.mean(expected == labels)) if len(labels) else 0.0,
        "min_agreement": min_agreement,
        "ok": check.ok and agreement >= min_agreement,
    })
    return result


def make_verifier(model_dir: str, model_name: str, images: np.ndarray, labels: np.ndarray, *,
                  min_agreement: float = 1.0, log=None) -> Callable[..., dict]:
    """``verify(url, served_name=model_name) -> dict`` for deployments: ok when every request
    succeeds and the served classes agree with the in-process ones (at least ``min_agreement``
    of them). ``served_name``: the name the server registered the model under (KServe's
    Standard-mode candidate serves it under its own InferenceService name)."""
    expected = in_process_predictions(model_dir, images)

    def verify(url: str, served_name: str | None = None) -> dict:
        result = compare(url, served_name or model_name, images, labels, expected,
                         min_agreement=min_agreement, log=log)
        if log:
            log(f"verified {url}: {result['requests']} requests, {result['failures']} failed, "
                f"accuracy {result['accuracy']:.4f}, agreement {result['agreement']:.4f}")
        return result

    return verify
