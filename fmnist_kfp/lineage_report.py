"""Reading lineage back: which data and which run produced a model, and what serves it.

``kfp.local`` writes every task's ``executor_output.json`` (each output artifact's URI and
metadata) under ``<pipeline root>/<run>/[<for-loop>/]<task>/``. A cached task writes nothing in
the new run: its outputs are the earlier run's, which is why the index covers the whole pipeline
root. Each artifact's ``lineage`` entry (:mod:`fmnist_kfp.lineage`) names its inputs' URIs, so the
chain is followed from the served model (the deploy step's record) or any artifact back to the
ingested dataset.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.lineage import LINEAGE_KEY, content_digest

EXECUTOR_OUTPUT = "executor_output.json"
# Where a chain starts in a run: what is served, else what was selected.
STARTS = (("deploy-model", "deployment"), ("select-best-model", "best_model"))


@dataclass
class Artifact:
    """One output artifact of one task, as ``executor_output.json`` records it."""

    uri: str
    name: str
    task: str
    run: str
    metadata: dict[str, Any]

    @property
    def lineage(self) -> dict[str, Any]:
        return self.metadata.get(LINEAGE_KEY) or {}


@dataclass
class Index:
    """Every output artifact under a pipeline root, by URI."""

    root: Path
    artifacts: dict[str, Artifact] = field(default_factory=dict)

    @classmethod
    def of(cls, root: str | Path) -> Index:
        root = Path(root).resolve()
        index = cls(root)
        for path in sorted(root.rglob(EXECUTOR_OUTPUT)):
            task_dir = path.parent
            run_dir = task_dir.parent
            if run_dir.name.startswith("for-loop-"):
                run_dir = run_dir.parent
            try:
                outputs = json.loads(path.read_text()).get("artifacts", {})
            except (OSError, json.JSONDecodeError):
                continue
            for name, entry in outputs.items():
                for artifact in entry.get("artifacts", []):
                    uri = artifact.get("uri", "")
                    index.artifacts[uri] = Artifact(uri, name, task_dir.name, run_dir.name,
                                                    artifact.get("metadata") or {})
        return index

    def runs(self) -> list[str]:
        """Run directories, oldest first (kfp.local names them with their start time)."""
        return sorted({artifact.run for artifact in self.artifacts.values()})

    def start_of_run(self, run: str) -> Artifact:
        for task, output in STARTS:
            for artifact in self.artifacts.values():
                if artifact.run == run and artifact.task == task and artifact.name == output:
                    return artifact
        raise UserInputError(f"run {run} has no deployment or selected model to trace")


def _pipeline_root_of(path: Path) -> Path:
    """The pipeline root above an artifact: <root>/<run>/[<for-loop>/]<task>/<output>."""
    for ancestor in [path, *path.parents]:
        if (ancestor / EXECUTOR_OUTPUT).exists():
            run_dir = ancestor.parent
            if run_dir.name.startswith("for-loop-"):
                run_dir = run_dir.parent
            return run_dir.parent
    raise UserInputError(
        f"{path} is not inside a local pipeline run (no {EXECUTOR_OUTPUT} above it); pass a "
        "model artifact, a run directory or the pipeline root (runs/local)")


def resolve(path: str | Path) -> tuple[Index, Artifact]:
    """The index and the artifact a chain starts from, for a pipeline root (its latest run), a
    run directory, or an artifact (a model directory, a deployment record)."""
    target = Path(path).resolve()
    if not target.exists():
        raise UserInputError(f"{path} does not exist; pass a model artifact, a run directory "
                             "or the pipeline root (runs/local)")
    if target.is_dir() and any(target.glob(f"*/{EXECUTOR_OUTPUT}")):  # a run directory
        index = Index.of(target.parent)
        return index, index.start_of_run(target.name)
    if target.is_dir() and any(target.glob(f"*/*/{EXECUTOR_OUTPUT}")):  # a pipeline root
        index = Index.of(target)
        for run in reversed(index.runs()):  # the latest run with something to trace
            try:
                return index, index.start_of_run(run)
            except UserInputError:
                continue
        raise UserInputError(f"no run under {path} has a deployment or a selected model")
    index = Index.of(_pipeline_root_of(target))
    artifact = index.artifacts.get(str(target))
    if artifact is None:
        raise UserInputError(f"{path} is not an output artifact recorded under {index.root}")
    return index, artifact


def chain(index: Index, start: Artifact) -> list[dict[str, Any]]:
    """The lineage chain from ``start`` back to its sources, depth first: one node per
    artifact with its depth, task, run, URI, digest, producer and parameters. A fan-in input
    (the selection's candidates) is listed on its node, not followed; its winner is."""
    nodes: list[dict[str, Any]] = []
    seen: set[str] = set()

    def visit(artifact: Artifact, depth: int, via: str) -> None:
        lineage = artifact.lineage
        node = {
            "depth": depth, "via": via, "artifact": artifact.name, "task": artifact.task,
            "run": artifact.run, "uri": artifact.uri,
            "digest": lineage.get("digest", ""),
            "producer": lineage.get("producer", {}),
            "parameters": lineage.get("parameters", {}),
        }
        for key in ("served", "candidates"):
            if key in lineage:
                node[key] = lineage[key]
        fan_in = {name: [item["uri"] for item in value]
                  for name, value in (lineage.get("inputs") or {}).items()
                  if isinstance(value, list)}
        if fan_in:
            node["fan_in"] = fan_in
        nodes.append(node)
        if artifact.uri in seen:
            node["repeated"] = True
            return
        seen.add(artifact.uri)
        for name, value in (lineage.get("inputs") or {}).items():
            if isinstance(value, list):
                continue
            upstream = index.artifacts.get(value.get("uri", ""))
            if upstream is None:
                nodes.append({"depth": depth + 1, "via": name, "uri": value.get("uri", ""),
                              "digest": value.get("digest", ""), "missing": True})
                continue
            visit(upstream, depth + 1, name)

    visit(start, 0, "")
    return nodes


def verify(nodes: list[dict[str, Any]]) -> list[str]:
    """Artifacts whose files no longer have the digest their lineage recorded."""
    return [uri for uri, same in _checked(nodes) if not same]


def _checked(nodes: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """(uri, whether its files still have the recorded digest) of each artifact that has a
    digest and files on this machine, each once."""
    found: dict[str, bool] = {}
    for node in nodes:
        uri, recorded = node.get("uri", ""), node.get("digest", "")
        if recorded and uri not in found and os.path.exists(uri):
            found[uri] = content_digest(uri) == recorded
    return list(found.items())


def verification_line(nodes: list[dict[str, Any]]) -> str:
    """What ``lineage --verify`` checked, said when nothing changed."""
    checked = len(_checked(nodes))
    unchecked = len({n.get("uri") for n in nodes}) - checked
    rest = (f"; {unchecked} without a digest or files on this machine, not checked"
            if unchecked else "")
    return f"verified: the {checked} artifacts with files here match their recorded digests{rest}"


def _short(digest: str) -> str:
    return digest[:19] if digest else "(no digest)"


def _value(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def format_chain(nodes: list[dict[str, Any]]) -> str:
    """The chain as indented text: each artifact, the step that made it, its parameters."""
    lines = []
    for node in nodes:
        pad = "  " * node["depth"] + ("<- " if node["depth"] else "")
        via = f"[{node['via']}] " if node.get("via") else ""
        if node.get("missing"):
            lines.append(f"{pad}{via}{node['uri']} {_short(node['digest'])} (not recorded here)")
            continue
        producer = node["producer"]
        where = f"{node['task']} in {node['run']}"
        if producer.get("pod"):
            where += f", pod {producer['pod']}"
        lines.append(f"{pad}{via}{node['artifact']} {_short(node['digest'])} from {where}"
                     + (" (as above)" if node.get("repeated") else ""))
        if node.get("repeated"):
            continue
        inner = "  " * node["depth"] + ("   " if node["depth"] else "") + "   "
        if node.get("served"):
            lines.append(f"{inner}served: {_value(node['served'])}")
        for name, value in node["parameters"].items():
            lines.append(f"{inner}{name}: {_value(value)}")
        for name, uris in node.get("fan_in", {}).items():
            lines.append(f"{inner}{name}: {len(uris)} artifacts")
        lines.append(f"{inner}uri: {node['uri']}")
    return "\n".join(lines)
