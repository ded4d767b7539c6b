"""Generated documentation (``make readme``): every component's README.md, written from its
docstring, ``metadata.yaml`` and compiled YAML (``compiled/components/``: the types a pipeline
that loads it must wire) as kubeflow/pipelines-components does; the generated blocks of
README.md and the pages under docs/ (``<!-- generated:NAME -->``): the settings tables, written
from :mod:`fmnist_kfp.settings`, and docs/layout.md's map of every module, from their
docstrings; and docs/index.md, the site's front page, a copy of README.md whose links point
where they resolve on the site. ``tests`` fail when a committed file differs from what this
writes, and when a block has no page.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import sys
from pathlib import Path

import yaml

from fmnist_kfp.kfp_components.registry import COMPONENTS, KUBERNETES_NEEDS
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.settings.pipeline import PipelineParameters, cluster_defaults
from fmnist_kfp.settings.platform import IMAGE_ENV, MOUNT_PATH, PVC_ENV, Platform
from fmnist_kfp.settings.schema import markdown_table
from fmnist_kfp.settings.serving import ServingSettings
from fmnist_kfp.settings.tuning import TuningSettings

ROOT = Path(__file__).resolve().parents[1]
COMPONENTS_DIR = ROOT / "kfp_components"
COMPILED_COMPONENTS = ROOT / "compiled" / "components"
README = ROOT / "README.md"
DOCS = ROOT / "docs"
INDEX = DOCS / "index.md"  # generated from README.md
# Where links to files outside docs/ point from the site (mkdocs resolves only pages).
REPOSITORY = "https://github.com/fmnist-kfp/fmnist-kfp"
# The compiled YAML's parameter types (pipeline_spec.proto's ParameterType) as Python names.
_PARAMETER_TYPES = {"STRING": "str", "NUMBER_INTEGER": "int", "NUMBER_DOUBLE": "float",
                    "BOOLEAN": "bool", "LIST": "list", "STRUCT": "dict",
                    "TASK_FINAL_STATUS": "PipelineTaskFinalStatus"}
# The pages' generated blocks: <!-- generated:NAME --> ... <!-- /generated:NAME -->
_BLOCK = re.compile(r"(<!-- generated:(\w+) -->\n).*?(<!-- /generated:\2 -->)", re.DOTALL)


def compiled_types(name: str) -> dict[str, dict[str, str]]:
    """The Python types of the compiled component ``compiled/components/<name>.yaml``'s inputs
    and outputs (``{"inputs": {name: type}, "outputs": {...}}``), as a pipeline that loads the
    YAML wires them: an artifact is ``Input[Model]`` / ``Output[Model]``, a list of artifacts
    (``isArtifactList``, e.g. a ``dsl.Collected`` fan-in) ``List[Input[Model]]``, a parameter
    its Python type."""
    document = yaml.safe_load((COMPILED_COMPONENTS / f"{name}.yaml").read_text())
    [component] = document["components"].values()
    types: dict[str, dict[str, str]] = {}
    for side, key, wrapper in (("inputs", "inputDefinitions", "Input"),
                               ("outputs", "outputDefinitions", "Output")):
        definitions = component.get(key, {})
        found = types[side] = {}
        for field, spec in definitions.get("artifacts", {}).items():
            title = spec["artifactType"]["schemaTitle"]
            text = f"{wrapper}[{title.removeprefix('system.')}]"
            found[field] = f"List[{text}]" if spec.get("isArtifactList") else text
        for field, spec in definitions.get("parameters", {}).items():
            found[field] = _PARAMETER_TYPES[spec["parameterType"]]
    return types


def _cell(text: str) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def _default(value) -> str:
    """A default as a user types it: strings plain, the rest as JSON."""
    return f"`{value}`" if isinstance(value, str) and value else f"`{json.dumps(value)}`"


def kubernetes_calls(folder: str, component) -> list[str]:
    """The kfp-kubernetes calls a Kubernetes run of ``component``'s task needs (its folder's
    :data:`~fmnist_kfp.kfp_components.registry.KUBERNETES_NEEDS`, which the pipeline applies
    too), as lines of Python acting on ``task``."""
    needs, claim, q = KUBERNETES_NEEDS[folder], Platform.pvc_name, json.dumps
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
    types = compiled_types(spec.name)
    for side, fields in (("inputs", spec.inputs or {}), ("outputs", spec.outputs or {})):
        if set(fields) != set(types[side]):
            raise ValueError(f"compiled/components/{spec.name}.yaml's {side} are not the "
                             f"component's: `make compile` (or `fmnist-kfp compile`) first")
    required = []
    for name, value in (spec.inputs or {}).items():
        if not value.optional:
            required.append(name)
        default = "" if not value.optional else _default(value.default)
        lines.append(f"| `{name}` | `{types['inputs'][name]}` | {default} | "
                     f"{_cell(value.description)} |")
    lines += ["", "## Outputs", "", "| Name | Type | Description |",
              "|------|------|-------------|"]
    for name, value in (spec.outputs or {}).items():
        lines.append(f"| `{name}` | `{types['outputs'][name]}` | {_cell(value.description)} |")
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
              f"or `from fmnist_kfp.kfp_components.{folder} import {function}` with the "
              "package installed.", "",
              "## On Kubernetes", "",
              "What a Kubernetes run of the task needs beside its inputs (kfp-kubernetes; "
              "`compiled/fashion_mnist_pipeline.yaml` sets the same):", "",
              "```python", *kubernetes_calls(folder, component), "```", "",
              "## Metadata", "",
              f"- **Name**: {metadata['name']}",
              f"- **Stability**: {metadata['stability']}",
              "- **Kubeflow dependencies**:",
              *[f"  - {d['name']} `{d['version']}`"
                for d in metadata.get("dependencies", {}).get("kubeflow", [])],
              "- **Tags**: " + ", ".join(metadata.get("tags", [])),
              f"- **Last verified**: {metadata['lastVerified']}", ""]
    return "\n".join(lines)


_ROLE = re.compile(r":\w+:`~?([^`]+)`")


def first_sentence(text: str) -> str:
    """``text`` up to its first '.', '!', '?' or ':' that ends a word outside `code` (and is
    not the end of "e.g" or "i.e")."""
    in_code = False
    for index, char in enumerate(text):
        if char == "`":
            in_code = not in_code
        elif (char in ".!?:" and not in_code and text[index + 1:index + 2] in ("", " ")
              and not text[:index].endswith(("e.g", "i.e"))):
            return text[:index + (char != ":")]
    return text


def module_summary(path: Path) -> str:
    """The first sentence of a module's docstring (a component module's: its component's), as
    Markdown: Sphinx roles and ``literals`` become `code`."""
    tree = ast.parse(path.read_text())
    doc = ast.get_docstring(tree) or next(
        (ast.get_docstring(node) for node in tree.body
         if isinstance(node, ast.FunctionDef | ast.ClassDef) and ast.get_docstring(node)),
        None) or ""
    paragraph = " ".join(doc.split("\n\n")[0].split())
    return first_sentence(_ROLE.sub(r"`\1`", paragraph).replace("``", "`"))


# The package's source folders in a checkout, in layer order (docs/layout.md's table).
PACKAGE_FOLDERS = ("fmnist_kfp", "pipelines", "kfp_components", "katib", "serving")
# Mapped too, after the package: the repository's tooling, not in the wheel.
MAPPED_FOLDERS = (*PACKAGE_FOLDERS, "tools")


def module_map() -> str:
    """docs/layout.md's map of every module: each source folder of the package, then the
    tooling's (``tools/``), and its modules with the first sentence of their docstrings. A
    module added without a docstring, or without regenerating the map, fails
    tests/tools/test_docs.py."""
    lines = []
    for top in MAPPED_FOLDERS:
        for folder in sorted({p.parent for p in (ROOT / top).rglob("*.py")
                              if "__pycache__" not in p.parts}):
            where = folder.relative_to(ROOT).as_posix()
            init = folder / "__init__.py"
            about = f": {module_summary(init)}" if init.exists() and module_summary(init) else ""
            lines.append(f"- `{where}/`{about}")
            for module in sorted(folder.glob("*.py")):
                if module.name != "__init__.py":
                    lines.append(f"  - `{module.name}`: {module_summary(module)}")
    return "\n".join(lines)


def readme_blocks() -> dict[str, str]:
    """The generated blocks of README.md and docs/ by name: the settings tables, and
    docs/layout.md's map of every module."""
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
        "modules": module_map(),
    }


def render_readme(text: str) -> str:
    """``text`` with every generated block replaced by its current content."""
    blocks = readme_blocks()

    def fill(match: re.Match) -> str:
        name = match[2]
        if name not in blocks:
            raise KeyError(f"generated block {name!r} has no generator")
        return f"{match[1]}{blocks[name]}\n{match[3]}"

    return _BLOCK.sub(fill, text)


def pages() -> list[Path]:
    """The hand-written Markdown pages that may hold generated blocks: README.md and docs/."""
    return [README, *sorted(p for p in DOCS.glob("*.md") if p != INDEX)]


# A Markdown link's target: ](target) or ](target "title")
_LINK = re.compile(r"\]\(([^)\s]+)")


def index_page(readme: str) -> str:
    """docs/index.md: ``readme`` as the site's front page. Links into docs/ become the pages'
    own names; links to other files of the repository (component READMEs, bench/) point at
    them on GitHub, since the site holds only docs/; anchors and URLs stay."""

    def relink(match: re.Match) -> str:
        target = match[1]
        if target.startswith(("#", "http://", "https://", "mailto:")):
            return match[0]
        if target.startswith("docs/"):
            return f"]({target.removeprefix('docs/')}"
        kind = "tree" if target.endswith("/") else "blob"
        return f"]({REPOSITORY}/{kind}/main/{target}"

    note = ("<!-- Generated from README.md by `make readme`: edit README.md, not this page. -->"
            "\n\n")
    return note + _LINK.sub(relink, readme)


def expected_files() -> dict[Path, str]:
    """Every generated file and what it must hold. Raises when a generated table is in no
    page, or in more than one."""
    files = {COMPONENTS_DIR / folder / "README.md": component_readme(folder, component)
             for folder, component in COMPONENTS.items()}
    used: dict[str, list[str]] = {name: [] for name in readme_blocks()}
    for page in pages():
        text = page.read_text()
        for match in _BLOCK.finditer(text):
            used.setdefault(match[2], []).append(page.relative_to(ROOT).as_posix())
        files[page] = render_readme(text)
    misplaced = {name: where for name, where in used.items() if len(where) != 1}
    if misplaced:
        raise ValueError(f"each generated table belongs in exactly one page: {misplaced}")
    files[INDEX] = index_page(files[README])
    return files


def main() -> int:
    for path, text in expected_files().items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
