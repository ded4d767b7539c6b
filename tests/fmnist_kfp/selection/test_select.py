"""Selection: every candidate scored on the validation split, the most accurate (ties to the
smaller model) copied out and the only one scored on the test split, its test-split answers
stored beside it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.selection.held_out_scores import stored_probabilities
from fmnist_kfp.selection.select import leaderboard, select_best, validation_accuracy
from fmnist_kfp.training.trainer import RESULT_FILE
from tests.conftest import export_untrained_model


def trained_candidates(directory: Path, seeds=(7, 8), parameters=(1000, 1000)) -> list[str]:
    """Untrained exported CNNs, one per seed, each with the result.json a training run writes
    (its model type named for ``directory`` and the seed: the reports tell models apart by it)."""
    candidates = []
    for seed, size in zip(seeds, parameters, strict=True):
        model_dir = export_untrained_model(directory / f"model-{seed}", seed=seed)
        (model_dir / RESULT_FILE).write_text(json.dumps({
            "model_type": f"{directory.name}-{seed}", "parameters": size, "epochs": 1,
            "train_seconds": 1.0, "hyperparameters": {}, "final_metrics": {}, "history": {}}))
        candidates.append(str(model_dir))
    return candidates


def test_the_most_accurate_candidate_is_chosen_and_only_it_sees_the_test_split(
        synthetic_dataset, tmp_path):
    from fmnist_kfp.dataset.pipeline import load_arrays

    candidates = trained_candidates(tmp_path)
    accuracies = [validation_accuracy(path, str(synthetic_dataset)) for path in candidates]
    selection = select_best(str(synthetic_dataset), candidates, str(tmp_path / "best"))
    assert [c["validation_accuracy"] for c in selection.candidates] == accuracies
    # Ties go to the earlier candidate (the sizes are equal).
    assert selection.best["model_dir"] == candidates[int(np.argmax(accuracies))]
    board = leaderboard(selection)
    assert [("test_accuracy" in row) for row in board] == [
        c["model_dir"] == selection.best["model_dir"] for c in selection.candidates]
    assert selection.num_test_examples == 500 and selection.num_validation_examples == 200
    test_images, _ = load_arrays(str(synthetic_dataset), "test")
    assert stored_probabilities(str(tmp_path / "best"), test_images).shape == (500, 10)


def test_a_tie_goes_to_the_smaller_model(synthetic_dataset, tmp_path):
    # The same seed twice: the same answers, so the smaller of the two wins though it is later.
    first = trained_candidates(tmp_path / "a", seeds=(7,), parameters=(2000,))
    second = trained_candidates(tmp_path / "b", seeds=(7,), parameters=(1000,))
    selection = select_best(str(synthetic_dataset), first + second, str(tmp_path / "best"))
    assert selection.best["model_dir"] == second[0]


def test_no_candidates_is_refused():
    with pytest.raises(UserInputError, match="no candidate models"):
        select_best("data", [], "best")
