"""The Fashion-MNIST pipeline: ingest → tune (optional) and train three CNNs in parallel →
select → deploy → predict over HTTP."""

import dataclasses
import os
from typing import NamedTuple

from kfp import dsl, kubernetes
from kfp.dsl import HTML, Artifact, Markdown, Model

from fmnist.launcher.tfjob import KubernetesSettings
from fmnist.parameters import PipelineParameters
from kfp_components.deploy import deploy_model
from kfp_components.freshness import freshness_window
from kfp_components.ingest import ingest_fashion_mnist
from kfp_components.predict import predict_with_served_model
from kfp_components.select import select_best_model
from kfp_components.train import train_model
from kfp_components.tune import tune_hyperparameters

PIPELINE_NAME = "fashion-mnist-training"
MOUNT_PATH = KubernetesSettings.mount_path
_D = PipelineParameters()


class PipelineOutputs(NamedTuple):
    best_model: Model
    report: HTML
    report_markdown: Markdown
    best_model_type: str
    deployment: Artifact
    serving_url: str
    served_accuracy: float


@dataclasses.dataclass(frozen=True)
class ClusterPlatform:
    """Compile-time settings of the Kubeflow variant (``FMNIST_PVC_NAME`` and friends).

    The training step and its TFJob pods share ``pvc_name`` at ``MOUNT_PATH`` (dataset copy,
    checkpoints, the export); ingestion and training get the object-store credentials of
    ``credentials_secret`` as environment variables (for s3:// or gs:// data sources).
    """

    pvc_name: str = "fmnist-data"
    credentials_secret: str = "fmnist-object-store"
    credential_keys: tuple[str, ...] = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")

    @classmethod
    def from_env(cls) -> "ClusterPlatform":
        return cls(
            pvc_name=os.environ.get("FMNIST_PVC_NAME", cls.pvc_name),
            credentials_secret=os.environ.get("FMNIST_CREDENTIALS_SECRET", cls.credentials_secret),
        )

    def defaults(self) -> PipelineParameters:
        return dataclasses.replace(
            _D, data_source="tfds", backend="kubernetes", num_workers=2,
            # One key only: protobuf orders a dict's keys by hash, so compiles of a larger
            # default would differ from process to process.
            kubernetes={"pvc_name": self.pvc_name},
        )

    def apply(self, task, *, volume: bool) -> None:
        kubernetes.use_secret_as_env(
            task, secret_name=self.credentials_secret,
            secret_key_to_env={key: key for key in self.credential_keys}, optional=True,
        )
        if volume:
            kubernetes.mount_pvc(task, pvc_name=self.pvc_name, mount_path=MOUNT_PATH)


def make_pipeline(parallelism: int = 0, platform: ClusterPlatform | None = None):
    """Builds the pipeline; ``parallelism`` caps concurrent training steps (0: no cap).

    On one machine, training one model at a time (parallelism 1) gives each job every core;
    on a cluster each TFJob brings its own pods, so all models train at once. With a
    ``platform`` the pipeline defaults to TFJobs and carries the Kubernetes settings.
    """
    _D = platform.defaults() if platform else PipelineParameters()  # noqa: N806

    @dsl.pipeline(name=PIPELINE_NAME)
    def fashion_mnist_pipeline(
        data_source: str = _D.data_source,
        freshness: str = _D.freshness,
        expected_sha256: dict = _D.expected_sha256,
        model_types: list = _D.model_types,
        epochs: int = _D.epochs,
        batch_size: int = _D.batch_size,
        learning_rate: float = _D.learning_rate,
        dropout_rate: float = _D.dropout_rate,
        filters: int = _D.filters,
        precision: str = _D.precision,
        train_examples: int = _D.train_examples,
        num_workers: int = _D.num_workers,
        gpus_per_worker: int = _D.gpus_per_worker,
        backend: str = _D.backend,
        kubernetes: dict = _D.kubernetes,
        max_restarts: int = _D.max_restarts,
        tune: bool = _D.tune,
        tuning: dict = _D.tuning,
        model_name: str = _D.model_name,
        blessing_tolerance: float = _D.blessing_tolerance,
        verification_images: int = _D.verification_images,
        prediction_images: int = _D.prediction_images,
        serving: dict = _D.serving,
    ) -> PipelineOutputs:
        """Trains basic, dropout and batch-norm CNNs on Fashion-MNIST with
        MultiWorkerMirroredStrategy, keeps the most accurate on the test split, serves it
        (KServe on Kubeflow, the same predictor on 127.0.0.1 locally) if it is blessed, and
        scores the served model over HTTP. With ``tune``, each CNN's hyperparameters are
        first searched (Katib on Kubeflow, Optuna locally) and the best ones train it.

        Args:
            data_source: ``tfds``, a directory or URI with the four official IDX .gz files,
                or empty for $FASHION_MNIST_DIR (else TFDS).
            freshness: How long ingested data is reused from cache: ``30m``, ``24h``, ``7d``.
            expected_sha256: Per-file digests replacing the official ones (derived data only).
            model_types: The CNNs to train: any of ``basic``, ``dropout``, ``batchnorm``.
            epochs: Passes over the training split per model.
            batch_size: Per-replica batch size; global batch = batch_size × workers.
            learning_rate: Adam's learning rate.
            dropout_rate: Dropout rate of the dropout CNN.
            filters: Filters of the first convolution (the others have twice as many).
            precision: ``auto``, ``float32``, ``mixed_bfloat16`` or ``mixed_float16``.
            train_examples: Train on the first N training examples (0: all 60,000).
            num_workers: Worker replicas per training job.
            gpus_per_worker: GPUs per worker; NCCL all-reduce when more than 0.
            backend: ``local`` (worker processes) or ``kubernetes`` (TFJobs).
            kubernetes: TFJob settings: namespace, pvc_name, mount_path, object_store_secret,
                cpu, memory, backoff_limit, active_deadline_seconds, ttl_seconds_after_finished.
            max_restarts: Whole-job restarts after a worker is killed; training resumes from
                the last epoch checkpoint.
            tune: Search each CNN's learning rate, batch size, filters (and dropout rate)
                before training it; the search's best values replace the ones above.
            tuning: Search settings: algorithm (random, grid, tpe, multivariate-tpe;
                bayesianoptimization and cmaes on Katib), max_trials, parallel_trials,
                max_failed_trials, epochs, train_examples, validation_examples,
                early_stopping, min_trials_required, start_step, objective_goal,
                random_state.
            model_name: Name of the served model and of its InferenceService.
            blessing_tolerance: Deploy only when test accuracy >= the serving model's minus this.
            verification_images: Test images a new server must answer right before it serves.
            prediction_images: Test images the prediction step sends to the served model.
            serving: KServe settings: runtime (fmnist-predictor or tensorflow), storage_uri,
                namespace, min_replicas, max_replicas, scale_metric, scale_target,
                canary_traffic_percent, cpu, memory, service_account; and for both backends
                max_batch_size, max_batch_latency_ms.
        """
        window = freshness_window(freshness=freshness)
        window.set_caching_options(False)  # it reads the clock
        window.set_display_name("freshness-window")
        ingest = ingest_fashion_mnist(
            data_source=data_source,
            freshness_window=window.output,
            expected_sha256=expected_sha256,
        )
        ingest.set_display_name("ingest")
        if platform:
            platform.apply(ingest, volume=False)

        with dsl.ParallelFor(items=model_types, parallelism=parallelism) as model_type:
            # With tune off the search step hands the given values on at once (and is
            # cached): one graph for both, which kfp.local and the cluster run alike.
            search = tune_hyperparameters(
                dataset=ingest.outputs["dataset"], model_type=model_type, enabled=tune,
                batch_size=batch_size, learning_rate=learning_rate, dropout_rate=dropout_rate,
                filters=filters, precision=precision, tuning=tuning, backend=backend,
                kubernetes=kubernetes,
            )
            search.set_display_name("tune")
            if platform:
                platform.apply(search, volume=True)
            train = train_model(
                dataset=ingest.outputs["dataset"],
                model_type=model_type,
                epochs=epochs,
                batch_size=search.outputs["batch_size"],
                learning_rate=search.outputs["learning_rate"],
                dropout_rate=search.outputs["dropout_rate"],
                filters=search.outputs["filters"],
                precision=precision,
                train_examples=train_examples,
                num_workers=num_workers,
                gpus_per_worker=gpus_per_worker,
                backend=backend,
                kubernetes=kubernetes,
                max_restarts=max_restarts,
            )
            train.set_display_name("train")
            if platform:
                platform.apply(train, volume=True)
        select = select_best_model(
            dataset=ingest.outputs["dataset"],
            candidates=dsl.Collected(train.outputs["model"]),
        )
        select.set_display_name("select")
        best_model = select.outputs["best_model"]
        deploy = deploy_model(
            model=best_model,
            dataset=ingest.outputs["dataset"],
            backend=backend,
            model_name=model_name,
            blessing_tolerance=blessing_tolerance,
            verification_images=verification_images,
            serving=serving,
        )
        deploy.set_caching_options(False)  # it changes what is served
        deploy.set_display_name("deploy")
        predict = predict_with_served_model(
            model=best_model,
            dataset=ingest.outputs["dataset"],
            url=deploy.outputs["url"],
            model_name=model_name,
            sample_size=prediction_images,
            serves_model=deploy.outputs["serves_model"],
        )
        predict.set_caching_options(False)  # it measures the live server
        predict.set_display_name("predict")
        return PipelineOutputs(
            best_model=best_model,
            report=select.outputs["report"],
            report_markdown=select.outputs["report_markdown"],
            best_model_type=select.outputs["Output"],
            deployment=deploy.outputs["deployment"],
            serving_url=deploy.outputs["url"],
            served_accuracy=predict.outputs["Output"],
        )

    return fashion_mnist_pipeline


# What compiled/ holds and Kubeflow users upload: TFJobs, all models at once.
fashion_mnist_pipeline = make_pipeline(platform=ClusterPlatform.from_env())
