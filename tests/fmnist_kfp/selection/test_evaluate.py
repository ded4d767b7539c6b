"""Evaluation as selection and batch prediction score a model: accuracy, per-class accuracy
(a class without examples scores 0, not NaN) and the confusion matrix; predictions in batches
concatenated in order."""

from __future__ import annotations

import numpy as np

from fmnist_kfp.selection.evaluate import evaluate_predictions, predict_with


def test_accuracy_per_class_and_confusion_count_each_example_once():
    labels = np.array([0, 0, 1, 2, 2, 2])
    predictions = np.array([0, 1, 1, 2, 2, 0])
    evaluation = evaluate_predictions(labels, predictions)
    assert evaluation.accuracy == 4 / 6 and evaluation.num_examples == 6
    assert evaluation.per_class_accuracy[:4] == [0.5, 1.0, 0.6667, 0.0]  # class 3: none
    matrix = np.array(evaluation.confusion_matrix)
    assert matrix.shape == (10, 10) and matrix.sum() == 6
    assert matrix[0, 1] == 1 and matrix[2, 0] == 1 and matrix[2, 2] == 2  # rows: true class
    assert evaluate_predictions(np.array([]), np.array([])).accuracy == 0.0


class _Tensor:
    """A signature's output tensor, read with ``.numpy()``."""

    def __init__(self, value):
        self.value = value

    def numpy(self):
        return self.value


def test_predictions_in_batches_are_the_inputs_in_order():
    calls = []

    def signature(batch):
        calls.append(len(batch))
        sums = batch.reshape(len(batch), -1).sum(axis=1)
        probabilities = np.zeros((len(batch), 10), np.float32)
        probabilities[:, 0] = sums
        return dict(probabilities=_Tensor(probabilities),
                    class_index=_Tensor(sums.astype(np.int32) % 10))

    images = np.arange(5, dtype=np.uint8).reshape(5, 1, 1)
    probabilities, classes = predict_with(signature, images, batch_size=2)
    assert calls == [2, 2, 1]
    assert classes.tolist() == [0, 1, 2, 3, 4] and probabilities[:, 0].tolist() == [0, 1, 2, 3, 4]
    empty, none = predict_with(signature, images[:0])
    assert empty.shape == (0, 10) and none.shape == (0,) and calls == [2, 2, 1]
