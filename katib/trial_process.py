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
finds the marker and exits 0.

A SIGTERM from the kubelet (pod deletion) reaches the wrapper directly, or this process when it
is the container's own command (pods that Katib does not wrap); it is forwarded, and the exit
code 143 is retryable.

An early-stopped trial is then held: once the trainer has ended, this process waits for the
pod's deletion (a second SIGTERM), at most ``EARLY_STOP_HOLD_SECONDS``, before it exits (our
Experiments retain their trials' jobs with early stopping, so the wait is the whole hold). Katib's
collector reports the stop to the median-stopping service only after the wrapper has ended or 60
s have passed (file-metricscollector main.go v0.19.0 lines 301-331), in a goroutine; its main
goroutine exits the collector as soon as it sees the wrapper gone with ``completed`` in the
marker (common/pns.go lines 147-172), which the wrapper's ``... fi && echo completed`` writes
even after an early stop (pod/utils.go lines 200-221). A wrapper that ends at once therefore
races the report, and a lost report leaves the trial Running for good (its job succeeded, no
observation: trial_controller.go lines 258-266), as it did on the real Katib. Held, the wrapper
outlives the collector's 60 s wait; the trial is marked EarlyStopped and Katib reads its
observation from the retained job (fmnist_kfp.kubernetes.experiment.retains_trial_jobs).
The trainer learns of early stopping through ``KATIB_EARLY_STOPPING_ENV``, so that a trial it
does not train (over the parameter budget) waits for the collector's verdict on the objective
it printed instead of ending before the collector has read it.

upstream: docs/upstream.md#katib, #training-operator
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from fmnist_kfp.training.training_job import KATIB_EARLY_STOPPING_ENV

# How Katib's collector recognises the wrapper process (pns.go GetMainProcesses, line 98).
WRAPPER_MARKER = "echo completed > "
# What the collector writes to <wrapper pid>.pid before it stops a trial (common/const.go).
EARLY_STOPPED = "early-stopped"
# The collector's wait for the wrapper after an early stop (main.go line 302), and a margin.
EARLY_STOP_HOLD_SECONDS = 90


def _parent_cmdline() -> str:
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def parent_is_katib_wrapper() -> bool:
    """Whether this process runs under Katib's metrics-collector wrapper shell."""
    return WRAPPER_MARKER in _parent_cmdline()


def wrapper_stops_early() -> bool:
    """Whether the wrapper has Katib's early-stopping branch (the Experiment stops early)."""
    cmdline = _parent_cmdline()
    return WRAPPER_MARKER in cmdline and EARLY_STOPPED in cmdline


def stopped_early() -> bool:
    """Whether Katib's collector has marked this trial early-stopped: ``early-stopped`` in
    ``<wrapper pid>.pid`` beside the completion marker the wrapper's command names."""
    cmdline = _parent_cmdline()
    if WRAPPER_MARKER not in cmdline:
        return False
    target = cmdline.split(WRAPPER_MARKER, 1)[1].split()[0]
    marker = os.path.join(os.path.dirname(target), f"{os.getppid()}.pid")
    try:
        with open(marker) as handle:
            return handle.readline().strip() == EARLY_STOPPED
    except OSError:
        return False


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
    env = {**os.environ, KATIB_EARLY_STOPPING_ENV: "1"} if wrapper_stops_early() else None
    child = subprocess.Popen(command, env=env)

    def forward(signum, frame):
        received.append(signum)
        if child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = exit_code(child.wait())
    if received and stopped_early():
        # Held until the pod is deleted (see the module docstring).
        seen, deadline = len(received), time.monotonic() + EARLY_STOP_HOLD_SECONDS
        while len(received) == seen and time.monotonic() < deadline:
            time.sleep(0.2)
        return code
    if code >= 128 and not received and parent_is_katib_wrapper():
        print(f"trial_process: the trainer was killed (exit code {code}); ending Katib's "
              "wrapper with SIGTERM so that the training operator recreates this pod",
              file=sys.stderr, flush=True)
        os.kill(os.getppid(), signal.SIGTERM)
    return code


if __name__ == "__main__":
    sys.exit(main())
