from kfp.dsl import HTML, ClassificationMetrics, Dataset, Input, Markdown, Metrics, Model, Output

from fmnist_kfp.kfp_components.base import component


@component
def select_best_model(
    dataset: Input[Dataset],
    candidates: Input[list[Model]],
    best_model: Output[Model],
    metrics: Output[Metrics],
    confusion_matrix: Output[ClassificationMetrics],
    report: Output[HTML],
    report_markdown: Output[Markdown],
) -> str:
    """Outputs the candidate most accurate on the validation split, and its test accuracy.

    The test split is read once, for the chosen model: choosing on it would overstate the
    accuracy reported.

    Args:
        dataset: The ingested dataset; its validation split decides, its test split reports.
        candidates: The trained models.
        best_model: A copy of the winner, its metadata extended with its validation and test
            figures and the leaderboard of all candidates (validation accuracy).
        metrics: Validation accuracy of every candidate; validation and test accuracy of the
            winner.
        confusion_matrix: The winner's test confusion matrix.
        report: Per-model table, per-class accuracy, training and validation curves, the
            winner's confusion matrix.
        report_markdown: The same tables as Markdown.

    Returns:
        The winning model type.
    """
    import json

    from fmnist_kfp.dataset.official import CLASS_NAMES
    from fmnist_kfp.kfp_components.outputs import publish
    from fmnist_kfp.kfp_components.select.step import select_step

    outputs = select_step(dataset.path, [(c.path, c.metadata) for c in candidates],
                          best_model.path)
    (best_model_type,) = publish(outputs.kfp_outputs(), artifact=best_model, metrics=metrics)
    confusion_matrix.log_confusion_matrix(list(CLASS_NAMES), outputs.confusion_matrix)
    # Files behind every output artifact, so a cached run can reuse them.
    with open(confusion_matrix.path, "w") as handle:
        json.dump(confusion_matrix.metadata, handle)
    with open(report.path, "w") as handle:
        handle.write(outputs.html)
    with open(report_markdown.path, "w") as handle:
        handle.write(outputs.markdown)
    from fmnist_kfp.lineage import LINEAGE_KEY, add_lineage, content_digest

    winner = next(c for c in candidates if c.path == outputs.source_dir)
    entry = add_lineage(best_model, "select", "select_best_model", inputs={
        "dataset": dataset, "model": winner, "candidates": candidates}, parameters={
        "model_type": best_model_type,
        "validation_accuracy": outputs.metadata["validation_accuracy"],
        "test_accuracy": outputs.metadata["test_accuracy"],
        "test_examples": outputs.metadata["test_examples"]})
    for document in (report, report_markdown):
        document.metadata[LINEAGE_KEY] = {**entry, "uri": document.uri,
                                          "digest": content_digest(document.path)}
    return best_model_type
