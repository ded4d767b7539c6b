"""Test-split evaluation of an exported model."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fmnist_kfp.dataset.official import NUM_CLASSES


@dataclass
class Evaluation:
    accuracy: float
    per_class_accuracy: list[float]
    confusion_matrix: list[list[int]]  # rows: true class, columns: predicted
    num_examples: int


def confusion_matrix(labels: np.ndarray, predictions: np.ndarray) -> np.ndarray:
    matrix = np.zeros((NUM_CLASSES, NUM_CLASSES), dtype=np.int64)
    np.add.at(matrix, (labels.astype(int), predictions.astype(int)), 1)
    return matrix


def evaluate_predictions(labels: np.ndarray, predictions: np.ndarray) -> Evaluation:
    matrix = confusion_matrix(labels, predictions)
    totals = matrix.sum(axis=1)
    per_class = np.divide(
        np.diag(matrix), totals, out=np.zeros(NUM_CLASSES, dtype=float), where=totals > 0
    )
    return Evaluation(
        accuracy=float((labels == predictions).mean()) if len(labels) else 0.0,
        per_class_accuracy=[round(float(v), 4) for v in per_class],
        confusion_matrix=matrix.tolist(),
        num_examples=int(len(labels)),
    )


def predict(saved_model_dir: str, images: np.ndarray,
            batch_size: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """Probabilities ``[N, 10]`` and class indices ``[N]`` from the exported model's
    ``serving_pixels`` signature."""
    from fmnist_kfp.training.export import load_pixels_predictor

    return predict_with(load_pixels_predictor(saved_model_dir), images, batch_size)


def predict_with(signature, images: np.ndarray,
                 batch_size: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """:func:`predict` with a predictor already loaded
    (:func:`fmnist_kfp.training.export.load_pixels_predictor`)."""
    probabilities, classes = [], []
    for i in range(0, len(images), batch_size):
        outputs = signature(images[i : i + batch_size].astype(np.float32))
        probabilities.append(outputs["probabilities"].numpy())
        classes.append(outputs["class_index"].numpy())
    if not classes:
        return np.zeros((0, NUM_CLASSES), np.float32), np.zeros((0,), np.int32)
    return np.concatenate(probabilities), np.concatenate(classes)


def predict_classes(saved_model_dir: str, images: np.ndarray, batch_size: int = 2048) -> np.ndarray:
    """Class indices from the exported model's ``serving_pixels`` signature."""
    return predict(saved_model_dir, images, batch_size)[1]
