"""Generated documentation (``make readme``): every component's README.md, written from its
docstring, signature and ``metadata.yaml`` as kubeflow/pipelines-components does, and the
README's settings tables, written from :mod:`fmnist.settings`. ``tests`` fail when a committed
file differs from what this writes.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import docstring_parser
import yaml

from fmnist.settings.jobs import KubernetesSettings
from fmnist.settings.pipeline import PipelineParameters
from fmnist.settings.schema import markdown_table
from fmnist.settings.serving import ServingSettings
from fmnist.settings.tuning import TuningSettings
from kfp_components import COMPONENTS

ROOT = Path(__file__).resolve().parents[2]
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


def component_readme(folder: str, component) -> str:
    """The README of one component folder."""
    metadata = yaml.safe_load((COMPONENTS_DIR / folder / "metadata.yaml").read_text())
    spec = component.component_spec
    doc = docstring_parser.parse(component.python_func.__doc__ or "")
    described = {p.arg_name: p.description for p in doc.params}
    returns = docstring_parser.parse(
        (component.python_func.__doc__ or "").replace("Returns:", "Args:", 1)
    ) if "Returns:" in (component.python_func.__doc__ or "") else None
    overview = inspect.cleandoc(component.python_func.__doc__ or "").split("\nArgs:")[0]
    title = metadata["name"].replace("_", " ").capitalize()
    lines = [f"# {title}", "",
             f"> Stability: **{metadata['stability']}**. Generated from the component's "
             "docstring and `metadata.yaml` by `make readme`; do not edit by hand.", "",
             "## Overview", "", overview.strip(), "",
             "## Inputs", "", "| Parameter | Type | Default | Description |",
             "|-----------|------|---------|-------------|"]
    for name, value in (spec.inputs or {}).items():
        artifact = value.type.startswith("system.")
        default = "" if value.default is None else f"`{value.default}`"
        lines.append(f"| `{name}` | `{_type_name(value.type, artifact)}` | {default} | "
                     f"{_cell(described.get(name, ''))} |")
    lines += ["", "## Outputs", "", "| Name | Type | Description |",
              "|------|------|-------------|"]
    for name, value in (spec.outputs or {}).items():
        text = described.get(name) or ""
        if not text and returns is not None:
            text = next((p.description for p in returns.params if p.arg_name == name),
                        returns.params[0].description if name == "Output" and returns.params
                        else "")
        lines.append(f"| `{name}` | `{_type_name(value.type)}` | {_cell(text)} |")
    dependencies = [f"  - {d['name']} `{d['version']}`"
                    for d in metadata.get("dependencies", {}).get("kubeflow", [])]
    module = f"kfp_components.{folder}"
    lines += ["", "## Usage", "", "```python",
              f"from {module} import {component.python_func.__name__}",
              "# or, from the compiled component in a release:",
              "from kfp import components",
              f"{component.python_func.__name__} = components.load_component_from_file(",
              f'    "compiled/components/{spec.name}.yaml")', "```", "",
              "## Metadata", "",
              f"- **Name**: {metadata['name']}",
              f"- **Stability**: {metadata['stability']}",
              "- **Kubeflow dependencies**:", *dependencies,
              "- **Tags**: " + ", ".join(metadata.get("tags", [])),
              f"- **Last verified**: {metadata['lastVerified']}", ""]
    return "\n".join(lines)


def readme_blocks() -> dict[str, str]:
    """The README's generated tables, by block name."""
    return {
        "parameters": markdown_table(PipelineParameters,
                                     header=("parameter", "default", "meaning")),
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
