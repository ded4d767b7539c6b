from typing import NamedTuple

from kfp.dsl import Artifact, Dataset, Input, Model, Output

from fmnist_kfp.kfp_components.base import component


@component
def promote_early(
    model: Input[Model],
    dataset: Input[Dataset],
    promotion: Output[Artifact],
    backend: str = "kubernetes",
    model_name: str = "fashion-mnist",
    blessing_tolerance: float = 0.005,
    verification_images: int = 200,
    serving: dict = {},  # noqa: B006 - KFP reads the default from here
    image: str = "ghcr.io/fmnist-kfp/fmnist-kfp:0.2.0",
) -> NamedTuple("PromoteOutputs", [("url", str), ("action", str)]):
    """Serves a model as soon as it is trained, if it is the best trained so far (serve_early).

    The model is scored on the validation split as selection scores it and served at once
    when nothing is served, or replaces the served model when it is strictly better on
    validation; it is verified with validation images first (the test split stays unread
    until selection). The promotion is atomic: a worse model never replaces a better one,
    whichever training finishes first. ``local``: the predictor on 127.0.0.1, under the
    deployment's lock. ``kubernetes``: a compare-and-swap (its resourceVersion) on a claim,
    the ConfigMap ``<name>-serve-early`` beside the InferenceService (a claim there restarts
    nothing), which the create, its wait and every write of the rollout that follows re-check,
    so a promotion that a better model overtook stops (``superseded``). Never cached: it
    changes what is served.

    Args:
        model: A model that just finished training.
        dataset: The ingested dataset; its validation split scores and verifies the model.
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
        promotion: The decision record (action, URL, validation accuracies, serving since).

    Returns:
        url: Where the deployment answers now.
        action: created, promoted, unchanged, rejected, superseded, rolled_back or failed.
    """
    import json
    from collections import namedtuple

    from fmnist_kfp.kfp_components.promote.step import promote

    decision = promote(
        model_dir=model.path, model_uri=model.uri, model_type=model.metadata["model_type"],
        data_dir=dataset.path, backend=backend, model_name=model_name,
        tolerance=blessing_tolerance, verification_images=verification_images,
        serving=serving, image=image,
    )
    promotion.metadata.update({k: v for k, v in decision.items()
                               if isinstance(v, str | int | float | bool)})
    with open(promotion.path, "w") as handle:
        json.dump(decision, handle, indent=2)
    outputs = namedtuple("PromoteOutputs", ["url", "action"])
    return outputs(decision.get("url") or "", decision["action"])
