"""Compiling the pipeline and its components into YAML for the images they are to run
(:mod:`fmnist_kfp.pipelines.for_platform` says how the images are chosen).

Every compiled file names the release it belongs to in ``pipelineInfo.displayName``
(``fashion-mnist-training 0.2.0``), which KFP's compiler sets through its supported
``pipeline_display_name`` and the PipelineSpec keeps beside ``name``; the pipeline's
``pipelineInfo.description`` also names the release and the image (see
:mod:`fmnist_kfp.pipelines.fashion_mnist`). ``pipelineInfo.name`` stays the same across
releases: it is the pipeline's identity (its MLMD context), so runs of every release are one
pipeline's runs. ``sdkVersion`` is left alone: it names the KFP SDK that compiled the file, and
the SDK and the backend read it as such.
"""

from __future__ import annotations

import os

from kfp import compiler

from fmnist_kfp import __version__
from fmnist_kfp.pipelines.for_platform import ForPlatform
from fmnist_kfp.settings.platform import Platform

COMPILED_DIR = "compiled"
COMPONENTS_SUBDIR = "components"
PIPELINE_FILE = "fashion_mnist_pipeline.yaml"


def compiled_files(platform: Platform | None = None) -> dict[str, ForPlatform]:
    """Path under ``compiled/`` → the pipeline or component, compiled for ``platform``
    (default: chosen when compiled)."""
    from fmnist_kfp.kfp_components.registry import COMPONENTS
    from fmnist_kfp.pipelines.fashion_mnist import fashion_mnist_pipeline, make_pipeline

    files = {PIPELINE_FILE: make_pipeline(platform=platform) if platform
             else fashion_mnist_pipeline}
    for component in COMPONENTS.values():
        name = component.component_spec.name
        files[f"{COMPONENTS_SUBDIR}/{name}.yaml"] = ForPlatform.of_component(component, platform)
    return files


def release_label(pipeline) -> str:
    """``<pipelineInfo.name> <version>``: the display name a compiled file carries."""
    return f"{pipeline.pipeline_spec.pipeline_info.name} {__version__}"


def _compile(pipeline: ForPlatform, path: str) -> str:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    compiler.Compiler().compile(pipeline, path, pipeline_display_name=release_label(pipeline))
    return path


def compile_pipeline(package_path: str, *, image: str | None = None,
                     gpu_image: str | None = None) -> str:
    """Writes the Kubeflow pipeline's YAML to ``package_path`` for ``image`` (every step and
    the pods they create) and ``gpu_image`` (job replicas with GPUs); returns the path.

    Left out, they are ``$FMNIST_COMPONENT_IMAGE`` and ``$FMNIST_GPU_IMAGE`` as set now, else
    this release's images; the GPU image defaults to the image's tag + ``-gpu``. Raises
    ``UserInputError`` for an image without a tag or digest.

    >>> compile_pipeline("fashion-mnist.yaml", image="registry.example.com/team/fmnist:0.2.0")
    'fashion-mnist.yaml'
    """
    platform = Platform.from_env(image=image, gpu_image=gpu_image)
    return _compile(compiled_files(platform)[PIPELINE_FILE], package_path)


def compile_all(output_dir: str = COMPILED_DIR, *, image: str | None = None,
                gpu_image: str | None = None) -> list[str]:
    """Compiles the pipeline and every component into ``output_dir`` (``compiled/``'s
    layout) for the images, chosen as :func:`compile_pipeline` chooses them."""
    platform = Platform.from_env(image=image, gpu_image=gpu_image)
    return [_compile(pipeline, os.path.join(output_dir, name))
            for name, pipeline in compiled_files(platform).items()]
