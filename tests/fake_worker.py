"""A stand-in for a trainer process, for the launcher's and the tuner's process-handling tests
(restarts, SIGTERM): it prints its pid, records a SIGTERM it receives, and otherwise idles
until it is stopped — or, if a test broke, until two minutes have passed.

``python -m tests.fake_worker MARKER_DIR``: a SIGTERM writes ``MARKER_DIR/sigterm-<pid>``
before the process exits, so a test can tell a worker its launcher stopped from one that died
with the launcher (the parent-death signal is a SIGKILL, which leaves no marker)."""

from __future__ import annotations

import os
import signal
import sys
import threading

LIFETIME_SECONDS = 120


def main(marker_dir: str) -> int:
    stopped = threading.Event()

    def on_sigterm(signum, frame):
        with open(os.path.join(marker_dir, f"sigterm-{os.getpid()}"), "w"):
            pass
        stopped.set()

    signal.signal(signal.SIGTERM, on_sigterm)
    print(f"pid={os.getpid()}", flush=True)
    if stopped.wait(LIFETIME_SECONDS):
        return 128 + signal.SIGTERM
    return 3  # never stopped: fail, so that a launcher under test does not report success


def command(marker_dir: str):
    """A replacement for ``TrainingJobSpec.trainer_command`` that starts this module."""
    def trainer_command(self, python: str = sys.executable) -> list[str]:
        return [python, "-m", "tests.fake_worker", marker_dir]

    return trainer_command


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
