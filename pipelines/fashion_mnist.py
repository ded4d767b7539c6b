"""The Fashion-MNIST pipeline: ingest → tune (optional) and train three CNNs in parallel →
select → batch prediction, and deploy → predict over HTTP.

The parameters are :class:`~fmnist_kfp.settings.pipeline.PipelineParameters`: their defaults and
their descriptions in the docstring come from there (a test checks that the signature lists
every one of them with its type).
"""

from typing import NamedTuple

from kfp import dsl
from kfp import kubernetes as kfp_kubernetes
from kfp.dsl import HTML, Artifact, Dataset, Markdown, Model

from fmnist_kfp import __version__
from fmnist_kfp.kfp_components.batch_predict.component import batch_predict
from fmnist_kfp.kfp_components.deploy.component import deploy_model
from fmnist_kfp.kfp_components.freshness.component import freshness_window
from fmnist_kfp.kfp_components.ingest.component import ingest_fashion_mnist
from fmnist_kfp.kfp_components.predict.component import predict_with_served_model
from fmnist_kfp.kfp_components.promote.component import promote_early
from fmnist_kfp.kfp_components.registry import KUBERNETES_NEEDS
from fmnist_kfp.kfp_components.select.component import select_best_model
from fmnist_kfp.kfp_components.train.component import train_model
from fmnist_kfp.kfp_components.tune.component import tune_hyperparameters
from fmnist_kfp.pipelines.for_platform import ForPlatform
from fmnist_kfp.settings.pipeline import PipelineParameters, cluster_defaults
from fmnist_kfp.settings.platform import IMAGE_ENV, MOUNT_PATH, Platform
from fmnist_kfp.settings.schema import args_doc

PIPELINE_NAME = "fashion-mnist-training"
DESCRIPTION = """Trains basic, dropout and batch-norm CNNs on Fashion-MNIST with
MultiWorkerMirroredStrategy (or parameter servers), keeps the most accurate on the validation
split (reporting its test accuracy), serves it (KServe on Kubeflow, the same predictor on
127.0.0.1 locally) if it is blessed, and scores the served model over HTTP; the selected model
also scores a dataset in shards (batch prediction). With ``tune``, each CNN's hyperparameters
are first searched (Katib on Kubeflow, Optuna locally) and the best ones train it."""


class PipelineOutputs(NamedTuple):
    best_model: Model
    report: HTML
    report_markdown: Markdown
    best_model_type: str
    deployment: Artifact
    serving_url: str
    served_accuracy: float
    batch_predictions: Dataset


def _on_platform(task, folder: str, platform: Platform | None) -> None:
    """What a task of the component in ``folder`` carries on the cluster (its
    :data:`~fmnist_kfp.kfp_components.registry.KUBERNETES_NEEDS`): the platform's claim as
    environment, the shared volume, the object-store keys; and, for lineage, the image its own
    pod runs as ``FMNIST_COMPONENT_IMAGE`` (a record only: the pods a step creates run its
    ``image`` and ``gpu_image`` inputs, never this variable)."""
    if platform is None:
        return
    needs = KUBERNETES_NEEDS[folder]
    for name, value in {**platform.env(), IMAGE_ENV: task.container_spec.image}.items():
        task.set_env_variable(name, value)
    if needs.credentials and platform.credentials_secret:  # only when named: see Platform
        kfp_kubernetes.use_secret_as_env(
            task, secret_name=platform.credentials_secret,
            secret_key_to_env={key: key for key in platform.credential_keys},
        )
    if needs.volume:
        kfp_kubernetes.mount_pvc(task, pvc_name=platform.pvc_name, mount_path=MOUNT_PATH)


def make_pipeline(parallelism: int = 0, platform: Platform | None = None):
    """Builds the pipeline; ``parallelism`` caps concurrent training steps (0: no cap).

    On one machine, training one model at a time (parallelism 1) gives each job every core;
    on a cluster each TFJob brings its own pods, so all models train at once. With a
    ``platform`` (``Platform(image="registry.example.com/team/fmnist:0.2.0")``: the images,
    the shared claim, the object-store Secret) the Kubeflow variant: TFJobs by default, the
    Kubernetes settings, and every image the platform's wherever it is compiled.
    """
    if platform is None:
        return _build(parallelism, None)
    return ForPlatform(lambda chosen: _build(parallelism, chosen), platform)


def _build(parallelism: int, platform: Platform | None):
    """The pipeline for ``platform`` as KFP builds it (its images the release's until
    :class:`ForPlatform` compiles it)."""
    # The Kubeflow variant's defaults: TFJobs of two workers, TFDS as the data source. Its
    # ``kubernetes`` stays ``{}``: the shared claim is not a default the user's dict could
    # replace, but part of the platform every task carries (``FMNIST_PVC_NAME``, see
    # :func:`_on_platform`), under which the steps merge the user's settings
    # (:func:`fmnist_kfp.settings.jobs.cluster_settings`).
    _D = cluster_defaults() if platform else PipelineParameters()  # noqa: N806
    # The images of the pods the steps create: the platform's, as constants (not run
    # parameters); without a platform (kfp.local) the components' defaults.
    images = {"image": platform.image} if platform else {}
    gpu_images = {**images, "gpu_image": platform.gpu_image} if platform else {}

    def fashion_mnist_pipeline(
        data_source: str = _D.data_source,
        freshness: str = _D.freshness,
        expected_sha256: dict = _D.expected_sha256,
        validation_examples: int = _D.validation_examples,
        model_types: list = _D.model_types,
        epochs: int = _D.epochs,
        batch_size: int = _D.batch_size,
        learning_rate: float = _D.learning_rate,
        dropout_rate: float = _D.dropout_rate,
        filters: int = _D.filters,
        precision: str = _D.precision,
        train_examples: int = _D.train_examples,
        profile_steps: int = _D.profile_steps,
        num_workers: int = _D.num_workers,
        strategy: str = _D.strategy,
        num_ps: int = _D.num_ps,
        evaluator: bool = _D.evaluator,
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
        serve_early: bool = _D.serve_early,
        serving: dict = _D.serving,
        batch_prediction_source: str = _D.batch_prediction_source,
        batch_prediction_workers: int = _D.batch_prediction_workers,
    ) -> PipelineOutputs:
        window = freshness_window(freshness=freshness)
        window.set_caching_options(False)  # it reads the clock
        window.set_display_name("freshness-window")
        _on_platform(window, "freshness", platform)
        ingest = ingest_fashion_mnist(
            data_source=data_source,
            freshness_window=window.output,
            expected_sha256=expected_sha256,
            validation_examples=validation_examples,
        )
        ingest.set_display_name("ingest")
        _on_platform(ingest, "ingest", platform)

        with dsl.ParallelFor(items=model_types, parallelism=parallelism) as model_type:
            # With tune off the search step hands the given values on at once (and is
            # cached): one graph for both, which kfp.local and the cluster run alike.
            search = tune_hyperparameters(
                dataset=ingest.outputs["dataset"], model_type=model_type, enabled=tune,
                learning_rate=learning_rate, batch_size=batch_size, filters=filters,
                dropout_rate=dropout_rate, precision=precision, tuning=tuning, backend=backend,
                kubernetes=kubernetes, num_workers=num_workers, gpus_per_worker=gpus_per_worker,
                strategy=strategy, num_ps=num_ps, **gpu_images,
            )
            search.set_display_name("tune")
            _on_platform(search, "tune", platform)
            train = train_model(
                dataset=ingest.outputs["dataset"],
                model_type=model_type,
                hyperparameters=search.outputs["hyperparameters"],
                epochs=epochs,
                precision=precision,
                train_examples=train_examples,
                num_workers=num_workers,
                strategy=strategy,
                num_ps=num_ps,
                evaluator=evaluator,
                gpus_per_worker=gpus_per_worker,
                backend=backend,
                kubernetes=kubernetes,
                max_restarts=max_restarts,
                profile_steps=profile_steps,
                **gpu_images,
            )
            train.set_display_name("train")
            _on_platform(train, "train", platform)
            # serve_early: each model as it finishes, if the best so far (atomic promotion).
            with dsl.If(serve_early == True):  # noqa: E712 - a pipeline condition, not Python
                early = promote_early(
                    model=train.outputs["model"], dataset=ingest.outputs["dataset"],
                    backend=backend, model_name=model_name,
                    blessing_tolerance=blessing_tolerance,
                    verification_images=verification_images, serving=serving, **images)
                early.set_caching_options(False)  # it changes what is served
                early.set_display_name("serve-early")
                _on_platform(early, "promote", platform)
        select = select_best_model(
            dataset=ingest.outputs["dataset"],
            candidates=dsl.Collected(train.outputs["model"]),
        )
        select.set_display_name("select")
        _on_platform(select, "select", platform)
        best_model = select.outputs["best_model"]
        batch = batch_predict(
            model=best_model,
            dataset=ingest.outputs["dataset"],
            batch_prediction_source=batch_prediction_source,
            batch_prediction_workers=batch_prediction_workers,
            backend=backend,
            kubernetes=kubernetes,
            **images,
        )
        batch.set_display_name("batch-predict")
        _on_platform(batch, "batch_predict", platform)
        deploy = deploy_model(
            model=best_model,
            dataset=ingest.outputs["dataset"],
            backend=backend,
            model_name=model_name,
            blessing_tolerance=blessing_tolerance,
            verification_images=verification_images,
            serving=serving,
            **images,
        )
        deploy.set_caching_options(False)  # it changes what is served
        deploy.set_display_name("deploy")
        _on_platform(deploy, "deploy", platform)
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
        _on_platform(predict, "predict", platform)
        return PipelineOutputs(
            best_model=best_model,
            report=select.outputs["report"],
            report_markdown=select.outputs["report_markdown"],
            best_model_type=select.outputs["Output"],
            deployment=deploy.outputs["deployment"],
            serving_url=deploy.outputs["url"],
            served_accuracy=predict.outputs["Output"],
            batch_predictions=batch.outputs["predictions"],
        )

    # The compiled pipeline says which release it is and which image its steps run, in the
    # description the Kubeflow UI shows (pipelineInfo.description).
    release = (f"\n\nRelease {__version__} of fmnist-kfp; every step and job runs "
               f"{platform.image}, job replicas with GPUs {platform.gpu_image}."
               if platform else "")
    fashion_mnist_pipeline.__doc__ = (
        DESCRIPTION + release + "\n\nArgs:\n" + args_doc([PipelineParameters], indent="    ")
    )
    # The release in pipelineInfo.displayName wherever the pipeline is compiled (make compile,
    # kfp.Client.create_run_from_pipeline_func); pipelineInfo.name stays the pipeline's identity.
    return dsl.pipeline(name=PIPELINE_NAME, display_name=f"{PIPELINE_NAME} {__version__}")(
        fashion_mnist_pipeline)


# What compiled/ holds and Kubeflow users upload: TFJobs, all models at once, for the images
# chosen when it is compiled ($FMNIST_COMPONENT_IMAGE as set then, else the release's).
fashion_mnist_pipeline = ForPlatform(lambda chosen: _build(0, chosen))
