from typing import NamedTuple

from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from fmnist_kfp.kfp_components.base import component


@component
def deploy_model(
    model: Input[Model],
    dataset: Input[Dataset],
    deployment: Output[Artifact],
    blessing: Output[Metrics],
    backend: str = "kubernetes",
    model_name: str = "fashion-mnist",
    blessing_tolerance: float = 0.005,
    verification_images: int = 200,
    serving: dict = {},  # noqa: B006 - KFP reads the default from here
    image: str = "ghcr.io/fmnist-kfp/fmnist-kfp:0.2.0",
) -> NamedTuple("DeployOutputs", [("url", str), ("action", str), ("serves_model", bool)]):
    """Serves the selected model if it is blessed, verified with real test images.

    Blessing (as TFX's Evaluator): the model is deployed only when its test accuracy is at
    least the serving model's minus ``blessing_tolerance``. ``kubernetes``: a KServe
    InferenceService (our predictor or TF Serving); an update goes out as a canary with
    ``canaryTrafficPercent``, is checked with real predictions, then promoted or rolled back.
    ``local``: the predictor on 127.0.0.1, started next to the running one and swapped in
    only after it passes the same check. Never cached: it changes what is served.

    Args:
        model: The selected model; its metadata holds its test accuracy.
        dataset: The ingested dataset; verification uses its test split.
        backend: `local` (worker processes on this machine, the predictor on 127.0.0.1) or
            `kubernetes` (TFJobs, Katib Experiments, a KServe InferenceService).
        model_name: The served model's (and its InferenceService's) name.
        blessing_tolerance: Deploy only when the new model's test accuracy is at least the serving
            model's minus this.
        verification_images: Test images a new server must answer as the model does before it takes
            traffic.
        serving: KServe settings, a JSON object with any of: runtime, storage_uri, namespace, image,
            cpu, memory, min_replicas, max_replicas, scale_metric, scale_target, deployment_mode,
            canary_traffic_percent, service_account, max_batch_size, max_batch_latency_ms,
            uncertain_margin, ready_timeout_seconds (batching also applies locally).
        image: The image of our ServingRuntime's predictor (unless `serving.image` names another);
            default: the image this component was compiled with.
        deployment: The decision record (action, URL, blessing, verification).
        blessing: Both test accuracies and whether the model was blessed.

    Returns:
        url: Where the model answers (the serving one when not blessed).
        action: created, promoted, unchanged or rejected.
        serves_model: Whether the deployment now serves this model.
    """
    from collections import namedtuple

    from fmnist_kfp.kfp_components.deploy.step import deploy, deployment_outputs
    from fmnist_kfp.kfp_components.outputs import publish

    decision = deploy(
        model_dir=model.path, model_uri=model.uri,
        test_accuracy=float(model.metadata["test_accuracy"]), data_dir=dataset.path,
        backend=backend, model_name=model_name, tolerance=blessing_tolerance,
        verification_images=verification_images, serving=serving, image=image,
    )
    url, action, serves = publish(deployment_outputs(decision), artifact=deployment,
                                  metrics=blessing)
    from fmnist_kfp.lineage import add_lineage, content_digest

    # What answers at the URL now: this model (its digest is the served version), or the
    # earlier model that blessing or a failed rollout kept.
    served = {"name": model_name, "url": url, "backend": backend,
              "action": action, "model": model.uri if serves else "earlier model",
              "version": content_digest(model.path) if serves else ""}
    if decision.storage_uri:
        served["storage_uri"] = decision.storage_uri
    add_lineage(deployment, "deploy", "deploy_model", inputs={"model": model, "dataset": dataset},
                parameters={"model_name": model_name, "blessing_tolerance": blessing_tolerance,
                            "blessed": decision.blessing.blessed,
                            **({"image": serving.get("image") or image}
                               if backend == "kubernetes" else {})}, served=served)
    outputs = namedtuple("DeployOutputs", ["url", "action", "serves_model"])
    return outputs(url, action, serves)
