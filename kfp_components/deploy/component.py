from typing import NamedTuple

from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from fmnist_kfp.kfp_components.base import component


@component
def deploy_model(
    model: Input[Model],
    dataset: Input[Dataset],
    backend: str,
    model_name: str,
    blessing_tolerance: float,
    verification_images: int,
    serving: dict,
    image: str,
    deployment: Output[Artifact],
    blessing: Output[Metrics],
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
        backend: {setting}
        model_name: {setting}
        blessing_tolerance: {setting}
        verification_images: {setting}
        serving: {setting}
        image: {setting}
        deployment: The decision record (action, URL, blessing, verification).
        blessing: Both test accuracies and whether the model was blessed.

    Returns:
        url: Where the model answers (the serving one when not blessed).
        action: created, promoted, unchanged or rejected.
        serves_model: Whether the deployment now serves this model.
    """
    import json
    from collections import namedtuple

    from fmnist_kfp.kfp_components.deploy.step import SERVES_CANDIDATE, deploy

    decision = deploy(
        model_dir=model.path, model_uri=model.uri,
        test_accuracy=float(model.metadata["test_accuracy"]), data_dir=dataset.path,
        backend=backend, model_name=model_name, tolerance=blessing_tolerance,
        verification_images=verification_images, serving=serving, image=image,
    )
    record = decision["blessing"]
    blessing.log_metric("candidate_test_accuracy", record["candidate_accuracy"])
    if record["serving_accuracy"] is not None:
        blessing.log_metric("serving_test_accuracy", record["serving_accuracy"])
    blessing.log_metric("blessed", int(record["blessed"]))
    deployment.metadata.update({k: v for k, v in decision.items() if v is not None})
    with open(deployment.path, "w") as handle:
        json.dump(decision, handle, indent=2)
    with open(blessing.path, "w") as handle:
        json.dump(blessing.metadata, handle)
    from fmnist_kfp.lineage import add_lineage, content_digest

    serves = decision["action"] in SERVES_CANDIDATE
    # What answers at the URL now: this model (its digest is the served version), or the
    # earlier model that blessing or a failed rollout kept.
    served = {"name": model_name, "url": decision.get("url") or "", "backend": backend,
              "action": decision["action"], "model": model.uri if serves else "earlier model",
              "version": content_digest(model.path) if serves else ""}
    if decision.get("storage_uri"):
        served["storage_uri"] = decision["storage_uri"]
    add_lineage(deployment, "deploy", "deploy_model", inputs={"model": model, "dataset": dataset},
                parameters={"model_name": model_name, "blessing_tolerance": blessing_tolerance,
                            "blessed": record["blessed"],
                            **({"image": serving.get("image") or image}
                               if backend == "kubernetes" else {})}, served=served)
    outputs = namedtuple("DeployOutputs", ["url", "action", "serves_model"])
    return outputs(decision.get("url") or "", decision["action"],
                   decision["action"] in SERVES_CANDIDATE)
