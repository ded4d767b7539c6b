"""Generated documentation (``make readme``): every component's README.md, written from its
docstring, signature and ``metadata.yaml`` as kubeflow/pipelines-components does, and the
README's settings tables, written from :mod:`fmnist.settings`. ``tests`` fail when a committed
file differs from what this writes.
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from pathlib import Path

import yaml

from fmnist.settings.jobs import KubernetesSettings
from fmnist.settings.pipeline import PipelineParameters, cluster_defaults
from fmnist.settings.platform import IMAGE_ENV, MOUNT_PATH, PVC_ENV, Platform
from fmnist.settings.schema import markdown_table
from fmnist.settings.serving import ServingSettings
from fmnist.settings.tuning import TuningSettings
from kfp_components import COMPONENTS

ROOT = Path(__file__).resolve().parents[1]
COMPONENTS_DIR = ROOT / "kfp_components"
README = ROOT / "README.md"
_TYPES = {"String": "str", "Integer": "int", "Float": "float", "Boolean": "bool",
          "Dict": "dict", "List": "list", "Struct": "dict"}
# The README's generated blocks: <!-- generated:NAME --> ... <!-- /generated:NAME -->
_BLOCK = re.compile(r"(<!-- generated:(\w+) -->\n).*?(<!-- /generated:\2 -->)", re.DOTALL)


def _type_name(spec_type: str, is_artifact_input: bool = False) -> str:
    if spec_type in _TYPES:
        return _TYPES[spec_type]
    match = re.match(r"system\.(\w+)@", spec_type)
    name = match[1] if match else spec_type
    return f"Input[{name}]" if is_artifact_input else name


def _cell(text: str) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def _default(value) -> str:
    """A default as a user types it: strings plain, the rest as JSON."""
    return f"`{value}`" if isinstance(value, str) and value else f"`{json.dumps(value)}`"


def kubernetes_calls(component) -> list[str]:
    """The kfp-kubernetes calls a Kubernetes run of ``component``'s task needs (its
    :class:`~kfp_components.base.KubernetesNeeds`, which the pipeline applies too), as lines
    of Python acting on ``task``."""
    needs, claim, q = component.kubernetes_needs, Platform.pvc_name, json.dumps
    lines = ["from kfp import kubernetes", ""]
    if needs.volume:
        lines += ["# The shared ReadWriteMany claim (manifests/pvc): this step and the pods it",
                  "# creates stage the dataset and the models on it; the step finds it by name.",
                  f"kubernetes.mount_pvc(task, pvc_name={q(claim)}, mount_path={q(MOUNT_PATH)})",
                  f"task.set_env_variable({q(PVC_ENV)}, {q(claim)})"]
    if needs.credentials:
        keys = ", ".join(f"{q(k)}: {q(k)}" for k in Platform.credential_keys)
        lines += ["# Only for s3:// data: the object-store keys, from a Secret holding them.",
                  "kubernetes.use_secret_as_env(",
                  '    task, secret_name="fmnist-object-store",',
                  f"    secret_key_to_env={{{keys}}},",
                  ")"]
    image = component.component_spec.implementation.container.image
    lines += ["# Optional: lineage records the image this step ran.",
              f"task.set_env_variable({q(IMAGE_ENV)}, {q(image)})"]
    return lines


def component_readme(folder: str, component) -> str:
    """The README of one component folder: from its docstring and compiled spec (the
    descriptions and defaults the Kubeflow UI shows) and ``metadata.yaml``."""
    metadata = yaml.safe_load((COMPONENTS_DIR / folder / "metadata.yaml").read_text())
    spec = component.component_spec
    overview = inspect.cleandoc(component.python_func.__doc__ or "").split("\nArgs:")[0]
    title = metadata["name"].replace("_", " ").capitalize()
    lines = [f"# {title}", "",
             f"> Stability: **{metadata['stability']}**. Generated from the component's "
             "docstring and `metadata.yaml` by `make readme`; do not edit by hand.", "",
             "## Overview", "", overview.strip(), "",
             "## Inputs", "",
             "Defaults are the Kubeflow variant's (the compiled pipeline's); inputs without "
             "one are required.", "",
             "| Parameter | Type | Default | Description |",
             "|-----------|------|---------|-------------|"]
    required = []
    for name, value in (spec.inputs or {}).items():
        artifact = value.type.startswith("system.")
        if not value.optional:
            required.append(name)
        default = "" if not value.optional else _default(value.default)
        lines.append(f"| `{name}` | `{_type_name(value.type, artifact)}` | {default} | "
                     f"{_cell(value.description)} |")
    lines += ["", "## Outputs", "", "| Name | Type | Description |",
              "|------|------|-------------|"]
    for name, value in (spec.outputs or {}).items():
        lines.append(f"| `{name}` | `{_type_name(value.type)}` | {_cell(value.description)} |")
    function = component.python_func.__name__
    arguments = ", ".join(f"{name}=..." for name in required)
    lines += ["", "## Usage", "",
              "From the compiled component alone (`compiled/components/`, or a release's "
              "`components/`):", "",
              "```python",
              "from kfp import components, dsl",
              "",
              f"{function} = components.load_component_from_file(",
              f'    "compiled/components/{spec.name}.yaml")',
              "",
              "",
              "@dsl.pipeline",
              "def my_pipeline():",
              f"    task = {function}({arguments})",
              "```", "",
              f"or `from {'kfp_components.' + folder} import {function}` with the package "
              "installed.", "",
              "## On Kubernetes", "",
              "What a Kubernetes run of the task needs beside its inputs (kfp-kubernetes; "
              "`compiled/fashion_mnist_pipeline.yaml` sets the same):", "",
              "```python", *kubernetes_calls(component), "```", "",
              "## Metadata", "",
              f"- **Name**: {metadata['name']}",
              f"- **Stability**: {metadata['stability']}",
              "- **Kubeflow dependencies**:",
              *[f"  - {d['name']} `{d['version']}`"
                for d in metadata.get("dependencies", {}).get("kubeflow", [])],
              "- **Tags**: " + ", ".join(metadata.get("tags", [])),
              f"- **Last verified**: {metadata['lastVerified']}", ""]
    return "\n".join(lines)


def readme_blocks() -> dict[str, str]:
    """The README's generated tables, by block name."""
    return {
        # Both variants' defaults: the local run's, and the compiled pipeline's (what the
        # Kubeflow UI, `run --host` and the Python API start from).
        "parameters": markdown_table(
            PipelineParameters, header=("parameter", "local default", "Kubeflow default",
                                        "meaning"),
            defaults=[PipelineParameters(), cluster_defaults()]),
        "tuning": markdown_table(TuningSettings, header=("`tuning` key", "default", "meaning")),
        "kubernetes": markdown_table(KubernetesSettings,
                                     header=("`kubernetes` key", "default", "meaning")),
        "serving": markdown_table(ServingSettings, header=("`serving` key", "default", "meaning")),
    }


def render_readme(text: str) -> str:
    """``text`` with every generated block replaced by its current content."""
    blocks = readme_blocks()

    def fill(match: re.Match) -> str:
        name = match[2]
        if name not in blocks:
            raise KeyError(f"README block {name!r} has no generator")
        return f"{match[1]}{blocks[name]}\n{match[3]}"

    return _BLOCK.sub(fill, text)


def expected_files() -> dict[Path, str]:
    """Every generated file and what it must hold."""
    files = {COMPONENTS_DIR / folder / "README.md": component_readme(folder, component)
             for folder, component in COMPONENTS.items()}
    files[README] = render_readme(README.read_text())
    return files


def main() -> int:
    for path, text in expected_files().items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
