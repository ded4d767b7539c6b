"""The model server's hold on KServe's internals is pinned: every KServe function that
``serving/model_server/kserve_internals.py`` overrides, copies or calls has the source it had in
the kserve release we pin, and everything else in ``serving/`` uses KServe's documented API
only. A KServe upgrade fails here first, naming what to re-read."""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
from importlib import metadata

import pytest

from fmnist_kfp.serving.model_server import kserve_internals
from fmnist_kfp.serving.model_server.kserve_internals import PINNED
from tests import ROOT

# What KServe documents for custom model servers (kserve.github.io "Python Serving Runtime
# API": Model, ModelServer, the errors and the V2 inference types); the logger is its own.
PUBLIC = ("kserve", "kserve.errors", "kserve.protocol.infer_type", "kserve.logging")


def _resolve(qualified: str):
    parts = qualified.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(qualified)


def test_the_installed_kserve_is_the_locked_one_inside_the_declared_range():
    """The hashes below are of the locked release; the serving extra's range allows only its
    minor line (0.x minors change these internals), and a lock that moves fails here first."""
    import tomllib
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [declared] = [Requirement(r) for r in project["optional-dependencies"]["serving"]
                  if Requirement(r).name == "kserve"]
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    [locked] = [p["version"] for p in lock["package"] if p["name"] == "kserve"]
    installed = metadata.version("kserve")
    assert installed == locked == "0.21.0", (installed, locked)
    assert declared.specifier.contains(installed) and not declared.specifier.contains("0.22.0")


@pytest.mark.parametrize("qualified", sorted(PINNED))
def test_every_kserve_internal_we_rely_on_is_unchanged(qualified):
    ours, digest = PINNED[qualified]
    try:
        found = _resolve(qualified)
    except (ImportError, AttributeError) as error:
        pytest.fail(f"kserve {metadata.version('kserve')} has no {qualified} ({error}), which "
                    f"{ours} in serving/model_server/kserve_internals.py relies on: see what "
                    "replaced it, prefer a public hook if there is one now, and update it")
    now = hashlib.sha256(inspect.getsource(found).encode()).hexdigest()
    assert now == digest, (
        f"kserve {metadata.version('kserve')} changed {qualified}, which {ours} in "
        "serving/model_server/kserve_internals.py overrides, copies or calls: re-read it, "
        f"update {ours} (or drop it if KServe now has a public hook), then pin {now}")


def test_every_subclass_of_a_kserve_class_says_why_no_public_hook_exists():
    source = inspect.getsource(kserve_internals)
    lines = source.splitlines()
    tree = ast.parse(source)
    subclasses = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.bases]
    assert {node.name for node in subclasses} == {ours for ours, _ in PINNED.values()}
    for node in subclasses:
        comment, at = [], node.lineno - 2
        while at >= 0 and lines[at].startswith("#"):
            comment.insert(0, lines[at])
            at -= 1
        assert comment and comment[0].startswith("# No public hook: "), node.name


def test_nothing_else_of_the_predictor_imports_kserve_internals():
    """The rest of the predictor (the Model subclass, the protocol, the CLI), the image decoder
    and batch scoring use only what KServe documents."""
    paths = [*(ROOT / "serving" / "model_server").glob("*.py"), ROOT / "fmnist_kfp" / "images.py",
             *(ROOT / "fmnist_kfp" / "scoring").glob("*.py")]
    offenders = []
    for path in paths:
        if path.name == "kserve_internals.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module
                    and node.module.split(".")[0] == "kserve"):
                continue
            names = {alias.name for alias in node.names}
            if node.module not in PUBLIC or (node.module == "kserve"
                                             and not names <= {"Model", "ModelServer"}):
                offenders.append(f"{path.relative_to(ROOT)}: from {node.module} import "
                                 + ", ".join(sorted(names)))
    assert offenders == [], offenders
