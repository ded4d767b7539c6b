"""The local search: a Katib Experiment's search run on this machine with Optuna.

The same :class:`ExperimentSettings` and :class:`SearchSpace` that build the Katib Experiment
drive it, and each trial is a real training run through the local training launcher (worker
processes with the ``TF_CONFIG`` a TFJob would get), so what Katib would do on the cluster is
done here, step for step:

* Katib's suggestion service → an Optuna sampler (Katib itself runs Optuna behind ``grid`` and
  ``multivariate-tpe``; ``tpe`` and ``random`` are the same algorithms hyperopt runs for it);
* Katib's StdOut metrics collector → the same ``METRICS_FILTER`` regex over the trial chief's
  log lines, one report per epoch;
* Katib's ``medianstop`` → :class:`KatibMedianStopPruner`, which stops a trial by ending its
  workers (status ``EarlyStopped``, like Katib's);
* ``parallelTrialCount`` trials at a time (at most one per core), ``maxTrialCount`` in all; the
  search fails once more than ``maxFailedTrialCount`` trials failed, and stops early once the
  objective goal is reached; the metric strategy ``latest`` scores a trial by its last epoch;
* a terminated run (SIGTERM to the step) stops every running trial's workers, starts no other
  trial, and exits, as deleting the Experiment does on Katib.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import re
import signal
import sys
import threading
import time
from dataclasses import asdict, replace
from typing import Any

from fmnist_kfp.backends import sigterm_as_exit
from fmnist_kfp.errors import TrainingJobError, TrainingJobStopped, TuningError, UserInputError
from fmnist_kfp.katib.parameter_budget import over_budget, trial_parameter_count
from fmnist_kfp.katib.results import (
    EARLY_STOPPED,
    FAILED,
    METRICS_UNAVAILABLE,
    OVER_PARAMETER_BUDGET,
    SUCCEEDED,
    TrialRecord,
    TuningResult,
)
from fmnist_kfp.launcher.local_processes import LocalProcessLauncher
from fmnist_kfp.training.training_job import TrainingJobSpec
from fmnist_kfp.tuning.experiment_settings import (
    METRICS_FILTER,
    OBJECTIVE_TYPES,
    ExperimentSettings,
)
from fmnist_kfp.tuning.search_space import SearchSpace

# Katib algorithms whose method Optuna implements; the others (bayesianoptimization on
# scikit-optimize, cmaes on Goptuna) run on the cluster only.
LOCAL_ALGORITHMS = ("random", "grid", "tpe", "multivariate-tpe")
# hyperopt's TPE settings that Optuna has deprecated: Optuna's own defaults apply locally.
_KATIB_ONLY_SETTINGS = ("gamma", "prior_weight")
_METRIC = re.compile(METRICS_FILTER)
# Go's time.RFC3339Nano as time.Parse accepts it (fractional seconds optional): how Katib's
# collector recognises a line's leading timestamp (file-metricscollector.go lines 89-97).
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")


def without_timestamp(line: str) -> str:
    """The line after its leading RFC 3339 timestamp, if it has one."""
    first, _, rest = line.partition(" ")
    return rest if _RFC3339.fullmatch(first) else line
# What counts against maxFailedTrialCount: a trial that broke, or one that reported nothing.
FAILED_STATES = (FAILED, METRICS_UNAVAILABLE)


def local_problems(settings: ExperimentSettings, search_space: SearchSpace) -> list[str]:
    """Everything wrong with running this search locally, each with the fix."""
    problems = settings.search_problems(search_space)
    if settings.algorithm not in LOCAL_ALGORITHMS and not any(
            "unknown algorithm" in p for p in problems):
        problems.append(f"algorithm {settings.algorithm} runs on Katib only (backend "
                        f"kubernetes); locally choose one of {', '.join(LOCAL_ALGORITHMS)}")
    for p in search_space.parameters:
        if p.distribution in ("normal", "logNormal"):
            problems.append(f"{p.name}: the {p.distribution} distribution runs on Katib only; "
                            "locally use uniform or logUniform")
    if settings.gpus_per_worker:
        problems.append("the local search trains on CPUs: set gpus_per_worker to 0")
    return problems


def distributions(search_space: SearchSpace) -> dict[str, Any]:
    """The search space as Optuna distributions (Katib's bounds are inclusive, as Optuna's)."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    result: dict[str, Any] = {}
    for p in search_space.parameters:
        log = p.distribution == "logUniform"
        if p.type == "categorical":
            result[p.name] = CategoricalDistribution(list(p.values))
        elif p.type == "int":
            low, high = p.bounds()
            result[p.name] = IntDistribution(int(low), int(high), log=log,
                                             step=int(p.step or 1))
        else:
            low, high = p.bounds()
            result[p.name] = FloatDistribution(float(low), float(high), log=log,
                                               step=None if log else p.step)
    return result


def grid_points(search_space: SearchSpace) -> list[dict[str, Any]]:
    """Every combination Katib's grid tries, in order."""
    values = {p.name: p.grid_points() for p in search_space.parameters}
    return [dict(zip(values, combination, strict=True))
            for combination in itertools.product(*values.values())]


def make_sampler(settings: ExperimentSettings):
    """The Optuna sampler doing what ``settings.algorithm``'s Katib suggestion service does."""
    import optuna

    options = settings.algorithm_settings
    seed = int(options["random_state"]) if "random_state" in options else None
    algorithm = settings.algorithm
    if algorithm in ("random", "grid"):  # grid points are queued (see LocalTuner.run)
        return optuna.samplers.RandomSampler(seed=seed)
    # A third of the budget explores at random before the model takes over (Optuna's default
    # of 10 would leave a small budget all random); never fewer than one parallel round.
    startup = max(settings.parallel_trial_count, min(10, settings.max_trial_count // 3))
    common: dict[str, Any] = {
        "seed": seed,
        # Trials still running count as scored at their worst so parallel asks spread out.
        "constant_liar": settings.parallel_trial_count > 1,
    }
    if algorithm == "tpe":  # univariate, as hyperopt's TPE behind Katib's tpe
        return optuna.samplers.TPESampler(
            multivariate=False, n_startup_trials=startup,
            n_ei_candidates=int(options.get("n_EI_candidates", 24)), **common,
        )
    return optuna.samplers.TPESampler(  # multivariate-tpe, as Katib's Optuna service runs it
        multivariate=True,
        n_startup_trials=int(options.get("n_startup_trials", startup)),
        n_ei_candidates=int(options.get("n_ei_candidates", 24)),
        **common,
    )


def make_pruner(settings: ExperimentSettings):
    import optuna

    from fmnist_kfp.katib.median_stop import KatibMedianStopPruner

    stopping = settings.early_stopping
    if stopping is None:
        return optuna.pruners.NopPruner()
    return KatibMedianStopPruner(stopping.min_trials_required, stopping.start_step)


class _EpochCollector:
    """Katib's StdOut collector for one local trial: parses the chief's epoch lines with the
    same filter, reports the objective to Optuna, and stops the trial when the pruner says."""

    def __init__(self, trial, settings: ExperimentSettings):
        self.trial = trial
        self.objective = settings.objective_metric
        self.chief = ("chief-0" if settings.use_chief or settings.strategy == "parameter_server"
                      else "worker-0")
        self.launcher: LocalProcessLauncher | None = None  # the trial's, set once it exists
        self.reports: list[dict[str, float]] = []

    def on_line(self, worker: str, line: str) -> None:
        line = without_timestamp(line)
        if worker != self.chief or not line.startswith("epoch="):
            return
        metrics = {m.group(1): float(m.group(2)) for m in _METRIC.finditer(line)
                   if m.group(2) not in ("", "+", "-")}
        if self.objective not in metrics:
            return
        self.reports.append(metrics)
        step = len(self.reports)
        self.trial.report(metrics[self.objective], step)
        if self.trial.should_prune():
            assert self.launcher is not None, "the trial's lines come from its launcher"
            self.launcher.stop(
                f"early stopped by medianstop after {step} epochs "
                f"({self.objective}={metrics[self.objective]:.4f})")


class LocalTuner:
    """Runs an experiment's search on this machine; see the module docstring."""

    def __init__(self, work_dir: str, cpu_count: int | None = None, out=None):
        self.work_dir = work_dir
        self.cpu_count = cpu_count or len(os.sched_getaffinity(0))
        self.out = out or sys.stdout
        self._launchers: dict[int, LocalProcessLauncher] = {}
        self._lock = threading.Lock()
        self._terminated = ""  # why the search was ended; no trial starts after it

    def _say(self, message: str) -> None:
        print(message, file=self.out, flush=True)

    def run(self, settings: ExperimentSettings, search_space: SearchSpace,
            data_dir: str) -> TuningResult:
        problems = local_problems(settings, search_space)
        if problems:
            raise UserInputError("invalid hyperparameter search: " + "; ".join(problems))
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)  # progress is ours, below
        parallel = min(settings.parallel_trial_count, self.cpu_count)
        ignored = [k for k in _KATIB_ONLY_SETTINGS if k in settings.algorithm_settings]
        if ignored:
            self._say(f"[{settings.name}] {', '.join(ignored)} apply on Katib only; Optuna's "
                      "defaults are used here")
        if parallel < settings.parallel_trial_count:
            self._say(f"[{settings.name}] {parallel} trials at a time: one per core")
        direction = OBJECTIVE_TYPES[settings.objective_metric]
        study = optuna.create_study(direction=direction,
                                    sampler=make_sampler(settings),
                                    pruner=make_pruner(settings))
        space = distributions(search_space)
        if settings.algorithm == "grid":
            # Queued trials rather than Optuna's GridSampler, which ends the study from
            # inside tell() and so works only under study.optimize().
            for point in grid_points(search_space):
                study.enqueue_trial(point)
        threads = max(1, self.cpu_count // parallel)
        started = time.time()
        records: list[TrialRecord] = []
        self._say(f"[{settings.name}] {settings.algorithm} search of {search_space.names}: "
                  f"{settings.max_trial_count} trials, {parallel} at a time, objective "
                  f"{direction} {settings.objective_metric}"
                  + (", median stopping" if settings.early_stopping else ""))
        previous = sigterm_as_exit()
        pool = concurrent.futures.ThreadPoolExecutor(parallel, thread_name_prefix="trial")
        running: dict[concurrent.futures.Future, Any] = {}
        try:
            asked, stop_reason = 0, ""
            while True:
                while not stop_reason and asked < settings.max_trial_count \
                        and len(running) < parallel:
                    trial = study.ask(space)
                    asked += 1
                    future = pool.submit(self._run_trial, trial, settings, data_dir, threads)
                    running[future] = trial
                if not running:
                    break
                done, _ = concurrent.futures.wait(
                    running, return_when=concurrent.futures.FIRST_COMPLETED)
                for future in done:
                    trial = running.pop(future)
                    record = future.result()
                    records.append(record)
                    self._tell(study, trial, record)
                    stop_reason = stop_reason or self._verdict(settings, records)
                    self._progress(settings, records, len(running))
        except BaseException:
            if previous is not None:
                # Stopping now: a second SIGTERM must not cut the cleanup short.
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            stopped = self._stop_running("the search was terminated")
            pool.shutdown(wait=True, cancel_futures=True)  # each trial's workers are gone
            self._say(f"[{settings.name}] terminated: stopped {stopped} running trial(s)")
            raise
        finally:
            pool.shutdown(wait=True)
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        failed = [r for r in records if r.status in FAILED_STATES]
        if len(failed) > settings.max_failed_trial_count:
            last = failed[-1]
            raise TuningError(
                f"search {settings.name} failed: {len(failed)} trials failed, more than "
                f"max_failed_trial_count={settings.max_failed_trial_count}. The last one, "
                f"{last.name}: {last.metrics.get('error', last.status)}")
        return self._result(settings, search_space, records, time.time() - started)

    def _run_trial(self, trial, settings: ExperimentSettings, data_dir: str,
                   threads: int) -> TrialRecord:
        name = f"{settings.name}-{trial.number:03d}"
        parameters = dict(trial.params)
        count = trial_parameter_count(settings, parameters)
        if over_budget(settings, count):  # pruned before any trainer starts
            why = f"{count:,} parameters, over max_parameters={settings.max_parameters:,}"
            return TrialRecord(name=name, parameters=parameters, status=OVER_PARAMETER_BUDGET,
                               metrics={"error": why},
                               parameter_count=count)
        work_dir = os.path.join(self.work_dir, name)
        spec = TrainingJobSpec(
            name=name, config=replace(settings.training_config(), **parameters),
            data_dir=data_dir, export_dir=os.path.join(work_dir, "1"), work_dir=work_dir,
            num_workers=settings.num_workers, use_chief=settings.use_chief, max_restarts=1,
            strategy=settings.strategy, num_ps=settings.num_ps,
        )
        collector = _EpochCollector(trial, settings)
        launcher = LocalProcessLauncher(out=self.out, cpu_count=threads,
                                        on_line=collector.on_line)
        collector.launcher = launcher
        with self._lock:
            self._launchers[trial.number] = launcher
            if self._terminated:  # the search ended while this trial was being set up
                launcher.stop(self._terminated)
        started = time.time()
        status, error = SUCCEEDED, ""
        try:
            launcher.run(spec)
        except TrainingJobStopped as stopped:
            status, error = EARLY_STOPPED, str(stopped)
        except TrainingJobError as failure:
            status, error = FAILED, str(failure).splitlines()[0]
        finally:
            with self._lock:
                self._launchers.pop(trial.number, None)
        reports = collector.reports
        if status == SUCCEEDED and not reports:
            status, error = METRICS_UNAVAILABLE, "no epoch reported the objective metric"
        last = reports[-1] if reports else {}
        objective = last.get(settings.objective_metric)
        metrics: dict[str, float | str] = {k: v for k, v in last.items()
                                           if k in settings.additional_metrics}
        if error:
            metrics["error"] = error
        return TrialRecord(name=name, parameters=parameters, status=status,
                           objective=objective, metrics=metrics, epochs=len(reports),
                           seconds=round(time.time() - started, 1), parameter_count=count)

    @staticmethod
    def _tell(study, trial, record: TrialRecord) -> None:
        from optuna.trial import TrialState

        if record.status == SUCCEEDED:
            study.tell(trial, record.objective)
        elif record.status in (EARLY_STOPPED, OVER_PARAMETER_BUDGET):
            # Optuna's TPE ranks a pruned trial below every completed one: the search learns
            # the region is worse (a failed trial it would ignore).
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, state=TrialState.FAIL)

    @staticmethod
    def _verdict(settings: ExperimentSettings, records: list[TrialRecord]) -> str:
        """Why no further trial should start, or ""."""
        failed = sum(1 for r in records if r.status in FAILED_STATES)
        if failed > settings.max_failed_trial_count:
            return "too many failed trials"
        goal = settings.objective_goal
        if goal is not None:
            maximize = OBJECTIVE_TYPES[settings.objective_metric] == "maximize"
            for r in records:
                if r.status == SUCCEEDED and r.objective is not None and (
                        r.objective >= goal if maximize else r.objective <= goal):
                    return "the objective goal is reached"
        return ""

    def _stop_running(self, reason: str) -> int:
        """Ends every running trial (their launchers kill their workers) and any trial still
        being set up; returns how many were running."""
        with self._lock:
            self._terminated = reason
            launchers = list(self._launchers.values())
        for launcher in launchers:
            launcher.stop(reason)
        return len(launchers)

    def _progress(self, settings: ExperimentSettings, records: list[TrialRecord],
                  running: int) -> None:
        record = records[-1]
        counts = {s: sum(1 for r in records if r.status == s)
                  for s in (SUCCEEDED, EARLY_STOPPED, FAILED, METRICS_UNAVAILABLE,
                            OVER_PARAMETER_BUDGET)}
        best = _best(settings, records)
        objective = "" if record.objective is None else \
            f" {settings.objective_metric}={record.objective:.4f}"
        self._say(
            f"[{settings.name}] trial {record.name}: {record.status}{objective} after "
            f"{record.epochs} epochs, {_describe(record.parameters)} | "
            f"{len(records)}/{settings.max_trial_count} done ("
            + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
            + f"), {running} running"
            + (f" | best {best.objective:.4f} ({best.name})" if best else "")
        )

    def _result(self, settings: ExperimentSettings, search_space: SearchSpace,
                records: list[TrialRecord], seconds: float) -> TuningResult:
        best = _best(settings, records)
        if best is None:
            over = sum(1 for r in records if r.status == OVER_PARAMETER_BUDGET)
            raise TuningError(
                f"search {settings.name}: no trial reported {settings.objective_metric}"
                + (f" ({over} of {len(records)} were over tuning.max_parameters="
                   f"{settings.max_parameters:,}: raise it, or search smaller models)"
                   if over else "; see the trials' logs above"))
        assert best.objective is not None, "_best chooses among trials with an objective"
        return TuningResult(
            experiment=settings.name, backend="local", algorithm=settings.algorithm,
            objective_metric=settings.objective_metric,
            objective_type=OBJECTIVE_TYPES[settings.objective_metric],
            best_trial=best.name,
            best_parameters={k: best.parameters[k] for k in search_space.names},
            best_objective=float(best.objective), trials=records,
            early_stopping=settings.early_stopping is not None, seconds=round(seconds, 1),
            base_config=asdict(settings.training_config()),
        )


def _best(settings: ExperimentSettings, records: list[TrialRecord]) -> TrialRecord | None:
    """Katib's optimal trial: the best objective among trials that reported one (succeeded
    or stopped early)."""
    scored = [(r.objective, r) for r in records if r.objective is not None
              and r.status in (SUCCEEDED, EARLY_STOPPED)]
    if not scored:
        return None
    sign = 1 if OBJECTIVE_TYPES[settings.objective_metric] == "maximize" else -1
    return max(scored, key=lambda scored_record: sign * scored_record[0])[1]


def _describe(parameters: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in parameters.items())
