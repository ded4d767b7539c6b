"""The selection step's artifacts: the winner's metadata (its training artifact's, and how it
was chosen: validation accuracy, then its one test-split score by class), and a metric per
candidate (the choice itself: tests/fmnist_kfp/selection/test_select.py)."""

from __future__ import annotations

import json
from pathlib import Path

from fmnist_kfp.dataset.official import CLASS_NAMES
from fmnist_kfp.kfp_components.select.step import select_step
from fmnist_kfp.training.trainer import RESULT_FILE
from tests.fmnist_kfp.selection.test_select import trained_candidates


def test_the_winner_keeps_its_metadata_and_records_how_it_was_chosen(synthetic_dataset,
                                                                      tmp_path):
    paths = trained_candidates(tmp_path)
    candidates = [(path, {"model_type": path.rsplit("/", 1)[-1], "lineage": {"run": i}})
                  for i, path in enumerate(paths)]
    outputs = select_step(str(synthetic_dataset), candidates, str(tmp_path / "best"))
    source = dict(candidates)[outputs.source_dir]
    assert outputs.metadata["lineage"] == source["lineage"]
    assert outputs.metadata["selected_by"] == "validation_accuracy"
    assert list(outputs.metadata["per_class_accuracy"]) == list(CLASS_NAMES)
    assert (outputs.metadata["validation_examples"], outputs.metadata["test_examples"]) == (
        200, 500)
    assert [("test_accuracy" in row) for row in outputs.metadata["leaderboard"]] == [
        path == outputs.source_dir for path in paths]
    assert outputs.metrics["best_test_accuracy"] == outputs.metadata["test_accuracy"]
    model_types = [json.loads((Path(path) / RESULT_FILE).read_text())["model_type"]
                   for path in paths]
    assert set(outputs.metrics) == {"best_test_accuracy", "best_validation_accuracy",
                                    *(f"{name}_validation_accuracy" for name in model_types)}
    assert len(outputs.confusion_matrix) == 10 and outputs.html and outputs.markdown
