"""Freshness windows for step memoization (the role of Argo's ``memoize.maxAge``).

KFP caches a step by its inputs and has no maximum age, so ingestion takes one more input: the
index of the freshness window the run falls in. Runs inside one window share the cache entry;
the first run after the window rolls over has a new input and re-ingests.

The clock is injectable for tests only: ``FMNIST_FRESHNESS_NOW`` (Unix seconds) replaces the real
clock. It travels the way a test needs it to: ``kfp.local``'s subprocess runner starts each step
with the parent's environment (upstream: docs/upstream.md#kubeflow-pipelines), so a test that sets
it pins the window of every run it makes — no run flakes when it crosses 00:00 UTC, and a test can
move the clock past a window boundary without changing the freshness setting. (A pipeline
parameter could do the same, but it would be public: one more thing to document, and a way for
users to keep a window forever.) Nothing sets the variable on a cluster; when it is set, the step
says so in its log.
"""

from __future__ import annotations

import math
import os
import sys
import time

from fmnist_kfp.durations import parse_duration
from fmnist_kfp.errors import UserInputError

CLOCK_ENV = "FMNIST_FRESHNESS_NOW"


def now() -> float:
    """The clock freshness windows are read from: ``$FMNIST_FRESHNESS_NOW`` if set, else the
    real time."""
    pinned = os.environ.get(CLOCK_ENV, "").strip()
    if not pinned:
        return time.time()
    try:
        value = float(pinned)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise UserInputError(
            f"{CLOCK_ENV}={pinned!r} is not a time in Unix seconds; unset it (it exists to pin "
            "the clock in tests)")
    print(f"freshness clock pinned by {CLOCK_ENV}={pinned}", file=sys.stderr, flush=True)
    return value


def freshness_window(freshness: str, at: float | None = None) -> str:
    """Identifies the window that ``at`` (default: :func:`now`) falls in, e.g. ``'24h#20412'``
    (window length and index since the Unix epoch)."""
    seconds = parse_duration(freshness)
    at = now() if at is None else at
    return f"{freshness.strip()}#{int(at // seconds)}"
