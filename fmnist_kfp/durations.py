"""Durations such as ``30m``, ``24h``, ``7d``, ``1h30m`` (Go/Argo style) or ISO 8601 ``P1D``."""

from __future__ import annotations

import re

from fmnist_kfp.errors import UserInputError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_GO_STYLE = re.compile(r"^(?:\d+(?:\.\d+)?[smhdw])+$")
_GO_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_ISO = re.compile(
    r"^P(?:(?P<w>\d+)W)?(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+)S)?)?$"
)


def parse_duration(text: str) -> float:
    """Returns the duration in seconds, or raises ``UserInputError`` naming the accepted forms."""
    value = (text or "").strip().lower()
    seconds: float | None = None
    if _GO_STYLE.match(value):
        seconds = sum(float(n) * _UNITS[unit] for n, unit in _GO_PART.findall(value))
    else:
        iso = _ISO.match(value.upper())
        if iso and value.upper() not in ("P", "PT") and not value.upper().endswith("T"):
            parts = {k: int(v) for k, v in iso.groupdict().items() if v}
            seconds = float(sum(parts[k] * _UNITS[k.lower()] for k in parts))
    if seconds is None or seconds <= 0:
        raise UserInputError(
            f"freshness {text!r} is not a positive duration; use forms like '30m', '24h', "
            "'7d', '1h30m' or ISO 8601 'P1D'"
        )
    return seconds
