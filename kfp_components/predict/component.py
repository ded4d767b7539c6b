from kfp.dsl import Dataset, Input, Metrics, Model, Output

from fmnist_kfp.kfp_components.base import component


@component
def predict_with_served_model(
    model: Input[Model],
    dataset: Input[Dataset],
    url: str,
    metrics: Output[Metrics],
    model_name: str = "fashion-mnist",
    sample_size: int = 1000,
    serves_model: bool = True,
) -> float:
    """Sends real test images to the served model over HTTP and records its accuracy.

    The images go as base64 PNGs in V1 ``:predict`` requests, as a user's client sends them.
    The served answers must be the selected model's own on the same images: probabilities
    within 1e-3, and a class that differs only where the model nearly ties between two
    classes (float rounding of two numerical paths); anything else fails the step. When
    blessing kept an earlier model in service, its accuracy is recorded without that
    comparison.

    Args:
        model: The model the server should be serving.
        dataset: The ingested dataset; the first ``sample_size`` test images are sent.
        url: The server's base URL, from the deploy step.
        model_name: The served model's (and its InferenceService's) name.
        sample_size: The number of test images to send (the pipeline's prediction_images).
        serves_model: Whether the server serves ``model`` (from the deploy step); when it
            does, its answers must be the model's own (see above).
        metrics: Served accuracy, the selection accuracy on the same images, agreement (the
            fraction of equal classes), near-ties, unexplained disagreements, requests and
            failures.

    Returns:
        The served model's accuracy on the sample.
    """
    from fmnist_kfp.kfp_components.outputs import publish
    from fmnist_kfp.kfp_components.predict.step import predict_step

    prediction = predict_step(model_dir=model.path, data_dir=dataset.path, url=url,
                              model_name=model_name, sample_size=sample_size,
                              serves_model=serves_model)
    (served_accuracy,) = publish(prediction.kfp_outputs(), metrics=metrics)
    from fmnist_kfp.lineage import add_lineage

    add_lineage(metrics, "predict", "predict_with_served_model",
                inputs={"model": model, "dataset": dataset},
                parameters={"url": url, "model_name": model_name, "sample_size": sample_size,
                            "serves_model": serves_model})
    return served_accuracy
