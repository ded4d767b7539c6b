"""Choose among the candidates on the validation split, then report the chosen model's test
accuracy, read once.

The validation split is what ingestion set aside from the training files
(:mod:`fmnist_kfp.dataset.ingest`); every candidate is scored on it through its exported model (what
serving runs, flip averaging included). The test split is read once, after the choice, for the
winner alone: a model chosen by its test accuracy would report an accuracy that overstates what
it does on new images.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass
from typing import Any

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.selection.evaluate import evaluate_predictions, predict_classes, predict_with
from fmnist_kfp.selection.held_out_scores import store_probabilities
from fmnist_kfp.selection.report import html_report, markdown_report
from fmnist_kfp.training.trainer import read_result


@dataclass
class Selection:
    best: dict[str, Any]
    candidates: list[dict[str, Any]]
    num_validation_examples: int
    num_test_examples: int
    markdown: str
    html: str


def validation_accuracy(model_dir: str, data_dir: str) -> float:
    """A trained model's accuracy on the validation split, as selection scores it (rounded to
    4 places): what ``serve_early`` promotes on, so that it ranks models as selection does."""
    from fmnist_kfp.dataset.pipeline import load_arrays
    from fmnist_kfp.training.export import SAVED_MODEL_VERSION

    images, labels = load_arrays(data_dir, "validation")
    predictions = predict_classes(os.path.join(model_dir, SAVED_MODEL_VERSION), images)
    return round(evaluate_predictions(labels, predictions).accuracy, 4)


def select_best(data_dir: str, model_dirs: list[str], best_model_dir: str,
                lineages: dict[str, dict[str, Any]] | None = None) -> Selection:
    """Scores each model directory on the validation split, copies the most accurate to
    ``best_model_dir`` and evaluates it (only it) on the test split.

    Ties go to the smaller model (fewer parameters), then to the earlier candidate.
    ``lineages``: each model directory's lineage entry, shown in the reports.
    """
    from fmnist_kfp.dataset.pipeline import load_arrays
    from fmnist_kfp.training.export import SAVED_MODEL_VERSION, load_pixels_predictor

    if not model_dirs:
        raise UserInputError("no candidate models to select from")
    images, labels = load_arrays(data_dir, "validation")
    candidates, predictors = [], {}
    for model_dir in model_dirs:
        result = read_result(model_dir)
        # Each model is loaded once: the chosen one scores the test split with it too.
        predictors[model_dir] = load_pixels_predictor(os.path.join(model_dir, SAVED_MODEL_VERSION))
        predictions = predict_with(predictors[model_dir], images)[1]
        evaluation = evaluate_predictions(labels, predictions)
        candidates.append(
            {
                "model_type": result["model_type"],
                "validation_accuracy": round(evaluation.accuracy, 4),
                "validation_per_class_accuracy": evaluation.per_class_accuracy,
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
        key=lambda item: (item[1]["validation_accuracy"], -item[1]["parameters"], -item[0]),
    )[1]
    # The one read of the test split: the chosen model's report.
    test_images, test_labels = load_arrays(data_dir, "test")
    chosen = predictors[best["model_dir"]]
    test_probabilities, test_predictions = predict_with(chosen, test_images)
    test = evaluate_predictions(test_labels, test_predictions)
    best.update({"test_accuracy": round(test.accuracy, 4),
                 **{k: v for k, v in asdict(test).items() if k != "accuracy"}})
    if os.path.exists(best_model_dir):
        shutil.rmtree(best_model_dir)
    shutil.copytree(best["model_dir"], best_model_dir)
    # Deployment and prediction compare served answers with these, without TensorFlow.
    store_probabilities(best_model_dir, test_images, test_probabilities)
    counts = {"num_validation": int(len(labels)), "num_test": int(len(test_labels))}
    from importlib.util import find_spec

    from fmnist_kfp.selection.photo_examples import photo_examples

    # The server's image decoder comes with the serving extra; without it the report has no
    # photo examples.
    photos = photo_examples(chosen, test_images, test_labels) if find_spec("kserve") else []
    return Selection(
        best=best,
        candidates=candidates,
        num_validation_examples=counts["num_validation"],
        num_test_examples=counts["num_test"],
        markdown=markdown_report(candidates, best["model_type"], **counts, photos=photos),
        html=html_report(candidates, best["model_type"], **counts, photos=photos),
    )


def leaderboard(selection: Selection) -> list[dict[str, Any]]:
    """The per-model figures worth keeping in artifact metadata and run summaries: every
    candidate's validation accuracy; test accuracy for the chosen one only."""
    keys = ("model_type", "validation_accuracy", "parameters", "epochs", "train_seconds",
            "hyperparameters")
    return [{**{k: c[k] for k in keys},
             **({"test_accuracy": c["test_accuracy"]} if "test_accuracy" in c else {})}
            for c in selection.candidates]
