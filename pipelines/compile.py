"""Compiles the pipeline and every component into ``compiled/`` (what users upload, other
pipelines load with ``components.load_component_from_file``, and releases ship).

Every compiled file names the release it belongs to in ``pipelineInfo.displayName``
(``fashion-mnist-training 0.2.0``), which KFP's compiler sets through its supported
``pipeline_display_name`` and the PipelineSpec keeps beside ``name``; the pipeline's
``pipelineInfo.description`` also names the release and the image (see
:mod:`fmnist_kfp.pipelines.fashion_mnist`). ``pipelineInfo.name`` stays the same across releases: it is
the pipeline's identity (its MLMD context), so runs of every release are one pipeline's runs.
``sdkVersion`` is left alone: it names the KFP SDK that compiled the file, and the SDK and
the backend read it as such.
"""

from __future__ import annotations

import os

from kfp import compiler

from fmnist_kfp import __version__

COMPILED_DIR = "compiled"
COMPONENTS_SUBDIR = "components"


def compiled_files() -> dict[str, object]:
    """Path under ``compiled/`` → pipeline or component."""
    from fmnist_kfp.kfp_components import COMPONENTS
    from fmnist_kfp.pipelines.fashion_mnist import fashion_mnist_pipeline

    files: dict[str, object] = {"fashion_mnist_pipeline.yaml": fashion_mnist_pipeline}
    for component in COMPONENTS.values():
        name = component.component_spec.name
        files[f"{COMPONENTS_SUBDIR}/{name}.yaml"] = component
    return files


def release_label(pipeline) -> str:
    """``<pipelineInfo.name> <version>``: the display name a compiled file carries."""
    return f"{pipeline.pipeline_spec.pipeline_info.name} {__version__}"


def compile_all(output_dir: str = COMPILED_DIR) -> list[str]:
    written = []
    for name, pipeline in compiled_files().items():
        path = os.path.join(output_dir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        compiler.Compiler().compile(pipeline, path,
                                    pipeline_display_name=release_label(pipeline))
        written.append(path)
    return written
