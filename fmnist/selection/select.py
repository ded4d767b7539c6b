"""Evaluate every candidate on the test split and keep the most accurate."""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass
from typing import Any

from fmnist.errors import UserInputError
from fmnist.selection.evaluate import evaluate_predictions, predict_classes
from fmnist.selection.report import html_report, markdown_report
from fmnist.training.trainer import read_result


@dataclass
class Selection:
    best: dict[str, Any]
    candidates: list[dict[str, Any]]
    num_test_examples: int
    markdown: str
    html: str


def select_best(data_dir: str, model_dirs: list[str], best_model_dir: str,
                lineages: dict[str, dict[str, Any]] | None = None) -> Selection:
    """Evaluates each model directory on the test split, copies the best to ``best_model_dir``.

    Ties go to the smaller model (fewer parameters), then to the earlier candidate.
    ``lineages``: each model directory's lineage entry, shown in the reports.
    """
    from fmnist.dataset.pipeline import load_arrays
    from fmnist.training.export import SAVED_MODEL_VERSION

    if not model_dirs:
        raise UserInputError("no candidate models to select from")
    images, labels = load_arrays(data_dir, "test")
    candidates = []
    for model_dir in model_dirs:
        result = read_result(model_dir)
        predictions = predict_classes(os.path.join(model_dir, SAVED_MODEL_VERSION), images)
        evaluation = evaluate_predictions(labels, predictions)
        candidates.append(
            {
                "model_type": result["model_type"],
                "test_accuracy": round(evaluation.accuracy, 4),
                **{k: v for k, v in asdict(evaluation).items() if k != "accuracy"},
                "parameters": result["parameters"],
                "epochs": result["epochs"],
                "train_seconds": result["train_seconds"],
                "hyperparameters": result["hyperparameters"],
                "final_metrics": result["final_metrics"],
                "history": result["history"],
                # The evaluator replica's per-epoch validation metrics (empty without one).
                "evaluation": result.get("evaluation", []),
                "model_dir": model_dir,
                "lineage": (lineages or {}).get(model_dir) or {},
            }
        )
    best = max(
        enumerate(candidates),
        key=lambda item: (item[1]["test_accuracy"], -item[1]["parameters"], -item[0]),
    )[1]
    if os.path.exists(best_model_dir):
        shutil.rmtree(best_model_dir)
    shutil.copytree(best["model_dir"], best_model_dir)
    return Selection(
        best=best,
        candidates=candidates,
        num_test_examples=int(len(labels)),
        markdown=markdown_report(candidates, best["model_type"], len(labels)),
        html=html_report(candidates, best["model_type"], len(labels)),
    )


def leaderboard(selection: Selection) -> list[dict[str, Any]]:
    """The per-model figures worth keeping in artifact metadata and run summaries."""
    keys = ("model_type", "test_accuracy", "parameters", "epochs", "train_seconds",
            "hyperparameters")
    return [{k: c[k] for k in keys} for c in selection.candidates]
