from kfp.dsl import Dataset, Input, Metrics, Model, Output

from kfp_components.base import component


@component
def predict_with_served_model(
    model: Input[Model],
    dataset: Input[Dataset],
    url: str,
    model_name: str,
    sample_size: int,
    serves_model: bool,
    metrics: Output[Metrics],
) -> float:
    """Sends real test images to the served model over HTTP and records its accuracy.

    The images go as base64 PNGs in V1 ``:predict`` requests, as a user's client sends them.
    The served answers must equal the selected model's own predictions on the same images
    (the selection step's accuracy on them); any difference fails the step. When blessing kept
    an earlier model in service, its accuracy is recorded without that comparison.

    Args:
        model: The model the server should be serving.
        dataset: The ingested dataset; the first ``sample_size`` test images are sent.
        url: The server's base URL, from the deploy step.
        model_name: The served model's name.
        sample_size: How many test images to send.
        serves_model: Whether the server serves ``model`` (from the deploy step).
        metrics: Served accuracy, the selection accuracy on the same images, agreement,
            requests and failures.

    Returns:
        The served model's accuracy on the sample.
    """
    import json

    from serving.verification import compare, in_process_predictions, test_sample

    images, labels = test_sample(dataset.path, sample_size)
    expected = in_process_predictions(model.path, images)
    result = compare(url, model_name, images, labels, expected, log=print)
    for name in ("accuracy", "expected_accuracy", "agreement", "requests", "failures",
                 "images", "seconds"):
        metrics.log_metric({"accuracy": "served_accuracy",
                            "expected_accuracy": "selection_accuracy"}.get(name, name),
                           result[name])
    with open(metrics.path, "w") as handle:
        json.dump(metrics.metadata, handle)
    print(f"served accuracy {result['accuracy']:.4f} on {result['images']} test images "
          f"(selection: {result['expected_accuracy']:.4f}), {result['failures']} failed requests")
    if result["failures"]:
        raise RuntimeError(f"{result['failures']} requests to {url} failed: {result['errors']}")
    if not serves_model:
        print("the server keeps an earlier model (this one was not blessed): no comparison")
    elif not result["ok"] or result["accuracy"] != result["expected_accuracy"]:
        raise RuntimeError(
            f"the served model at {url} does not answer like the selected model: agreement "
            f"{result['agreement']:.4f}, served accuracy {result['accuracy']:.4f} vs "
            f"{result['expected_accuracy']:.4f}; errors: {result['errors']}"
        )
    return float(result["accuracy"])
