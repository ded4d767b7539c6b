"""Runs the local training launcher or the local tuner in a process of its own, with stand-in
workers (:mod:`tests.fake_worker`), so that a test can send it SIGTERM as KFP does to a step
whose run is terminated.

``python -m tests.launcher_harness launcher|tuner WORK_DIR``. As it exits it prints
``left=[pids]``: its descendant processes still alive after the launcher or tuner returned
(a zombie counts: nobody waited for it). Run from the repository root."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil

from fmnist_kfp.launcher.local_processes import LocalProcessLauncher
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.training_job import TrainingJobSpec
from tests.fake_worker import command

ROOT = Path(__file__).resolve().parents[1]


def _left_behind() -> list[int]:
    return [p.pid for p in psutil.Process().children(recursive=True)]


def job_spec(root: str | Path, data_dir: str | Path, **values) -> TrainingJobSpec:
    """A training job over ``data_dir`` working in ``root/model`` and exporting to
    ``root/model/1``, the training step's layout."""
    model = Path(root) / "model"
    return TrainingJobSpec(data_dir=str(data_dir), export_dir=str(model / "1"),
                           work_dir=str(model), **values)


def no_processes_left(launcher: LocalProcessLauncher) -> bool:
    """Every process the launcher started has exited (its pid is free, or it is a zombie:
    exited, not yet reaped)."""
    return all(not psutil.pid_exists(w.process.pid) or
               psutil.Process(w.process.pid).status() == psutil.STATUS_ZOMBIE
               for w in launcher.workers)


def run_launcher(work: str) -> None:
    spec = job_spec(work, work, name="harness-job", config=TrainingConfig(), num_workers=2)
    LocalProcessLauncher(cpu_count=2).run(spec)


def run_tuner(work: str) -> None:
    from fmnist_kfp.katib.optuna_search import LocalTuner
    from fmnist_kfp.tuning.experiment_settings import ExperimentSettings
    from fmnist_kfp.tuning.search_space import Parameter, SearchSpace

    settings = ExperimentSettings(name="harness-search", algorithm="random", model_type="basic",
                                  parallel_trial_count=2, max_trial_count=4, num_workers=2,
                                  early_stopping=None)
    space = SearchSpace([Parameter.double("learning_rate", 1e-4, 1e-2, log=True)])
    LocalTuner(f"{work}/trials", cpu_count=2).run(settings, space, work)


def main(mode: str, work: str) -> None:
    TrainingJobSpec.trainer_command = command(work)  # type: ignore[method-assign]
    try:
        {"launcher": run_launcher, "tuner": run_tuner}[mode](work)
    finally:
        print(f"left={_left_behind()}", flush=True)


# The test's side: start the harness, read its workers, wait for it.


def spawn(argv: list[str], cwd: str | Path | None = None) -> tuple[subprocess.Popen, queue.Queue]:
    """``argv`` in a process of its own; its output lines arrive on the queue, then ``None``."""
    process = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return process, lines


def spawn_script(template: str, **values: str) -> tuple[subprocess.Popen, queue.Queue]:
    """``template`` (a script with a ``{repo}`` field and ``values``' fields) run by this
    Python in a process of its own, as :func:`spawn`."""
    script = textwrap.dedent(template.format(repo=os.getcwd(), **values))
    return spawn([sys.executable, "-c", script])


def drain(process: subprocess.Popen, lines: queue.Queue, seen: list[str]) -> None:
    """Reads the child's output to its end, then waits (bounded) for it to exit."""
    while read_until(lines, "\0", seen):
        pass
    process.wait(timeout=60)


def read_until(lines: queue.Queue, text: str, seen: list[str], seconds: float = 60) -> bool:
    """The child's output until a line holds ``text`` (True) or it ends (False); bounded."""
    while True:
        line = lines.get(timeout=seconds)
        if line is None:
            lines.put(None)  # the end stays visible to the next reader
            return False
        seen.append(line)
        if text in line:
            return True


def start(mode: str, work: Path) -> tuple[subprocess.Popen, queue.Queue]:
    """The launcher or tuner in a process of its own (this module)."""
    return spawn([sys.executable, "-m", "tests.launcher_harness", mode, str(work)], cwd=ROOT)


def worker_pids(lines: queue.Queue, count: int, seen: list[str],
                timeout: float = 60) -> dict[str, int]:
    """Reads output until ``count`` stand-in workers printed their pid; job/worker → pid."""
    pids: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    while len(pids) < count:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError("workers did not start:\n" + "\n".join(seen)) from None
        if line is None:
            raise AssertionError("the harness ended before its workers started:\n"
                                 + "\n".join(seen))
        seen.append(line)
        if line.startswith("[") and "] pid=" in line:
            who, pid = line[1:].split("] pid=")
            pids[who] = int(pid)
    return pids


def finish(process: subprocess.Popen, lines: queue.Queue, seen: list[str]) -> list[str]:
    """Waits (bounded) for the harness to exit and returns all it printed."""
    process.wait(timeout=60)
    deadline = time.monotonic() + 10
    while not (seen and seen[-1].startswith("left=")) and time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        if line is None:
            break
        seen.append(line)
    return seen


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


if __name__ == "__main__":
    main(*sys.argv[1:])
