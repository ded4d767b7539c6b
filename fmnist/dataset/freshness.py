"""Freshness windows for step memoization (the role of Argo's ``memoize.maxAge``).

KFP caches a step by its inputs and has no maximum age, so ingestion takes one more input: the
index of the freshness window the run falls in. Runs inside one window share the cache entry;
the first run after the window rolls over has a new input and re-ingests.
"""

from __future__ import annotations

import time

from fmnist.durations import parse_duration


def freshness_window(freshness: str, now: float | None = None) -> str:
    """Identifies the current window, e.g. ``'24h#20412'`` (window length and index)."""
    seconds = parse_duration(freshness)
    now = time.time() if now is None else now
    return f"{freshness.strip()}#{int(now // seconds)}"
