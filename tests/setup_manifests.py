"""Reading ``manifests/`` the way ``kubectl apply -k`` does, for the subset of kustomize the
setup bases use (``resources``, ``namespace``, ``secretGenerator`` with ``envs`` and
``options``), so tests can load them into the stand-ins; ``test_setup_manifests`` checks this
reading against ``kubectl kustomize`` where kubectl is installed.

Kustomize's rules used: ``namespace`` is set on every object (kustomize api
``builtins/NamespaceTransformer``); a generated Secret is ``type: Opaque`` with each
``KEY=value`` line of the env file base64-encoded under ``data`` (comments and blank lines
skipped), and ``options`` add labels and annotations (``api/types/generatoroptions.go``).
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1] / "manifests"
BASES = ("pvc", "standalone-rbac", "serving-credentials", "serving-access", "serving-network")


def kustomization(base: str) -> dict:
    return yaml.safe_load((ROOT / base / "kustomization.yaml").read_text())


def read_env(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value
    return values


def build(base: str, namespace: str | None = None, env: dict[str, str] | None = None
          ) -> list[dict]:
    """The objects ``kubectl apply -k manifests/<base> [-n namespace]`` would send. ``env``:
    the values of the generator's env file (default: the ``.example`` with every value set)."""
    spec = kustomization(base)
    objects = []
    for name in spec.get("resources") or []:
        objects += [doc for doc in yaml.safe_load_all((ROOT / base / name).read_text()) if doc]
    for generator in spec.get("secretGenerator") or []:
        data: dict[str, str] = {}
        for env_file in generator.get("envs") or []:
            values = env if env is not None else {
                key: value or f"example-{key.lower()}"
                for key, value in read_env(ROOT / base / f"{env_file}.example").items()}
            data.update(values)
        options = generator.get("options") or {}
        metadata = {"name": generator["name"]}
        if options.get("labels"):
            metadata["labels"] = dict(options["labels"])
        if options.get("annotations"):
            metadata["annotations"] = dict(options["annotations"])
        objects.append({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                        "metadata": metadata,
                        "data": {key: base64.b64encode(value.encode()).decode()
                                 for key, value in data.items()}})
    target = spec.get("namespace") or namespace
    for obj in objects:
        if target:
            obj.setdefault("metadata", {})["namespace"] = target
    return copy.deepcopy(objects)
