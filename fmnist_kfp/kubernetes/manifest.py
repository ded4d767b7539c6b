"""A Kubernetes object as the JSON the API server receives."""

from __future__ import annotations

from typing import Any


def to_manifest(obj: Any) -> dict[str, Any]:
    """``obj`` with camelCase keys and no nulls, as the API server receives it. The Katib
    SDK's models (pydantic, openapi-generator 7) serialize themselves with their own
    ``to_dict()`` (katib v0.19.0 api/python_api/kubeflow_katib_api/models/v1beta1_experiment.py
    lines 60-87); the Kubernetes client's models, and dicts holding them, go through
    ``ApiClient.sanitize_for_serialization``."""
    if hasattr(obj, "model_dump"):
        return obj.to_dict()
    from kubernetes.client import ApiClient

    return ApiClient().sanitize_for_serialization(obj)
