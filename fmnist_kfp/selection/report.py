"""The selection report: a per-model table (validation accuracy, which chose; test accuracy of
the chosen model alone), per-class accuracy, training and validation curves of every model and
the winner's test confusion matrix, as HTML (pictures embedded) and Markdown (tables)."""

from __future__ import annotations

import base64
import html
import io
from typing import Any

from fmnist_kfp.dataset.official import CLASS_NAMES


def png_base64(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def training_curves_png(candidates: list[dict[str, Any]]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (ax_acc, ax_loss) = plt.subplots(1, 2, figsize=(10, 3.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, candidate in enumerate(candidates):
        history = candidate.get("history", [])
        epochs = [entry["epoch"] for entry in history]
        color = colors[index % len(colors)]
        name = candidate["model_type"]
        for axis, metric in ((ax_acc, "accuracy"), (ax_loss, "loss")):
            axis.plot(epochs, [e[metric] for e in history], marker="o", ms=3, color=color,
                      label=f"{name} training")
            if history and f"val_{metric}" in history[0]:
                axis.plot(epochs, [e[f"val_{metric}"] for e in history], ls="--", marker="x",
                          ms=3, color=color, label=f"{name} validation")
        scored = candidate.get("evaluation") or []
        if scored:  # the evaluator replica's score of each epoch's checkpoint
            for axis, metric in ((ax_acc, "accuracy"), (ax_loss, "loss")):
                axis.plot([e["epoch"] for e in scored], [e[f"val_{metric}"] for e in scored],
                          ls=":", marker="s", ms=3, color=color,
                          label=f"{name} validation (evaluator)")
    ax_acc.set(title="Accuracy per epoch", xlabel="epoch", ylabel="accuracy")
    ax_loss.set(title="Loss per epoch", xlabel="epoch", ylabel="loss")
    for axis in (ax_acc, ax_loss):
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    encoded = png_base64(figure)
    plt.close(figure)
    return encoded


def confusion_matrix_png(matrix: list[list[int]], title: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    values = np.asarray(matrix)
    figure, axis = plt.subplots(figsize=(6.4, 5.6))
    image = axis.imshow(values, cmap="Blues")
    axis.set_xticks(range(len(CLASS_NAMES)), CLASS_NAMES, rotation=45, ha="right", fontsize=8)
    axis.set_yticks(range(len(CLASS_NAMES)), CLASS_NAMES, fontsize=8)
    axis.set(xlabel="predicted", ylabel="true", title=title)
    threshold = values.max() / 2 if values.size else 0
    for (row, col), count in np.ndenumerate(values):
        axis.text(col, row, str(count), ha="center", va="center", fontsize=7,
                  color="white" if count > threshold else "black")
    figure.colorbar(image, ax=axis, fraction=0.046)
    encoded = png_base64(figure)
    plt.close(figure)
    return encoded


def _rows(candidates: list[dict[str, Any]], best: str) -> list[list[str]]:
    rows = []
    for c in sorted(candidates, key=lambda c: -c["validation_accuracy"]):
        rows.append([
            ("★ " if c["model_type"] == best else "") + c["model_type"],
            f"{c['validation_accuracy']:.4f}",
            f"{c['test_accuracy']:.4f}" if "test_accuracy" in c else "—",
            f"{c['parameters']:,}",
            str(c["epochs"]),
            f"{c['train_seconds']:.1f}",
            f"{c.get('final_metrics', {}).get('accuracy', float('nan')):.4f}",
        ])
    return rows


HEADER = ["model", "validation accuracy", "test accuracy", "parameters", "epochs", "train s",
          "final train accuracy"]
LINEAGE_HEADER = ["model", "model digest", "trained by", "hyperparameters", "dataset digest"]


def lineage_rows(candidates: list[dict[str, Any]]) -> list[list[str]]:
    """Which run and data produced each candidate (its ``lineage`` entry, fmnist_kfp.lineage)."""
    rows = []
    for c in candidates:
        lineage = c.get("lineage") or {}
        parameters = lineage.get("parameters") or {}
        producer = lineage.get("producer") or {}
        dataset = (lineage.get("inputs") or {}).get("dataset") or {}
        hyperparameters = parameters.get("hyperparameters") or c.get("hyperparameters") or {}
        trained_by = " ".join(filter(None, [
            producer.get("step", ""), parameters.get("job_name", ""),
            f"({parameters['backend']})" if parameters.get("backend") else "",
            producer.get("pod", "")]))
        rows.append([
            c["model_type"], lineage.get("digest", "")[:19], trained_by,
            ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in sorted(hyperparameters.items())
                      if k in ("learning_rate", "batch_size", "filters", "dropout_rate")),
            dataset.get("digest", "")[:19],
        ])
    return rows


def evaluation_markdown(candidates: list[dict[str, Any]]) -> list[str]:
    """The evaluator's validation accuracy per epoch, one column per model that had one."""
    scored = [c for c in candidates if c.get("evaluation")]
    if not scored:
        return []
    by_model = [{e["epoch"]: e for e in c["evaluation"]} for c in scored]
    epochs = sorted(set().union(*by_model))
    lines = ["", "## Validation accuracy per epoch (evaluator)", "",
             "| epoch | " + " | ".join(c["model_type"] for c in scored) + " |",
             "|---|" + "---|" * len(scored)]
    for epoch in epochs:
        cells = [f"{m[epoch]['val_accuracy']:.4f}" if epoch in m else "" for m in by_model]
        lines.append(f"| {epoch} | " + " | ".join(cells) + " |")
    return lines


def chosen_by(best: str, num_validation: int, num_test: int) -> str:
    return (f"chosen by accuracy on the {num_validation:,} validation images (set aside from the "
            f"training files at ingestion); the test split ({num_test:,} images) was read once, "
            f"to report the chosen model")


def per_class_header(candidates: list[dict[str, Any]], best: str) -> list[str]:
    return (["class"] + [f"{c['model_type']} (validation)" for c in candidates]
            + [f"{best} (test)"])


def per_class_rows(candidates: list[dict[str, Any]], best: str) -> list[list[str]]:
    winner = next(c for c in candidates if c["model_type"] == best)
    return [[name] + [f"{c['validation_per_class_accuracy'][i]:.3f}" for c in candidates]
            + [f"{winner['per_class_accuracy'][i]:.3f}"] for i, name in enumerate(CLASS_NAMES)]


def photo_examples_png(examples: list[dict[str, Any]]) -> str:
    """A grid: each example as sent (as stored, EXIF not applied), above what the model sees
    after the server's preprocessing, titled with the answer and its probability."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, len(examples), figsize=(1.9 * len(examples), 4.4),
                                squeeze=False)
    for column, example in enumerate(examples):
        sent, seen = axes[0][column], axes[1][column]
        sent.imshow(example["stored"])
        sent.set_title(f"{example['variant']}\n{example['format']} "
                       f"{example['size'][0]}×{example['size'][1]}", fontsize=7)
        seen.imshow(example["seen"], cmap="gray", vmin=0, vmax=255)
        right = example["predicted"] == example["true"]
        seen.set_title(f"{example['predicted']} {100 * example['probability']:.0f}%\n"
                       f"({'right' if right else 'true: ' + example['true']})", fontsize=7,
                       color="#1a7f37" if right else "#cf222e")
        for axis in (sent, seen):
            axis.set_xticks([])
            axis.set_yticks([])
    axes[0][0].set_ylabel("as sent", fontsize=8)
    axes[1][0].set_ylabel("as the model sees it", fontsize=8)
    figure.tight_layout()
    encoded = png_base64(figure)
    plt.close(figure)
    return encoded


def photo_examples_markdown(examples: list[dict[str, Any]]) -> list[str]:
    if not examples:
        return []
    lines = ["", "## The chosen model on photos", "",
             "Test images sent as people send photos, after the server's preprocessing:", "",
             "| sent as | true class | answer | probability |", "|---|---|---|---|"]
    lines += [f"| {e['variant']} ({e['format']} {e['size'][0]}×{e['size'][1]}) | {e['true']} "
              f"| {e['predicted']} | {100 * e['probability']:.1f}% |" for e in examples]
    return lines


def markdown_report(candidates: list[dict[str, Any]], best: str, num_validation: int,
                    num_test: int, photos: list[dict[str, Any]] | None = None) -> str:
    lines = [
        "# Fashion-MNIST model selection",
        "",
        f"Winner: **{best}**, {chosen_by(best, num_validation, num_test)}.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in _rows(candidates, best)]
    header = per_class_header(candidates, best)
    lines += ["", "## Per-class accuracy", "", "| " + " | ".join(header) + " |",
              "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in per_class_rows(candidates, best)]
    lines += evaluation_markdown(candidates)
    if any(c.get("lineage") for c in candidates):
        lines += ["", "## Lineage", "", "| " + " | ".join(LINEAGE_HEADER) + " |",
                  "|" + "---|" * len(LINEAGE_HEADER)]
        lines += ["| " + " | ".join(row) + " |" for row in lineage_rows(candidates)]
    lines += photo_examples_markdown(photos or [])
    return "\n".join(lines) + "\n"


def html_report(candidates: list[dict[str, Any]], best: str, num_validation: int,
                num_test: int, photos: list[dict[str, Any]] | None = None) -> str:
    def table(header: list[str], rows: list[list[str]]) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
            for row in rows
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    winner = next(c for c in candidates if c["model_type"] == best)
    lineage = ""
    if any(c.get("lineage") for c in candidates):
        lineage = "<h2>Lineage</h2>\n" + table(LINEAGE_HEADER, lineage_rows(candidates))
    curves = training_curves_png(candidates)
    scored = evaluation_markdown(candidates)
    evaluation = ""
    if scored:  # the same table as the Markdown's, as HTML
        rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in scored[5:]]
        evaluation = ("<h2>Validation accuracy per epoch (evaluator)</h2>\n"
                      + table(["epoch"] + [c["model_type"] for c in candidates
                                           if c.get("evaluation")], rows))
    matrix = confusion_matrix_png(winner["confusion_matrix"], f"{best}: test confusion matrix")
    grid = ""
    if photos:
        grid = ("<h2>The chosen model on photos</h2>\n<p>Test images sent as people send "
                "photos; below each, what the model sees after the server's preprocessing, "
                "and its answer.</p>\n<img alt=\"photos as sent and as the model sees them\" "
                f"src=\"data:image/png;base64,{photo_examples_png(photos)}\">")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Fashion-MNIST model selection</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ border: 1px solid #ccc; padding: 4px 10px; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
thead {{ background: #f3f3f3; }}
</style></head><body>
<h1>Fashion-MNIST model selection</h1>
<p>Winner: <b>{html.escape(best)}</b>: validation accuracy
<b>{winner['validation_accuracy']:.4f}</b>, test accuracy <b>{winner['test_accuracy']:.4f}</b>;
{html.escape(chosen_by(best, num_validation, num_test))}.</p>
{table(HEADER, _rows(candidates, best))}
<h2>Training and validation curves</h2>
<img alt="training and validation curves" src="data:image/png;base64,{curves}">
{evaluation}
<h2>Per-class accuracy</h2>
{table(per_class_header(candidates, best), per_class_rows(candidates, best))}
<h2>Confusion matrix of the winner</h2>
<img alt="confusion matrix" src="data:image/png;base64,{matrix}">
{grid}
{lineage}
</body></html>
"""
