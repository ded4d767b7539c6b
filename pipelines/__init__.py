"""The Python API: the pipeline, its parameters, their validation, and its components.

>>> import kfp
>>> from fmnist_kfp.pipelines import cluster_arguments, compile_pipeline
>>> package = compile_pipeline("fashion-mnist.yaml", image="registry.example.com/team/fmnist:0.2.0")
>>> client = kfp.Client(host="https://kubeflow.example.com/pipeline")
>>> client.create_run_from_pipeline_package(
...     package, arguments=cluster_arguments(epochs=12, num_workers=4),
...     experiment_name="fashion-mnist")

- ``compile_pipeline(path, image=..., gpu_image=...)``: the Kubeflow variant's YAML for your
  images (left out: ``$FMNIST_COMPONENT_IMAGE``/``$FMNIST_GPU_IMAGE`` as set when compiling,
  else the release's).
- ``fashion_mnist_pipeline``: the Kubeflow variant (TFJobs, Katib, KServe), what ``compiled/``
  holds and releases ship, for ``kfp.Client.create_run_from_pipeline_func``; its images are
  chosen when it is compiled, as ``compile_pipeline``'s. ``make_pipeline(platform=Platform(
  image=...))`` builds it for given images, claim and Secret; ``make_pipeline()`` the local
  variant.
- ``cluster_arguments(**values)``: a Kubeflow run's arguments, typed and checked by every rule
  the CLI applies, over the compiled pipeline's defaults; only the given ones are sent.
- ``PipelineParameters``: every parameter, named, typed, documented and validated (the local
  defaults; ``PipelineParameters(...).changed()`` are the values that differ from them).
- The components, by function name: in your own ``@dsl.pipeline`` each task takes the images
  chosen when it is made (``$FMNIST_COMPONENT_IMAGE``/``$FMNIST_GPU_IMAGE`` as set then, else
  the release's); ``COMPONENTS`` (folder → component) holds them as built, with the release's.
- ``PIPELINE_NAME``: the compiled pipeline's ``pipelineInfo.name``, constant across releases.

Everything here is :mod:`fmnist_kfp.pipelines.api`'s, imported on first use: the CLI imports
``fmnist_kfp.pipelines.arguments``, which must not build the pipeline
(``tests/pipelines/test_python_api.py``).
"""

import importlib

__all__ = [
    "PIPELINE_NAME", "fashion_mnist_pipeline", "make_pipeline", "compile_pipeline", "Platform",
    "cluster_arguments", "PipelineParameters", "COMPONENTS",
    "freshness_window", "ingest_fashion_mnist", "tune_hyperparameters", "train_model",
    "promote_early", "select_best_model", "deploy_model", "predict_with_served_model",
    "batch_predict",
]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module("fmnist_kfp.pipelines.api"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
