"""The selection step: every candidate scored on the validation split, the best copied out and
evaluated once on the test split, and what the step's artifacts record (winner metadata,
metrics, confusion matrix, reports)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fmnist_kfp.dataset.official import CLASS_NAMES
from fmnist_kfp.kfp_components import reports_errors_briefly
from fmnist_kfp.kfp_components.outputs import StepOutputs
from fmnist_kfp.selection.select import leaderboard, select_best


@dataclass
class SelectionOutputs:
    best_model_type: str
    metadata: dict[str, Any]  # of the best Model artifact
    metrics: dict[str, float]
    confusion_matrix: list[list[int]]
    html: str
    markdown: str
    source_dir: str = ""  # the winning candidate's directory

    def kfp_outputs(self) -> StepOutputs:
        """The best model's metadata, the metrics, and its model type as the step's output."""
        return StepOutputs(metadata=self.metadata, metrics=self.metrics,
                           returns=(self.best_model_type,))


@reports_errors_briefly
def select_step(data_dir: str, candidates: list[tuple[str, dict[str, Any]]],
                best_model_dir: str) -> SelectionOutputs:
    """``candidates``: each model's directory and artifact metadata."""
    selection = select_best(data_dir, [path for path, _ in candidates], best_model_dir,
                            {path: metadata.get("lineage") or {} for path, metadata in candidates})
    best = selection.best
    source = next(metadata for path, metadata in candidates if path == best["model_dir"])
    metadata = {
        **source,
        "selected_by": "validation_accuracy",
        "validation_accuracy": best["validation_accuracy"],
        "validation_examples": selection.num_validation_examples,
        "test_accuracy": best["test_accuracy"],
        "per_class_accuracy": dict(zip(CLASS_NAMES, best["per_class_accuracy"], strict=True)),
        "test_examples": selection.num_test_examples,
        "leaderboard": leaderboard(selection),
    }
    metrics = {"best_test_accuracy": best["test_accuracy"],
               "best_validation_accuracy": best["validation_accuracy"]}
    metrics.update({f"{c['model_type']}_validation_accuracy": c["validation_accuracy"]
                    for c in selection.candidates})
    return SelectionOutputs(best["model_type"], metadata, metrics, best["confusion_matrix"],
                            selection.html, selection.markdown, best["model_dir"])
