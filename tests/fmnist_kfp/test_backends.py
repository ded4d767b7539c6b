"""The two-backend seam: an unknown backend is refused naming the choices, and SIGTERM (a
terminated run, a deleted pod) becomes SystemExit so that a backend's cleanup runs."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from fmnist_kfp.backends import require_backend, sigterm_as_exit
from fmnist_kfp.errors import UserInputError


def test_an_unknown_backend_is_refused_naming_the_family_and_the_choices():
    require_backend("training", "local")
    require_backend("training", "kubernetes")
    with pytest.raises(UserInputError, match="unknown tuning backend 'katib'; choose one of "
                                             "local, kubernetes"):
        require_backend("tuning", "katib")


def test_sigterm_runs_the_cleanup_and_the_old_handler_comes_back():
    cleaned = []
    previous = sigterm_as_exit()
    try:
        with pytest.raises(SystemExit) as exited:
            try:
                os.kill(os.getpid(), signal.SIGTERM)  # handled before the next line runs
                cleaned.append("not reached")
            finally:
                cleaned.append(True)
        assert exited.value.code == 128 + signal.SIGTERM and cleaned == [True]
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert signal.getsignal(signal.SIGTERM) is previous


def test_off_the_main_thread_nothing_is_installed():
    found = []
    thread = threading.Thread(target=lambda: found.append(sigterm_as_exit()))
    thread.start()
    thread.join()
    assert found == [None]
