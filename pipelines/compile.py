"""Compiles the pipeline and every component into ``compiled/`` (what users upload, other
pipelines load with ``components.load_component_from_file``, and releases ship)."""

from __future__ import annotations

import os

from kfp import compiler

COMPILED_DIR = "compiled"
COMPONENTS_SUBDIR = "components"


def compiled_files() -> dict[str, object]:
    """Path under ``compiled/`` → pipeline or component."""
    from kfp_components import COMPONENTS
    from pipelines.fashion_mnist import fashion_mnist_pipeline

    files: dict[str, object] = {"fashion_mnist_pipeline.yaml": fashion_mnist_pipeline}
    for component in COMPONENTS.values():
        name = component.component_spec.name
        files[f"{COMPONENTS_SUBDIR}/{name}.yaml"] = component
    return files


def compile_all(output_dir: str = COMPILED_DIR) -> list[str]:
    written = []
    for name, pipeline in compiled_files().items():
        path = os.path.join(output_dir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        compiler.Compiler().compile(pipeline, path)
        written.append(path)
    return written
