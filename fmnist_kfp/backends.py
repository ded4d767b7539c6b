"""The seam every two-backend family shares (training, tuning, deployment): one name picks
``local`` (this machine) or ``kubernetes`` (the cluster), each a module of the family with the
same shape, and both clean up when the step is terminated."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import TypeVar

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.settings.jobs import BACKENDS

T = TypeVar("T")


def choose_backend(family: str, name: str, **makers: Callable[[], T]) -> T:
    """``makers[name]()``: the family's backend called ``name`` (``local`` or ``kubernetes``);
    an unknown name is a ``UserInputError`` naming the choices."""
    if name not in BACKENDS or name not in makers:
        raise UserInputError(f"unknown {family} backend {name!r}; choose one of "
                             + ", ".join(makers))
    return makers[name]()


def sigterm_as_exit():
    """Turns SIGTERM (a terminated run, a deleted pod) into ``SystemExit`` so a backend's
    cleanup runs; returns the previous handler to restore (None off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def terminate(signum, frame):
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, terminate)
