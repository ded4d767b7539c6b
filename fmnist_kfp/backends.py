"""The seam every two-backend family shares (training, tuning, deployment): one name picks
``local`` (this machine) or ``kubernetes`` (the cluster), each a module of the family with the
same shape, and both clean up when the step is terminated."""

from __future__ import annotations

import signal
import threading

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.settings.jobs import BACKENDS


def require_backend(family: str, name: str) -> None:
    """Raises a ``UserInputError`` naming the choices unless ``name`` is one of the family's
    backends (``local`` or ``kubernetes``)."""
    if name not in BACKENDS:
        raise UserInputError(f"unknown {family} backend {name!r}; choose one of "
                             + ", ".join(BACKENDS))


def sigterm_as_exit():
    """Turns SIGTERM (a terminated run, a deleted pod) into ``SystemExit`` so a backend's
    cleanup runs; returns the previous handler to restore (None off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def terminate(signum, frame):
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, terminate)
