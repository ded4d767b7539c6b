"""What a local run shows on the terminal, and the log file that holds everything else.

``kfp.local`` prints each step's executor input and output, and everything the step prints
(its trainers' epoch lines, its servers' start-up), to ``sys.stdout``: thousands of lines for
one run. :class:`RunConsole` sends all of it to a log file and shows a person what they need:
one line per step as it starts and ends (name, cached or not, seconds), the live progress of
training (model, epoch/epochs, accuracy, images/s, time left) and of a search (trials
done/total, best so far), and the last lines of a step that failed (a Python traceback among
them cut to its exception: the log has its frames). On a terminal the progress is drawn by rich
and replaced in place; where the output is a file or a pipe (CI), only the step lines are
written. ``verbose=True`` copies the whole log to the terminal too.
"""

from __future__ import annotations

import collections
import io
import logging
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TextIO

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STARTED = re.compile(r"^Executing task '?([\w.-]+)'?")
_FINISHED = re.compile(r"^Task '?([\w.-]+)'? finished with status (\w+)")
_CACHE_HIT = re.compile(r"^Task '?([\w.-]+)'? cache hit")
# The trainer's lines (fmnist_kfp.training.trainer), relayed by the launcher as
# "[<job>/<replica>] ...": the model it trains, then one line per epoch.
_TRAINING = re.compile(r"\[(?P<job>[^\]/]+)/[\w-]+\] [\w-]+: training (?P<model>\w+) \(")
_EPOCH = re.compile(r"\[(?P<job>[^\]/]+)/[\w-]+\] \S+ epoch=(?P<epoch>\d+) epochs=(?P<epochs>\d+)"
                    r"(?P<metrics>.*)$")
# The local search's first line and its line per finished trial (fmnist_kfp.katib.optuna_search).
_SEARCH = re.compile(r"search of .*?: (?P<total>\d+) trials,")
# The tune step with tuning off (kfp_components/tune/component.py): it hands values on.
_TUNING_OFF = re.compile(r"^tuning off for (?P<model>\w+):")
TUNING_OFF = "tuning off"
_TRIAL = re.compile(r"\| (?P<done>\d+)/(?P<total>\d+) done \([^|]*(?:\| best (?P<best>[\d.]+))?")
_METRIC = re.compile(r"(\w+)=([-\d.e]+)")
# Our own warnings (fmnist_kfp.cli prints them as "warning: ..."), the run's or a step's: a
# person should act on them, so they reach the terminal.
_WARNING = re.compile(r"^\s*warning: ")
# A failed step's last lines are shown; the rest is in the log file.
FAILURE_TAIL_LINES = 25
# A Python traceback's first line, after kfp.local's indent of a step's output and the local
# launcher's "[job/replica] " before a worker's; the lines below it indented further are its
# frames, the first one that is not is the exception.
_TRACEBACK = re.compile(r"^(?P<lead>\s*(?:\[[^\]]+\] )?)Traceback \(most recent call last\):$")
_CHAINED = ("During handling of the above exception, another exception occurred:",
            "The above exception was the direct cause of the following exception:")


def without_tracebacks(text: str) -> str:
    """``text`` with each Python traceback in it cut to the exception it ends with: the terminal
    says what failed, the run's log file keeps the frames. A worker's traceback reaches the
    terminal in a failed step's last lines and inside a training job's error (its workers' last
    lines)."""
    kept: list[str] = []
    lead = None  # inside a traceback: what comes before its first line
    for line in text.split("\n"):
        if lead is not None:
            if line.startswith(lead) and line[len(lead):len(lead) + 1].isspace():
                continue  # a frame: its file and line, its source, its carets
            lead = None
        if match := _TRACEBACK.match(line):
            lead = match["lead"]
            # A chained exception: the one before stays, the sentence joining them goes.
            while kept and (not kept[-1].strip() or kept[-1].strip() in _CHAINED):
                kept.pop()
            continue
        kept.append(line)
    return "\n".join(kept)


def _in_executor_input(step: _Step, line: str, text: str) -> bool:
    """Whether ``line`` belongs to the executor input kfp logs at the step's start (and moves
    along it: see ``_Step.executor_input``)."""
    if step.executor_input is None:
        if text.endswith("Got executor_input:"):
            step.executor_input = ""
            return True
        return False
    if step.executor_input == "":
        if text != "{":
            step.executor_input = None  # not the JSON after all
            return False
        step.executor_input = line[:len(line) - len(line.lstrip())]
        return True
    if line == step.executor_input + "}":
        step.executor_input = None
    return True


def plain(text: str) -> str:
    """``text`` without the terminal colours kfp.local puts into its messages."""
    return _ANSI.sub("", text)


@dataclass
class _Step:
    name: str
    started: float = field(default_factory=time.time)
    model: str = ""
    lines: collections.deque = field(
        default_factory=lambda: collections.deque(maxlen=FAILURE_TAIL_LINES))
    epochs_seen: set = field(default_factory=set)
    record: dict = field(default_factory=dict)  # its entry in RunConsole.steps
    last_metrics: dict = field(default_factory=dict)
    trials: str = ""
    # Inside the executor input kfp's executor logs at a step's start (kfp/dsl/executor_main.py:
    # "Got executor_input:" and the JSON, indent 4): "" before its "{", then the "{" line's
    # indent, whose "}" closes it. Kept from the step's last lines: it is no part of an error.
    executor_input: str | None = None


class _Lines(io.TextIOBase):
    """``sys.stdout`` and ``sys.stderr`` while the run lasts: hands the console whole lines."""

    def __init__(self, console: RunConsole):
        self._console = console
        self._partial = ""
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            self._partial += text
            *lines, self._partial = self._partial.split("\n")
        for line in lines:
            self._console.output(line)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    encoding = "utf-8"  # what code that encodes for sys.stdout asks


class RunConsole(logging.Filter):
    """The terminal and the log file of one local run (see the module docstring). Use as a
    context manager around the run; :attr:`log_path` is where everything went."""

    def __init__(self, log_path: str, *, verbose: bool = False, terminal: TextIO | None = None,
                 origin: float | None = None):
        super().__init__()
        self.log_path = log_path
        self.verbose = verbose
        self._terminal = terminal
        self.origin = time.time() if origin is None else origin  # "ended_seconds" count from here
        # Each step as kfp.local ran it: name, cache_hit, seconds, ended_seconds, status.
        self.steps: list[dict] = []
        self._steps: dict[str, _Step] = {}
        self._current: _Step | None = None
        self._lock = threading.RLock()

    # --- the context -----------------------------------------------------------------------
    def __enter__(self) -> RunConsole:
        from rich.console import Console

        os.makedirs(os.path.dirname(self.log_path) or ".", exist_ok=True)
        terminal = self._terminal or sys.stdout
        self._log = open(self.log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self._console = Console(file=terminal, highlight=False, soft_wrap=True)
        self._progress = self._live_progress() if self._console.is_terminal else None
        self._saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = lines = _Lines(self)
        # Log handlers made before the run (the CLI's) hold the terminal's streams themselves.
        self._handlers = [(h, h.setStream(lines)) for h in logging.getLogger().handlers
                          if isinstance(h, logging.StreamHandler) and h.stream in self._saved]
        logging.getLogger().addFilter(self)  # kfp.local's step events; they stay in the log
        self.say(f"Log: {self.log_path} (every step's output; --verbose shows it here)")
        return self

    def __exit__(self, *exc) -> None:
        logging.getLogger().removeFilter(self)
        sys.stdout, sys.stderr = self._saved
        for handler, stream in self._handlers:
            handler.setStream(stream)
        if self._progress is not None:
            self._progress.stop()
        self._log.close()

    def _live_progress(self):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        progress = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                            BarColumn(bar_width=20),
                            MofNCompleteColumn(), TextColumn("{task.fields[detail]}"),
                            TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                            console=self._console, transient=True,
                            redirect_stdout=False, redirect_stderr=False)
        progress.start()
        self._task = progress.add_task("", total=None, detail="")
        return progress

    # --- what reaches the terminal -----------------------------------------------------------
    def say(self, text: str) -> None:
        """A line for the person at the terminal (also in the log)."""
        with self._lock:
            self._log.write(text + "\n")
            self._console.print(text, markup=False)

    def output(self, line: str) -> None:
        """A line of the run's output: into the log; read for progress."""
        with self._lock:
            self._log.write(line + "\n")
            if self.verbose:
                self._console.print(line, markup=False)
            text = plain(line).strip()
            if _WARNING.match(text) and not self.verbose:
                self._console.print(text, markup=False)
            step = self._current
            if step is None:
                return
            if _in_executor_input(step, plain(line).rstrip(), text):
                return
            step.lines.append(plain(line).rstrip())  # indented: where a traceback's frames are
            self._read_progress(step, text)

    def filter(self, record: logging.LogRecord) -> bool:
        message = plain(str(record.getMessage())).strip()
        if match := _CACHE_HIT.match(message):
            self.steps.append({"step": match[1], "seconds": 0.0, "cache_hit": True,
                               "status": "SUCCESS"})
            self.say(f"  {match[1]:<28} cached")
        elif match := _STARTED.match(message):
            self._start(match[1], record.created)
        elif match := _FINISHED.match(message):
            self._end(match[1], match[2], record.created)
        return True

    def steps_with_shares(self, total_seconds: float) -> list[dict]:
        """:attr:`steps`, each with its share of the run's wall time."""
        return [{**step, "share": round(step["seconds"] / total_seconds, 4)
                 if total_seconds > 0 else 0.0} for step in self.steps]

    # --- steps ---------------------------------------------------------------------------------
    def _start(self, name: str, when: float) -> None:
        with self._lock:
            self._current = self._steps[name] = _Step(
                name, started=when, record={"step": name, "cache_hit": False})
            self.steps.append(self._current.record)
            if self._progress is None:
                self.say(f"  {name:<28} started")
            else:
                self._progress.reset(self._task, total=None, description=name, detail="")

    def _end(self, name: str, status: str, when: float) -> None:
        with self._lock:
            step = self._steps.pop(name, None)
            if step is None:
                return
            seconds = round(when - step.started, 2)
            step.record.update(seconds=seconds, ended_seconds=round(when - self.origin, 2),
                               status=status, model=step.model)
            label = f"{name} ({step.model})" if step.model else name
            detail = ""
            if step.last_metrics.get("val_accuracy"):
                # The last epoch's, as training measured it; the run's summary gives the
                # exported model's, as selection scores it (they can differ a little).
                detail = (f"  last epoch's validation accuracy "
                          f"{float(step.last_metrics['val_accuracy']):.4f}")
            if step.trials:
                detail += f"  {step.trials}"
            if status == "SUCCESS" and step.trials == TUNING_OFF:
                pass  # it handed values on: in the log and the summary, not worth a line here
            elif status == "SUCCESS":
                self.say(f"  {label:<28} {seconds:6.1f} s{detail}")
            else:
                self.say(f"  {label:<28} {status} after {seconds:.1f} s; its last lines:")
                for line in without_tracebacks("\n".join(step.lines)).split("\n"):
                    self.say(f"    {line.strip()}")
                self.say(f"  (all of its output: {self.log_path})")
            self._current = None
            if self._progress is not None:
                self._progress.reset(self._task, total=None, description="", detail="")

    def _read_progress(self, step: _Step, line: str) -> None:
        searching = step.name.startswith("tune")  # its trials' epochs are not the step's
        if match := _TUNING_OFF.search(line):
            step.model, step.trials = match["model"], TUNING_OFF
        elif match := _TRAINING.search(line):
            step.model = step.model or match["model"]
        elif (match := _SEARCH.search(line)) and self._progress is not None:
            self._progress.update(self._task, total=int(match["total"]), completed=0,
                                  description=f"{step.name} ({step.model or 'search'})")
        elif (match := _EPOCH.search(line)) and not searching:
            epoch, epochs = int(match["epoch"]), int(match["epochs"])
            if (match["job"], epoch) in step.epochs_seen:
                return  # the same epoch from another replica
            step.epochs_seen.add((match["job"], epoch))
            step.last_metrics = dict(_METRIC.findall(match["metrics"]))
            if self._progress is not None:
                metrics = step.last_metrics
                detail = " ".join(
                    f"{label} {float(metrics[key]):{spec}}"
                    for key, label, spec in (("accuracy", "acc", ".4f"),
                                             ("val_accuracy", "val", ".4f"),
                                             ("images_per_second", "img/s", ",.0f"))
                    if key in metrics)
                self._progress.update(self._task, total=epochs, completed=epoch,
                                      description=f"{step.name} ({step.model or 'model'})",
                                      detail=detail)
        elif match := _TRIAL.search(line):
            done, total = int(match["done"]), int(match["total"])
            step.trials = f"{done}/{total} trials" + (
                f", best {float(match['best']):.4f}" if match["best"] else "")
            if self._progress is not None:
                self._progress.update(self._task, total=total, completed=done,
                                      description=f"{step.name} ({step.model or 'search'})",
                                      detail=f"best {match['best']}" if match["best"] else "")
