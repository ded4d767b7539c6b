"""Strict validation of manifests against the real upstream CRDs in ``../shared/crds``.

The API server rejects unknown fields under strict field validation; JSON Schema allows them by
default, so ``additionalProperties: false`` is injected wherever a schema lists ``properties``
and neither allows extra keys nor preserves unknown fields (see ../shared/crds/SOURCE.md).
"""

from __future__ import annotations

import copy
import os
from functools import cache
from pathlib import Path

import jsonschema
import pytest
import yaml

# FMNIST_CRDS_DIR: where they are when the tests run from a copy (`make mutation`'s mutants/).
CRDS = Path(os.environ.get("FMNIST_CRDS_DIR")
            or Path(__file__).resolve().parents[1].parent / "shared" / "crds")


def crds_dir() -> Path:
    if (CRDS / "tfjob.kubeflow.org_v1.yaml").exists():
        return CRDS
    message = f"the upstream CRDs are missing from {CRDS}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def _strict(schema):
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


# Upstream CRDs kept beside the tests, each with its source in tests/crds/SOURCE.md (Kueue,
# Volcano, scheduler-plugins, Kubeflow's Tensorboard): not among ../shared/crds.
FIXTURE_CRDS = Path(__file__).resolve().parent / "crds"


def _crd_file(file_name: str) -> Path:
    fixture = FIXTURE_CRDS / file_name
    return fixture if fixture.exists() else crds_dir() / file_name


@cache
def served_schema(file_name: str, version: str) -> dict:
    """The schema the API server publishes for the CRD's served ``version`` (``/openapi/v3``),
    as the file has it (read once: some are large)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    document = yaml.load(_crd_file(file_name).read_text(), Loader=loader)
    for entry in document["spec"]["versions"]:
        if entry["name"] == version and entry.get("served"):
            return entry["schema"]["openAPIV3Schema"]
    raise LookupError(f"{file_name} serves no version {version}")


@cache
def crd_schema(file_name: str, version: str) -> dict:
    return _strict(copy.deepcopy(served_schema(file_name, version)))


@cache
def _validator(file_name: str, version: str):
    schema = crd_schema(file_name, version)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)  # once: ten seconds for the 2 MB InferenceService CRD
    return cls(schema)


def validate_strict(manifest: dict, file_name: str, version: str) -> None:
    """Raises ``jsonschema.ValidationError`` naming the first offending field (the same error
    ``jsonschema.validate`` picks)."""
    error = jsonschema.exceptions.best_match(_validator(file_name, version).iter_errors(manifest))
    if error is not None:
        raise error
