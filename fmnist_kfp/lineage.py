"""Lineage every artifact carries: who produced it, from which inputs, with what content.

Each component adds a ``lineage`` entry to its output artifacts' metadata (:func:`lineage_entry`):

* ``producer`` — the step and component, the image it ran, and the pod when it ran on Kubeflow
  (KFP gives a component pod only ``KFP_POD_NAME`` and ``KFP_POD_UID``; the run ID is not in its
  environment, and passing it as an input would defeat the cache);
* ``inputs`` — each input artifact's URI, content digest and producing step;
* ``parameters`` — the values that shaped the output (hyperparameters, sources, settings);
* ``uri`` and ``digest`` — the output's own location and content digest.

A content digest (:func:`content_digest`) is sha256 over a directory's files in a stable order
(path and content of each), so a copy of an artifact has the digest of the original: the
dataset's digest in the trained model's lineage is the digest of the ingested dataset itself,
and the served model's is that of the model the selection chose. The KFP UI shows the entry
beside each artifact; ``fmnist-kfp lineage`` walks the chain from the served model back to the
dataset (:mod:`fmnist_kfp.lineage_report`).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

# The pipeline sets it on every task, a record of the image that task runs (the pods a step
# creates run its image inputs, never this variable).
from fmnist_kfp.settings.platform import IMAGE_ENV

LINEAGE_KEY = "lineage"
DIGEST_PREFIX = "sha256:"
_CHUNK = 1 << 20
POD_NAME_ENV = "KFP_POD_NAME"  # KFP's Argo compiler sets these two on every executor container
POD_UID_ENV = "KFP_POD_UID"
# Data an artifact carries about its content, derived from it (the test-split probabilities
# selection keeps beside the chosen model): its content digest leaves this folder out, so the
# selected copy of a model is still, by digest, the model training made.
DERIVED_DIR = "derived"


class ArtifactLike(Protocol):
    """What lineage needs of a KFP artifact (``dsl.Artifact`` and its subclasses)."""

    uri: str
    path: str
    metadata: dict


def _file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def content_digest(path: str) -> str:
    """``sha256:<hex>`` of a file's bytes, or of a directory's files: for each file in sorted
    order of its relative POSIX path, ``<path>\\0<sha256 of its bytes>\\n``. Empty directories,
    file times and the top-level :data:`DERIVED_DIR` do not count; "" when ``path`` does not
    exist."""
    if os.path.isfile(path):
        return DIGEST_PREFIX + _file_sha256(path)
    if not os.path.isdir(path):
        return ""
    files = []
    for directory, subdirectories, names in os.walk(path):
        if directory == path and DERIVED_DIR in subdirectories:
            subdirectories.remove(DERIVED_DIR)
        subdirectories.sort()
        for name in names:
            full = os.path.join(directory, name)
            if os.path.isfile(full):
                files.append((os.path.relpath(full, path).replace(os.sep, "/"), full))
    digest = hashlib.sha256()
    for relative, full in sorted(files):
        digest.update(f"{relative}\0{_file_sha256(full)}\n".encode())
    return DIGEST_PREFIX + digest.hexdigest()


def producer(step: str, component: str) -> dict[str, Any]:
    """The step that made an artifact, and where it ran."""
    entry = {"step": step, "component": component,
             "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for key, variable in (("image", IMAGE_ENV), ("pod", POD_NAME_ENV),
                          ("pod_uid", POD_UID_ENV)):
        if os.environ.get(variable):
            entry[key] = os.environ[variable]
    return entry


def input_entry(artifact: ArtifactLike) -> dict[str, Any]:
    """An input artifact as lineage names it: its URI, the digest of what this step read, and
    the step that produced it (from the artifact's own lineage, when it has one)."""
    upstream = (artifact.metadata or {}).get(LINEAGE_KEY) or {}
    entry = {"uri": artifact.uri, "digest": content_digest(artifact.path)}
    made_by = (upstream.get("producer") or {}).get("step")
    if made_by:
        entry["producer"] = made_by
    return entry


def lineage_entry(step: str, component: str, *,
                  inputs: Mapping[str, ArtifactLike | Iterable[ArtifactLike]],
                  output: ArtifactLike | None = None,
                  parameters: Mapping[str, Any] | None = None,
                  **extra: Any) -> dict[str, Any]:
    """The ``lineage`` metadata entry of ``output`` (see the module docstring); a list input
    (a fan-in such as the selection's candidates) becomes a list of entries."""
    entry: dict[str, Any] = {"producer": producer(step, component), "inputs": {}}
    for name, value in inputs.items():
        if hasattr(value, "uri"):
            entry["inputs"][name] = input_entry(value)  # type: ignore[arg-type]  # hasattr: one
        else:
            entry["inputs"][name] = [input_entry(item) for item in value]
    entry["parameters"] = dict(parameters or {})
    if output is not None:
        entry["uri"] = output.uri
        entry["digest"] = content_digest(output.path)
    entry.update(extra)
    return entry


def add_lineage(output: ArtifactLike, step: str, component: str, **kwargs: Any) -> dict:
    """Puts :func:`lineage_entry` into ``output.metadata`` (after its files are written, so the
    digest covers them); returns the entry."""
    entry = lineage_entry(step, component, output=output, **kwargs)
    output.metadata[LINEAGE_KEY] = entry
    return entry
