"""docs/layout.md says where each thing lives; every file and folder it names is there. (Its
map of every module is generated from the modules' docstrings and checked with the other
generated blocks, tests/tools/test_docs.py.)"""

import re
import subprocess

from tests import ROOT
from tools.docs import MAPPED_FOLDERS

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
