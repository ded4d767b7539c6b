"""What a step hands to KFP, written in one place.

Every step returns a dataclass. What of it KFP keeps is a :class:`StepOutputs` (the output
artifact's metadata, the JSON record at the artifact's path, the values of the ``Metrics``
output, the component's return values), and :func:`publish` is the one function every
component writes them with: enums become their values, so the compiled pipeline's outputs
and the files the steps write hold plain JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = ["StepOutputs", "plain", "publish"]


@dataclass(frozen=True)
class StepOutputs:
    """What one step's result puts into KFP."""

    metadata: Mapping[str, Any] = field(default_factory=dict)  # the output artifact's
    record: Mapping[str, Any] | None = None  # the JSON file at the artifact's path (None: none)
    metrics: Mapping[str, float] = field(default_factory=dict)  # the Metrics output's values
    returns: tuple = ()  # the component's return values, in its outputs' order


def plain(value: Any) -> Any:
    """``value`` as plain JSON values: an enum as its value, inside mappings and sequences
    too."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(plain(item) for item in value)
    return value


def publish(outputs: StepOutputs, *, artifact=None, metrics=None) -> tuple:
    """Writes ``outputs``: the metadata into ``artifact`` (and the record, when there is one,
    as the JSON file at its path), each metric logged on ``metrics`` and written as its file
    (so a cached run can reuse it). Returns the component's return values."""
    if artifact is not None:
        artifact.metadata.update(plain(outputs.metadata))
        if outputs.record is not None:
            with open(artifact.path, "w") as handle:
                json.dump(plain(outputs.record), handle, indent=2)
    if metrics is not None:
        for name, value in outputs.metrics.items():
            metrics.log_metric(name, value)
        with open(metrics.path, "w") as handle:
            json.dump(metrics.metadata, handle)
    return plain(outputs.returns)
