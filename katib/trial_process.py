"""What every pod of a Katib trial runs: the trainer as a child process, so that a trainer killed
by a signal (out of memory, a crash, ``kill -9``) stays *retryable* under the TFJob's
``restartPolicy: ExitCode`` even inside Katib's metrics-collector wrapper.

    python -m fmnist_kfp.katib.trial_process -- python -m fmnist_kfp.training.trainer --data-dir ...
    ...

Why it is needed (kubeflow/katib v0.19.0, kubeflow/trainer v1.9.2):

* Katib's pod webhook rewrites the primary pod's command into ``sh -c "<our command> 1>
  /var/log/katib/metrics.log 2>&1 || if <early-stopped marker>; then echo ...; else echo
  ...; exit 1; fi && echo completed > $$.pid"`` (the ``||`` branch only with early stopping).
  With early stopping on, *any* non-zero exit of our command therefore becomes exit code 1,
  which the training operator treats as permanent (``ExitCode``: 1-127 fail the job, >= 128
  recreate the pod): a trainer killed by the kernel fails its trial instead of being restarted.
* A signal to the wrapper shell itself still ends the container with 128 + signal: the shell
  dies before it evaluates ``||`` (verified with dash).

So when the trainer dies with a code >= 128 and this process's parent is Katib's wrapper (its
command line holds the completion marker, which is how Katib's collector finds it too), this
process sends SIGTERM to the wrapper, whose container then exits with 143: retryable.
Everything else keeps its exit code.

Early stopping still works: Katib's collector writes the ``early-stopped`` marker and sends
SIGTERM to the wrapper's *only* child (it refuses more than one), which is this process; a SIGTERM
received here is forwarded to the trainer and never turned against the wrapper, so the wrapper
finds the marker and exits 0. A SIGTERM from the kubelet (pod deletion) reaches the wrapper
directly, or this process when it is the container's own command (pods that Katib does not wrap);
it is forwarded, and the exit code 143 is retryable.

upstream: docs/upstream.md#katib, #training-operator
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

# How Katib's collector recognises the wrapper process (pns.go GetMainProcesses, line 98).
WRAPPER_MARKER = "echo completed > "


def parent_is_katib_wrapper() -> bool:
    """Whether this process runs under Katib's metrics-collector wrapper shell."""
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as handle:
            cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return WRAPPER_MARKER in cmdline


def exit_code(returncode: int) -> int:
    """The code a container runtime reports: 128 + the signal for a process killed by one."""
    return 128 - returncode if returncode < 0 else returncode


def main(argv: list[str] | None = None) -> int:
    command = list(sys.argv[1:] if argv is None else argv)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print("usage: python -m fmnist_kfp.katib.trial_process -- <trainer command>",
              file=sys.stderr)
        return 2
    received: list[int] = []
    child = subprocess.Popen(command)

    def forward(signum, frame):
        received.append(signum)
        if child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = exit_code(child.wait())
    if code >= 128 and not received and parent_is_katib_wrapper():
        print(f"trial_process: the trainer was killed (exit code {code}); ending Katib's "
              "wrapper with SIGTERM so that the training operator recreates this pod",
              file=sys.stderr, flush=True)
        os.kill(os.getppid(), signal.SIGTERM)
    return code


if __name__ == "__main__":
    sys.exit(main())
