from kfp.dsl import Dataset, Input, Metrics, Model, Output

from fmnist_kfp.kfp_components.base import component


@component
def batch_predict(
    model: Input[Model],
    dataset: Input[Dataset],
    predictions: Output[Dataset],
    metrics: Output[Metrics],
    batch_prediction_source: str = "",
    batch_prediction_workers: int = 2,
    backend: str = "kubernetes",
    kubernetes: dict = {},  # noqa: B006 - KFP reads the default from here
    image: str = "ghcr.io/fmnist-kfp/fmnist-kfp:0.2.0",
):
    """Scores a dataset with the selected model, sharded across workers (Vertex AI's batch
    prediction, in the pipeline).

    ``local`` runs one worker process per shard; ``kubernetes`` an Indexed Job, one pod per
    shard (``JOB_COMPLETION_INDEX``), on the shared volume. Inputs are read as the predictor
    reads them; an input that cannot be read becomes an error row, never a failed step. Cached
    by its inputs: a source whose files change under the same name is not noticed.

    Args:
        model: The selected model.
        dataset: The ingested dataset; its test split is the default source.
        batch_prediction_source: What the batch prediction step scores: empty for the ingested test
            split, else a directory or URI (`gs://`, `s3://`; on Kubernetes a path on the shared
            volume) of images (PNG, JPEG, GIF, BMP) or TFRecord files.
        batch_prediction_workers: Shards scored in parallel: worker processes locally, the pods of
            an Indexed Job on Kubernetes.
        backend: `local` (worker processes on this machine, the predictor on 127.0.0.1) or
            `kubernetes` (TFJobs, Katib Experiments, a KServe InferenceService).
        kubernetes: TFJob and trial pod settings, a JSON object with any of: operator, namespace,
            pvc_name, mount_path, cpu, memory, ps_cpu, ps_memory, gpu_node_selector,
            gpu_tolerations, object_store_secret, service_account, restart_policy,
            active_deadline_seconds, ttl_seconds_after_finished, clean_pod_policy, scheduling.
        image: The image of the batch-prediction Job's pods; default: the image this component was
            compiled with.
        predictions: JSON Lines files (id, class, class_name, probabilities, and label when
            known; error rows for unreadable inputs) and ``summary.json``; metadata holds the
            counts, the accuracy when labels exist, images/s and lineage.
        metrics: Accuracy (when labels exist), rows, error rows, images/s.
    """
    from fmnist_kfp.kfp_components.batch_predict.step import batch_predict_step
    from fmnist_kfp.kfp_components.outputs import publish
    from fmnist_kfp.lineage import add_lineage

    result = batch_predict_step(
        model_dir=model.path, data_dir=dataset.path, output_dir=predictions.path,
        source=batch_prediction_source, workers=batch_prediction_workers, backend=backend,
        kubernetes=kubernetes, image=image)
    publish(result.kfp_outputs(), artifact=predictions, metrics=metrics)
    add_lineage(predictions, "batch_predict", "batch_predict",
                inputs={"model": model, "dataset": dataset},
                parameters={"source": predictions.metadata["source"],
                            "workers": batch_prediction_workers, "backend": backend,
                            "accuracy": predictions.metadata["accuracy"],
                            **({"image": image} if backend == "kubernetes" else {})})
