"""Strict validation of Katib manifests against Katib's own type definitions.

Katib's CRDs are opaque (``x-kubernetes-preserve-unknown-fields`` at the root), so the types come
from ``katib_v1beta1_swagger.json`` in ../shared/crds: the OpenAPI definitions generated from
Katib's Go types. Its references to Kubernetes types (``v1.ObjectMeta``, ``v1.Container``,
``v1.unstructured.Unstructured``, ...) have no definition there and are stubbed as ``{}``; a
trial template is checked against its own CRD separately. ``additionalProperties: false`` is
injected as in :mod:`tests.crd_schemas`, so a misspelt field fails.
"""

from __future__ import annotations

import json
import os
import re
from functools import cache

import jsonschema
import pytest

from tests.crd_schemas import _strict, crds_dir

SWAGGER = "katib_v1beta1_swagger.json"


@cache
def katib_schema(definition: str) -> dict:
    """A self-contained schema for one swagger definition (e.g. ``v1beta1.Experiment``)."""
    path = crds_dir() / SWAGGER
    if not path.exists():  # like crds_dir: a missing file fails in CI, skips locally
        message = f"{SWAGGER} is missing from {path.parent}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    definitions = json.loads(path.read_text())["definitions"]
    if definition not in definitions:
        raise LookupError(f"{SWAGGER} defines no {definition}")
    referenced = set(re.findall(r'"\$ref": "#/definitions/([^"]+)"', json.dumps(definitions)))
    stubs = {name: {} for name in referenced - set(definitions)}
    return {"$ref": f"#/definitions/{definition}",
            "definitions": {**_strict(definitions), **stubs}}


@cache
def _validator(definition: str):
    schema = katib_schema(definition)
    # Swagger 2.0 schemas are JSON Schema draft 4.
    jsonschema.Draft4Validator.check_schema(schema)  # once per definition: it is slow
    return jsonschema.Draft4Validator(schema)


def validate_katib(manifest: dict, definition: str = "v1beta1.Experiment") -> None:
    """Raises ``jsonschema.ValidationError`` naming the first offending field."""
    error = jsonschema.exceptions.best_match(_validator(definition).iter_errors(manifest))
    if error is not None:
        raise error
