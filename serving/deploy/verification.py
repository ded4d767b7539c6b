"""Checks a served model with real test images against the same model run in process.

The served answers must be the exported SavedModel's answers for the same images: that is what
proves the right model is up and decoding images the way training saw them. Two numerical
paths for one model (the server's LiteRT interpreter and small batches, TensorFlow in process
and large ones) agree to float rounding, never bit for bit, so "the same answers" means
(:func:`agreement`):

- every served probability is within ``PROBABILITY_TOLERANCE`` of the in-process one, and
- where the served class differs, the in-process model itself nearly ties between the two
  classes: its probability of the served class is within ``TIE_MARGIN`` of its top one. Two
  probability vectors that each move by at most the tolerance can only swap two classes whose
  probabilities were at most twice the tolerance apart, so ``TIE_MARGIN`` is twice it.

A wrong model fails both: permuted classes, or another checkpoint of the same network, moves
probabilities by far more than the tolerance and flips classes the in-process model is sure of.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fmnist_kfp.serving.deploy.client import check_predictions

# The server keeps its LiteRT path only where it answers within 1e-4 of the SavedModel on a
# probe (fmnist_kfp.serving.model_server.predictor.FAST_PATH_TOLERANCE); on real test images the two
# were measured within 3e-7 of each other (2,000 images, trained and untrained CNNs, V1 requests of
# 16 against in-process batches of 2,048). Ten times the server's own bound leaves room for
# other hardware without letting another model through.
PROBABILITY_TOLERANCE = 1e-3
TIE_MARGIN = 2 * PROBABILITY_TOLERANCE


@dataclass(frozen=True)
class Agreement:
    """How the served answers compare with the in-process ones (see the module docstring)."""

    images: int
    same_class: int
    near_ties: int  # served class differs where the in-process model nearly ties
    unexplained: int  # served class differs where the in-process model is sure, or no answer
    max_probability_difference: float | None  # None: the server sent no probabilities

    @property
    def fraction(self) -> float:
        return self.same_class / self.images if self.images else 0.0

    @property
    def agrees(self) -> bool:
        return (self.images > 0 and self.unexplained == 0
                and (self.max_probability_difference is None
                     or self.max_probability_difference <= PROBABILITY_TOLERANCE))


def agreement(expected: np.ndarray, served_classes: Sequence[int],
              served_probabilities: Sequence[Sequence[float] | None] = ()) -> Agreement:
    """Compares served classes (and probabilities, where given) with the in-process
    probabilities ``expected`` ``[N, 10]``; a class of -1 (no answer) is never explained."""
    expected = np.asarray(expected, np.float64)
    served = np.asarray(served_classes, np.int64)
    rows = np.arange(len(served))
    answered = served >= 0
    top = expected.argmax(axis=1) if len(expected) else np.zeros(0, np.int64)
    gap = expected.max(axis=1) - expected[rows, np.where(answered, served, 0)] \
        if len(expected) else np.zeros(0)
    differs = answered & (served != top)
    near_tie = differs & (gap <= TIE_MARGIN)
    given = [(i, p) for i, p in enumerate(served_probabilities) if p is not None]
    difference = None
    if given:
        indices = [i for i, _ in given]
        values = np.asarray([p for _, p in given], np.float64)
        difference = float(np.max(np.abs(values - expected[indices])))
    return Agreement(
        images=len(served), same_class=int(np.sum(answered & ~differs)),
        near_ties=int(np.sum(near_tie)),
        unexplained=int(np.sum(~answered) + np.sum(differs & ~near_tie)),
        max_probability_difference=difference)


def test_sample(data_dir: str, count: int, split: str = "test") -> tuple[np.ndarray, np.ndarray]:
    """The first ``count`` images of the ingested ``split`` (uint8 [N,28,28], labels [N]): the
    test split for the chosen model, the validation split for a model served early (the test
    split is read once, for the chosen model)."""
    from fmnist_kfp.dataset.pipeline import load_arrays

    if count < 1:
        raise ValueError(f"at least one test image is needed to verify a server, got {count}")
    return load_arrays(data_dir, split, take=count)


def in_process_probabilities(model_dir: str, images: np.ndarray) -> np.ndarray:
    """The exported model's probabilities ``[N, 10]`` for ``images``, run in this process."""
    from fmnist_kfp.selection.evaluate import predict
    from fmnist_kfp.serving.model_server.predictor import resolve_saved_model_dir

    return predict(resolve_saved_model_dir(model_dir), images)[0]


def model_probabilities(model_dir: str, images: np.ndarray, *, log=None) -> np.ndarray:
    """The model's own probabilities ``[N, 10]`` for ``images``: those selection stored for
    this very model and these very images (:mod:`fmnist_kfp.selection.held_out_scores`), else
    :func:`in_process_probabilities`."""
    from fmnist_kfp.selection.held_out_scores import stored_probabilities

    stored = stored_probabilities(model_dir, images)
    if stored is not None:
        if log:
            log(f"the model's own answers for the {len(images)} images: the test-split "
                "probabilities selection stored for this model (same SavedModel digest)")
        return stored
    return in_process_probabilities(model_dir, images)


@dataclass(frozen=True)
class Comparison:
    """A served model's answers to a sample of images compared with the model's own: the
    requests (as :class:`~fmnist_kfp.serving.deploy.client.PredictionCheck` counts them), the
    :class:`Agreement`, and ``ok`` when every request succeeded and the answers agree. The
    fields, in order, are the keys of the record the deploy and predict steps keep."""

    url: str
    requests: int
    failures: int
    images: int
    correct: int
    accuracy: float
    seconds: float
    errors: list[str]
    ok: bool
    agreement: float  # the share of images given the same class
    near_ties: int
    unexplained_disagreements: int
    max_probability_difference: float | None  # None: the server sent no probabilities
    probability_tolerance: float
    expected_accuracy: float  # the model's own accuracy on the sample

    def describe(self) -> str:
        """One line on how the answers compared, for logs and errors."""
        difference = self.max_probability_difference
        return (f"agreement {self.agreement:.4f} ({self.near_ties} near-ties, "
                f"{self.unexplained_disagreements} unexplained), largest probability "
                "difference " + ("not sent" if difference is None else f"{difference:.2g}")
                + f" (tolerance {self.probability_tolerance:g})")

    def as_dict(self) -> dict[str, Any]:
        """The record a step keeps (a deployment's ``verification``)."""
        return asdict(self)


def compare(url: str, model_name: str, images: np.ndarray, labels: np.ndarray,
            expected: np.ndarray, *, log=None) -> Comparison:
    """Sends the images to ``url`` and compares the answers with ``expected``, the in-process
    probabilities; ``ok`` when every request succeeded and the answers agree."""
    check = check_predictions(url, model_name, images, labels, log=log)
    found = agreement(expected, check.predicted, check.probabilities)
    in_process = expected.argmax(axis=1) if len(expected) else np.zeros(0, np.int64)
    return Comparison(
        url=check.url, requests=check.requests, failures=check.failures, images=check.images,
        correct=check.correct, accuracy=check.accuracy, seconds=check.seconds,
        errors=check.errors, ok=check.ok and found.agrees, agreement=found.fraction,
        near_ties=found.near_ties, unexplained_disagreements=found.unexplained,
        max_probability_difference=found.max_probability_difference,
        probability_tolerance=PROBABILITY_TOLERANCE,
        expected_accuracy=float(np.mean(in_process == labels)) if len(labels) else 0.0)


def make_verifier(model_dir: str, model_name: str, images: np.ndarray, labels: np.ndarray, *,
                  log=None) -> Callable[..., Comparison]:
    """``verify(url, served_name=model_name) -> Comparison`` for deployments: ok when every
    request succeeds and the served answers agree with the in-process ones (:func:`agreement`).
    ``served_name``: the name the server registered the model under (KServe's Standard-mode
    candidate serves it under its own InferenceService name). The model's own answers are
    computed on the first call: a deployment that is not blessed verifies nothing."""
    expected: list[np.ndarray] = []

    def verify(url: str, served_name: str | None = None) -> Comparison:
        if not expected:
            expected.append(model_probabilities(model_dir, images, log=log))
        result = compare(url, served_name or model_name, images, labels, expected[0], log=log)
        if log:
            log(f"verified {url}: {result.requests} requests, {result.failures} failed, "
                f"accuracy {result.accuracy:.4f}, {result.describe()}")
        return result

    return verify

