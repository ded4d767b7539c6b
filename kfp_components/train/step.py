"""The training step of the pipeline: hyperparameters in, a trained ``Model`` directory out.

Layout of the model directory (the KFP ``Model`` artifact)::

    1/                 SavedModel (version 1, the layout TF Serving and KServe expect)
    result.json        what the chief reported: hyperparameters, history, timings
    history.jsonl      per-epoch metrics
    tensorboard/       TensorBoard logs: per-epoch scalars, the graph, an optional profile

On Kubernetes the step also points a Kubeflow ``Tensorboard`` at the logs on the shared volume
(created if absent, left in place when the step ends) and links it in its Markdown output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fmnist_kfp.backends import require_backend
from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kfp_components import reports_errors_briefly
from fmnist_kfp.kfp_components.outputs import StepOutputs
from fmnist_kfp.kubernetes.names import stable_name
from fmnist_kfp.kubernetes.storage import (
    copy_tree,
    make_shared_dirs,
    stage_dataset,
    staged_location,
)
from fmnist_kfp.kubernetes.training_operators import ClusterJob
from fmnist_kfp.kubernetes.trainjob import OVERRIDES
from fmnist_kfp.settings.jobs import KubernetesSettings, cluster_settings
from fmnist_kfp.settings.platform import PVC_ENV
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.export import SAVED_MODEL_VERSION
from fmnist_kfp.training.tensorboard import log_dir
from fmnist_kfp.training.training_job import TrainingJobSpec


def job_name(model_type: str, model_dir: str) -> str:
    """The training job's name: :func:`stable_name` of the model's output location."""
    return stable_name(f"fmnist-{model_type}", model_dir)


def training_backend(backend: str, settings: KubernetesSettings | None = None,
                     make_launcher: Callable[..., Any] | None = None,
                     operator: str = "tfjob", shape: str = ""):
    """The launcher of ``backend``: worker processes here, or on the cluster a TFJob or a
    TrainJob (``operator``, as :func:`choose_operator` chose it; ``shape`` the TrainJob's pod
    settings) with the pods' ``settings``. ``make_launcher(settings, operator, shape)`` builds
    it instead (tests give it a client). On the cluster its ``run`` is given the step's
    :class:`~fmnist_kfp.kubernetes.training_operators.ClusterJob`, already checked."""
    require_backend("training", backend)
    if backend == "local":
        from fmnist_kfp.launcher.local_processes import LocalProcessLauncher

        return LocalProcessLauncher()
    if make_launcher is not None:
        return make_launcher(settings, operator, shape)
    if settings is None:
        raise ValueError(f"the {backend} training backend needs the pods' kubernetes settings")
    if operator == "trainjob":
        from fmnist_kfp.launcher.trainjob_launcher import TrainJobLauncher

        return TrainJobLauncher(settings, shape=shape)
    from fmnist_kfp.launcher.tfjob_launcher import TFJobLauncher

    return TFJobLauncher(settings)


def training_operator(settings: KubernetesSettings, discovery=None) -> tuple[str, str]:
    """``(operator, shape)``: which operator runs the job on this cluster (its
    ``kubernetes.operator`` setting, decided by what the API server serves) and, for a TrainJob,
    the shape of its pod settings; printed. ``discovery`` asks the API server (default:
    :class:`~fmnist_kfp.kubernetes.training_operators.ClusterDiscovery`)."""
    from fmnist_kfp.kubernetes.training_operators import (
        ClusterDiscovery,
        choose_operator,
        trainjob_api,
    )

    discovery = discovery if discovery is not None else ClusterDiscovery()
    operator = choose_operator(settings.operator, discovery)
    shape = trainjob_api(discovery) if operator == "trainjob" else ""
    print(f"training operator: {operator}"
          + (f" (Kubeflow Trainer v2, TrainJob pod settings as {shape})" if shape else
             " (Training Operator v1)")
          + f"; kubernetes.operator is {settings.operator}", flush=True)
    return operator, shape


def tensorboard_name(model_type: str, model_dir: str) -> str:
    """The Tensorboard resource's name, stable across retries of the step."""
    return stable_name(f"fmnist-tb-{model_type}", model_dir)


def publish_tensorboard(name: str, job_dir: str, settings: KubernetesSettings,
                        create=None) -> dict[str, Any]:
    """A Kubeflow ``Tensorboard`` over the job's logs on the shared volume (``settings``: the
    job's pod settings); ``create`` makes or re-attaches to it (default:
    :func:`fmnist_kfp.kubernetes.tensorboard.ensure_tensorboard`)."""
    from fmnist_kfp.kubernetes.tensorboard import build_tensorboard, dashboard_path, logs_path

    namespace = settings.target_namespace
    manifest = build_tensorboard(
        name, namespace,
        logs_path(log_dir(job_dir), pvc_name=settings.pvc_name, mount_path=settings.mount_path))
    if create is None:
        from fmnist_kfp.kubernetes.tensorboard import ensure_tensorboard as create
    info = {"logs": log_dir(job_dir), "logspath": manifest["spec"]["logspath"],
            "resource": f"{namespace}/{name}"}
    try:
        create(manifest)
    except Exception as error:  # noqa: BLE001 - best effort, said in the step's outputs
        # The logs are written either way; a cluster without Kubeflow's Tensorboard controller
        # (its CRD absent: 404), without RBAC for it (403), or an API client that cannot be
        # configured must not stop the training.
        print(f"no Tensorboard for {name}: {error}", flush=True)
        return {**info, "error": str(error)}
    return {**info, "url": dashboard_path(namespace, name)}


def tensorboard_markdown(model_type: str, info: dict[str, Any]) -> str:
    """The training step's Markdown output: where the TensorBoard of this job is."""
    lines = [f"# TensorBoard: {model_type}", ""]
    if info.get("url"):
        lines += [f"[Open TensorBoard]({info['url']}) (Kubeflow `Tensorboard` "
                  f"`{info['resource']}`, logs `{info['logspath']}`)."]
    elif info.get("error"):
        lines += [f"The Kubeflow `Tensorboard` `{info['resource']}` could not be created "
                  f"({info['error']}); the logs are at `{info['logspath']}` and in the model "
                  "artifact's `tensorboard/` folder."]
    else:
        lines += [f"Logs in `{info['logs']}` (per-epoch scalars, the graph"
                  + (", a profile" if info.get("profiled") else "") + ").", "",
                  "On this machine `fmnist-kfp tensorboard` serves the latest run's logs on "
                  "127.0.0.1."]
    return "\n".join(lines) + "\n"


@dataclass
class TrainingResult:
    """What one training made: what the chief reported and how the job ran. The ``Model``
    artifact's metadata and the metrics the step logs are :meth:`model_metadata` and
    :meth:`metrics`."""

    model_type: str
    hyperparameters: dict[str, Any]
    parameters: int  # the model's trainable and other weights
    epochs: int
    replicas: int
    strategy: str
    topology: dict[str, int]  # replicas by kind (Chief, Worker, PS, Evaluator)
    global_batch_size: int
    precision: str
    train_seconds: float
    job_seconds: float  # the whole job, start-up and restarts included
    restarts: int
    backend: str
    operator: str | None  # on Kubernetes: tfjob or trainjob; None locally
    job_name: str
    export_uri: str  # where the job exported the SavedModel
    final_metrics: dict[str, float]
    tensorboard: dict[str, Any]  # where its logs are (and its Tensorboard on Kubernetes)
    evaluation: list[dict[str, Any]] | None = None  # the evaluator replica's epochs, if any

    def model_metadata(self) -> dict[str, Any]:
        """The ``Model`` artifact's metadata."""
        metadata = {
            "model_type": self.model_type,
            "framework": "tensorflow",
            "format": "saved_model",
            "saved_model_version": SAVED_MODEL_VERSION,
            "signatures": ["serving_default (image_bytes)", "serving_pixels (pixels)"],
            "hyperparameters": self.hyperparameters,
            "parameters": self.parameters,
            "epochs": self.epochs,
            "replicas": self.replicas,
            "strategy": self.strategy,
            "topology": self.topology,
            "global_batch_size": self.global_batch_size,
            "precision": self.precision,
            "train_seconds": self.train_seconds,
            "job_seconds": self.job_seconds,
            "restarts": self.restarts,
            "backend": self.backend,
            **({"operator": self.operator} if self.operator is not None else {}),
            "job_name": self.job_name,
            "export_uri": self.export_uri,
            "final_metrics": self.final_metrics,
            "tensorboard": self.tensorboard,
        }
        if self.evaluation:
            metadata["evaluation"] = self.evaluation
        return metadata

    def metrics(self) -> dict[str, float]:
        """The metrics the step logs (and writes to its ``Metrics`` file)."""
        final = self.final_metrics
        metrics = {
            "train_accuracy": final.get("accuracy", 0.0),
            "train_loss": final.get("loss", 0.0),
            "train_seconds": self.train_seconds,
            "images_per_second": final.get("images_per_second", 0.0),
            "parameters": float(self.parameters),
        }
        if "val_accuracy" in final:
            metrics["validation_accuracy"] = final["val_accuracy"]
        if self.evaluation:  # the evaluator replica's score of the last epoch
            metrics["validation_accuracy"] = self.evaluation[-1]["val_accuracy"]
        return metrics

    def kfp_outputs(self) -> StepOutputs:
        """The model's metadata and the metrics."""
        return StepOutputs(metadata=self.model_metadata(), metrics=self.metrics())


@dataclass(frozen=True)
class TrainJobInputs:
    """How the train step's job runs, one object for the component's flat inputs of that
    name: its replicas, and on Kubernetes its pods. ``launcher_options`` is the pipeline's
    ``kubernetes`` parameter, merged over the compiled platform's pod settings
    (:func:`~fmnist_kfp.settings.jobs.cluster_settings`); ``image`` and ``gpu_image`` are what
    the job's replicas run, without and with GPUs."""

    num_workers: int = 1
    use_chief: bool = False
    strategy: str = "multi_worker_mirrored"
    num_ps: int = 1  # parameter servers, for strategy parameter_server only
    evaluator: bool = False
    gpus_per_worker: int = 0
    max_restarts: int = 2
    launcher_options: dict[str, Any] | None = None
    image: str = ""
    gpu_image: str = ""


@reports_errors_briefly
def train_step(
    *,
    config: TrainingConfig,
    data_dir: str,
    model_dir: str,
    backend: str = "local",
    make_launcher: Callable[..., Any] | None = None,
    create_tensorboard=None,
    discovery=None,
    **job: Any,
) -> TrainingResult:
    """Trains one model; returns what it made (the ``Model`` artifact's metadata and the
    metrics to log, :class:`TrainingResult`). ``job``: the fields of :class:`TrainJobInputs`,
    as the component passes its inputs (the compiled component calls the step with them).

    On Kubernetes the workers are pods that cannot see this step's artifact paths, so the
    dataset is staged on the shared volume (once per dataset) and the job works there; the
    finished model is then copied into ``model_dir`` like the local backend's. Its
    ``operator`` (TFJob or TrainJob) is decided by what the cluster serves, asked through
    ``discovery`` (:func:`training_operator`), before anything is copied.
    """
    inputs = TrainJobInputs(**job)
    name = job_name(config.model_type, model_dir)
    job_data_dir, job_dir = data_dir, model_dir
    settings = None
    if backend == "kubernetes":
        # Checked before anything is copied.
        settings = cluster_settings(inputs.launcher_options, image=inputs.image,
                                    gpu_image=inputs.gpu_image,
                                    gpus_per_worker=inputs.gpus_per_worker)
        if not settings.pvc_name:
            raise UserInputError(
                "a TFJob needs the shared claim its pods and this step both mount (the staged "
                f"dataset, the exported model): compile the pipeline with {PVC_ENV}=<claim>, "
                "or set pvc_name in the kubernetes parameter")
        shared = settings.mount_path.rstrip("/")
        job_dir = f"{shared}/jobs/{name}"
        job_data_dir = staged_location(data_dir, f"{shared}/datasets")  # staged below
    spec = TrainingJobSpec(  # validated as it is made
        name=name,
        config=config,
        data_dir=job_data_dir,
        export_dir=f"{job_dir}/{SAVED_MODEL_VERSION}",
        work_dir=job_dir,
        num_workers=inputs.num_workers,
        use_chief=inputs.use_chief,
        strategy=inputs.strategy,
        num_ps=inputs.num_ps if inputs.strategy == "parameter_server" else 0,
        evaluator=inputs.evaluator,
        gpus_per_worker=inputs.gpus_per_worker,
        max_restarts=inputs.max_restarts,
    )
    tensorboard = {"logs": log_dir(model_dir), "profiled": config.profile_steps > 0}
    operator, shape = "tfjob", ""
    to_run: TrainingJobSpec | ClusterJob = spec
    if settings is not None:  # every problem found before the dataset is copied
        operator, shape = training_operator(settings, discovery)
        # What the chosen operator cannot do is refused here, once; the launcher runs it.
        to_run = ClusterJob(spec, settings, operator, shape or OVERRIDES)
        stage_dataset(data_dir, f"{shared}/datasets")
        make_shared_dirs(f"{shared}/jobs")  # group-writable: every job's pods make theirs
        # Before the job starts, so its progress can be watched.
        tensorboard.update(publish_tensorboard(tensorboard_name(config.model_type, model_dir),
                                               job_dir, settings, create_tensorboard))
    outcome = training_backend(backend, settings, make_launcher, operator, shape).run(to_run)
    if job_dir != model_dir:
        copy_tree(job_dir, model_dir)
    result = outcome.result
    return TrainingResult(
        model_type=result["model_type"],
        hyperparameters=result["hyperparameters"],
        parameters=result["parameters"],
        epochs=result["epochs"],
        replicas=result["replicas"],
        strategy=result.get("strategy", inputs.strategy),
        topology=spec.replica_counts(),
        global_batch_size=result["global_batch_size"],
        precision=result["precision"],
        train_seconds=result["train_seconds"],
        job_seconds=outcome.wall_seconds,
        restarts=outcome.restarts,
        backend=backend,
        operator=operator if settings is not None else None,
        job_name=name,
        export_uri=f"{job_dir}/{SAVED_MODEL_VERSION}",
        final_metrics=result["final_metrics"],
        tensorboard=tensorboard,
        evaluation=result.get("evaluation") or None,
    )
