"""docs/layout.md says where each thing lives; every file and folder it names is there. (Its
map of every module is generated from the modules' docstrings and checked with the other
generated blocks, tests/tools/test_docs.py.)"""

import ast
import re
import subprocess

from tests import ROOT
from tools.docs import MAPPED_FOLDERS, PACKAGE_FOLDERS

LAYOUT = ROOT / "docs" / "layout.md"
_CODE = re.compile(r"`([^`]+)`")
_GENERATED = re.compile(r"<!-- generated:(\w+) -->.*?<!-- /generated:\1 -->", re.DOTALL)


def _tracked() -> list[str]:
    return subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.split()


def named_paths(text: str) -> set[str]:
    """The files and folders the hand-written text names: `a/b.py`, `folder/`, `module.py`
    (placeholders such as `<step>`, commands and paths outside the repository left out)."""
    names = set()
    for token in _CODE.findall(_GENERATED.sub("", text)):
        if any(mark in token for mark in "<…* =$") or token.startswith(("..", "/", "http")):
            continue
        if token.endswith((".py", ".md", ".yaml", ".toml", "/")):
            names.add(token)
    return names


def missing_paths(text: str, tracked: list[str]) -> list[str]:
    """The names in ``text`` that no tracked file or folder answers to: a name with a slash
    inside is a path from the repository's root; a bare ``name.py`` or ``name/`` is a file or
    folder of that name anywhere."""
    files = set(tracked)
    folders = {"/".join(path.split("/")[:depth]) + "/" for path in tracked
               for depth in range(1, path.count("/") + 1)}
    bare_files = {path.rsplit("/", 1)[-1] for path in tracked}
    bare_folders = {folder.rstrip("/").rsplit("/", 1)[-1] + "/" for folder in folders}
    missing = []
    for name in sorted(named_paths(text)):
        if "/" in name.rstrip("/"):
            found = name in folders if name.endswith("/") else name in files
        else:
            found = name in bare_folders if name.endswith("/") else name in bare_files
        if not found:
            missing.append(name)
    return missing


def test_every_file_and_folder_the_layout_names_exists():
    tracked = _tracked()
    text = LAYOUT.read_text()
    assert len(named_paths(text)) > 100
    assert missing_paths(text, tracked) == []


def test_a_renamed_module_is_caught():
    tracked = _tracked()
    assert missing_paths("`fmnist_kfp/kubernetes/tfjob.py` and `runner.py`", tracked) == []
    assert missing_paths("`fmnist_kfp/kubernetes/tf_job.py`, `runners.py`, `deploy/`, "
                         "`serving/deploys/`", tracked) == ["fmnist_kfp/kubernetes/tf_job.py",
                                                            "runners.py", "serving/deploys/"]


def test_every_module_of_the_package_is_in_the_map():
    """The generated map lists each module of the package's five source folders and of the
    tooling's (tools/)."""
    text = LAYOUT.read_text()
    block = re.search(r"<!-- generated:modules -->(.*?)<!-- /generated:modules -->", text,
                      re.DOTALL)[1]
    modules = [path for path in _tracked() if path.endswith(".py")
               and path.split("/")[0] in MAPPED_FOLDERS]
    listed = set()
    folder = ""
    for line in block.splitlines():
        entry = _CODE.search(line)
        if entry and line.startswith("- "):
            folder = entry[1]
        elif entry:
            listed.add(folder + entry[1])
    assert {m for m in modules if not m.endswith("__init__.py")} == listed


# --- Tests mirror the package: `tests/<package>/<folder>/test_*.py` tests that folder ----------

def _dotted(path: str) -> str:
    """A source file's module: `kfp_components/train/step.py` is
    `fmnist_kfp.kfp_components.train.step` (the wheel maps the folders into the package)."""
    parts = path.removesuffix(".py").split("/")
    parts = parts if parts[0] == "fmnist_kfp" else ["fmnist_kfp", *parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _has_behaviour(tree: ast.Module) -> bool:
    """Whether a module defines a function or class (a package whose only function is the
    lazy ``__getattr__`` that forwards to its component has none of its own)."""
    return any(isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
               and node.name not in ("__getattr__", "__dir__") for node in tree.body)


def _forwarded(sources: dict[str, ast.Module]) -> dict[tuple[str, str], str]:
    """(package, name) -> the module a package's ``__init__`` imports ``name`` from, at its top
    or in its lazy ``__getattr__``: importing the name from the package tests that module."""
    forwarded = {}
    for path, tree in sources.items():
        if path.endswith("__init__.py"):
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    for alias in node.names:
                        forwarded[_dotted(path), alias.asname or alias.name] = node.module
                # A `__getattr__` that imports a module by its name forwards every other name
                # to it (pipelines/__init__.py: `importlib.import_module(...api)`).
                elif isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
                    for inner in ast.walk(node):
                        if isinstance(inner, ast.Constant) and isinstance(inner.value, str) \
                                and inner.value.startswith("fmnist_kfp."):
                            forwarded[_dotted(path), "*"] = inner.value
    return forwarded


def _referenced(tree: ast.Module, forwarded: dict[tuple[str, str], str]) -> set[str]:
    """The modules of ours a test module reaches by name: what it imports (a module, or a name
    from it or forwarded by its package, imported or read as an attribute of the package), and
    the dotted names in its strings (monkeypatch targets, `python -m` commands); every
    enclosing package of each too."""
    names, bound = set(), {}  # bound: a local name -> the module it is
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
            bound |= {alias.asname: alias.name for alias in node.names if alias.asname}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            for alias in node.names:
                names.add(f"{node.module}.{alias.name}")
                names.add(forwarded.get((node.module, alias.name))
                          or forwarded.get((node.module, "*"), node.module))
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.startswith("fmnist_kfp."):
            names.add(node.value.split()[0])
    # `pipelines.train_model`, with `from fmnist_kfp import pipelines`: what the package
    # forwards that name from.
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in bound:
            module = bound[node.value.id]
            names.add(f"{module}.{node.attr}")
            names.add(forwarded.get((module, node.attr)) or forwarded.get((module, "*"), module))
    return {".".join(name.split(".")[:depth]) for name in names
            for depth in range(1, name.count(".") + 2)}


# A component and a step's checks are tested through the one registry that lists each
# (COMPONENTS, STEP_CHECKS): the tests in tests/kfp_components/ that import it run every one.
_REGISTERED = {"component.py": "fmnist_kfp.kfp_components.registry",
               "checks.py": "fmnist_kfp.kfp_components.checks"}


def mirrored_places(path: str) -> list[str]:
    """Where a module's tests go (docs/layout.md): `tests/` and its folder; a step's modules
    (`kfp_components/<step>/`) also in `tests/kfp_components/`, beside the other steps'."""
    folder = "tests/" + path.rsplit("/", 1)[0]
    return [folder, "tests/kfp_components"] if path.count("/") == 2 and \
        path.startswith("kfp_components/") else [folder]


def untested_modules(tracked: list[str]) -> list[str]:
    """The package's modules with behaviour that no test module at their mirrored place
    reaches by name or is named for."""
    sources = {path: ast.parse((ROOT / path).read_text()) for path in tracked
               if path.endswith(".py") and path.split("/")[0] in PACKAGE_FOLDERS}
    forwarded = _forwarded(sources)
    tests: dict[str, list[set[str]]] = {}
    for path in tracked:
        folder, _, name = path.rpartition("/")
        if folder.startswith("tests") and name.startswith("test_") and name.endswith(".py"):
            tree = ast.parse((ROOT / path).read_text())
            # A test module named for modules tests them through any entry point:
            # test_storage_and_network.py, storage.py and network.py.
            named = {f"test_{module}.py" for module in
                     name.removeprefix("test_").removesuffix(".py").split("_and_")}
            tests.setdefault(folder, []).append(_referenced(tree, forwarded) | named)
    untested = []
    for path, tree in sorted(sources.items()):
        if not _has_behaviour(tree):
            continue
        name = path.rsplit("/", 1)[-1]
        wanted = {_dotted(path), f"test_{name}"}
        if path.startswith("kfp_components/") and name in _REGISTERED:
            wanted.add(_REGISTERED[name])
        if not any(wanted & referenced for place in mirrored_places(path)
                   for referenced in tests.get(place, [])):
            untested.append(path)
    return untested


def test_every_module_with_behaviour_has_tests_at_its_mirrored_place():
    """A module that defines a function or class is tested by a test module in the tests'
    folder that mirrors its own (`fmnist_kfp/kubernetes/tfjob.py`: `tests/fmnist_kfp/kubernetes/`),
    one that imports it, names it, or is named for it (`test_tfjob.py`)."""
    assert untested_modules(_tracked()) == [], (
        "give these modules tests in the folder that mirrors theirs (docs/layout.md)")


def test_a_module_tested_only_elsewhere_is_found():
    """Tests of `kubernetes/tfjob.py` outside `tests/fmnist_kfp/kubernetes/` (the launchers')
    do not count; nor do the registry's tests for a component once they are gone."""
    tracked = _tracked()
    assert not {"fmnist_kfp/kubernetes/tfjob.py", "kfp_components/train/component.py"} & set(
        untested_modules(tracked))
    without = [path for path in tracked if not path.startswith((
        "tests/fmnist_kfp/kubernetes/test_", "tests/kfp_components/test_"))]
    assert any(path.startswith("tests/fmnist_kfp/launcher/test_tfjob") for path in without)
    assert {"fmnist_kfp/kubernetes/tfjob.py", "kfp_components/train/component.py"} <= set(
        untested_modules(without))
