"""Names of what the steps create on the cluster: stable across a step's retries."""

from __future__ import annotations

import hashlib
import re


def stable_name(prefix: str, location: str, max_length: int = 63) -> str:
    """A DNS-1035 label that is the same every time this task of this run asks, and different
    for every other task and run: ``prefix`` plus a hash of the task's output location, which
    KFP derives from the run and the task. A retried step therefore finds the remote job
    (TFJob, Katib Experiment) it created."""
    digest = hashlib.sha256(location.encode()).hexdigest()[:10]
    name = re.sub(r"[^a-z0-9-]+", "-", prefix.lower()).strip("-")
    return f"{name[:max_length - len(digest) - 1]}-{digest}"
