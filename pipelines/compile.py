"""Compiles the pipelines into ``compiled/`` (the YAML users upload and releases ship)."""

from __future__ import annotations

import os

from kfp import compiler

COMPILED_DIR = "compiled"


def compiled_pipelines() -> dict[str, object]:
    """File name → pipeline, for everything ``compiled/`` holds."""
    from pipelines.fashion_mnist import fashion_mnist_pipeline

    return {"fashion_mnist_pipeline.yaml": fashion_mnist_pipeline}


def compile_all(output_dir: str = COMPILED_DIR) -> list[str]:
    os.makedirs(output_dir, exist_ok=True)
    written = []
    for name, pipeline in compiled_pipelines().items():
        path = os.path.join(output_dir, name)
        compiler.Compiler().compile(pipeline, path)
        written.append(path)
    return written
