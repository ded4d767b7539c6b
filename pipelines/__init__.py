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

Attributes are imported on first use, so importing ``fmnist_kfp.pipelines.arguments`` (as the CLI's
validation does) does not build the pipeline.
"""

import importlib

from fmnist_kfp.kfp_components import FOLDERS

_WHERE = {
    "PIPELINE_NAME": "fmnist_kfp.pipelines.fashion_mnist",
    "fashion_mnist_pipeline": "fmnist_kfp.pipelines.fashion_mnist",
    "make_pipeline": "fmnist_kfp.pipelines.fashion_mnist",
    "compile_pipeline": "fmnist_kfp.pipelines.compile",
    "Platform": "fmnist_kfp.settings.platform",
    "cluster_arguments": "fmnist_kfp.pipelines.arguments",
    "PipelineParameters": "fmnist_kfp.settings.pipeline",
    "COMPONENTS": "fmnist_kfp.kfp_components",
    # Every component, from the one registry of steps: from its folder's package (the
    # ``kfp_components`` package's attribute ``batch_predict`` is the folder, not the component).
    **{function: f"fmnist_kfp.kfp_components.{folder}" for folder, function in FOLDERS.items()},
}

__all__ = list(_WHERE)


_COMPONENT_FUNCTIONS = frozenset(FOLDERS.values())
_for_platform: dict[str, object] = {}


def __getattr__(name: str):
    if name in _COMPONENT_FUNCTIONS:
        if name not in _for_platform:
            from fmnist_kfp.pipelines.for_platform import ForPlatform

            component = getattr(importlib.import_module(_WHERE[name]), name)
            _for_platform[name] = ForPlatform(lambda _chosen: component)
        return _for_platform[name]
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
