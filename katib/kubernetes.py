"""The Kubernetes backend of the tuning step: the search is a Katib Experiment.

It behaves like the TFJob launcher (google-cloud-pipeline-components' remote-job pattern):

* the Experiment is built and validated before anything is created, and named by the settings,
  so a retried launcher pod re-attaches to the Experiment it created instead of starting a
  second one;
* it waits with the kubeflow-katib SDK, printing a line whenever the progress changes (trials
  succeeded, running, failed and early-stopped, and the best trial so far);
* it fails the step when the Experiment fails, naming Katib's reason and message (the retired
  KFP Katib launcher printed the failed Experiment as its output instead);
* it deletes the Experiment when the run is terminated (SIGTERM) or the step's deadline passes.

What it returns is a :class:`~katib.results.TuningResult`, the same as the local search's: the
best trial's values typed as the trainer's, and every trial with its status and objective.
"""

from __future__ import annotations

import signal
import sys
import time
from dataclasses import asdict

from fmnist.backends import sigterm_as_exit
from fmnist.errors import TuningError
from katib.experiment import build_experiment
from katib.results import TrialRecord, TuningResult, typed_assignments
from katib.search_space import SearchSpace
from katib.settings import API_VERSION, OBJECTIVE_TYPES, TRIAL_NAME_PARAMETER, ExperimentSettings

GROUP, VERSION = API_VERSION.split("/")
EXPERIMENT_PLURAL = "experiments"


def _latest_condition(status):
    """The most recent condition that holds (Katib appends them in order), or None."""
    conditions = (status.conditions if status else None) or []
    return next((c for c in reversed(conditions) if c.status == "True"), None)


def _value(metric, strategy: str) -> float | None:
    """A metric's value by the strategy; None where Katib has none ("unavailable")."""
    try:
        return float(getattr(metric, strategy) or metric.latest)
    except (TypeError, ValueError):
        return None


def _metrics(observation, strategy: str) -> dict[str, float]:
    metrics = (observation.metrics if observation else None) or []
    values = {m.name: _value(m, strategy) for m in metrics}
    return {name: value for name, value in values.items() if value is not None}


def _assignments(assignments) -> dict[str, str]:
    return {a.name: a.value for a in assignments or []}


def _epochs_run(trial_dir: str) -> int:
    """Epochs the trial's chief recorded in its history (0 if it wrote none)."""
    from fmnist.training.trainer import HISTORY_FILE, read_history

    return len(read_history(f"{trial_dir}/{HISTORY_FILE}"))


class KatibExperimentLauncher:
    """Runs a search as a Katib Experiment; see the module docstring."""

    def __init__(self, katib_client=None, poll_seconds: float = 15.0,
                 timeout_seconds: float = 0.0, out=None):
        self._client = katib_client
        self.poll_seconds = poll_seconds
        self.timeout_seconds = timeout_seconds  # 0: wait as long as the Experiment runs
        self.out = out or sys.stdout

    def client(self, namespace: str):
        if self._client is None:
            from kubeflow.katib import KatibClient

            self._client = KatibClient(namespace=namespace)
        return self._client

    def _say(self, message: str) -> None:
        print(message, file=self.out, flush=True)

    def _exists(self, name: str, namespace: str) -> bool:
        # The SDK's get_experiment turns every error into RuntimeError; 404 must be told apart.
        from kubernetes.client.exceptions import ApiException

        try:
            self.client(namespace).custom_api.get_namespaced_custom_object(
                GROUP, VERSION, namespace, EXPERIMENT_PLURAL, name)
            return True
        except ApiException as err:
            if err.status == 404:
                return False
            raise

    def _delete(self, name: str, namespace: str) -> None:
        try:
            self.client(namespace).delete_experiment(name, namespace=namespace)
            self._say(f"deleted Katib Experiment {namespace}/{name}")
        except (RuntimeError, TimeoutError) as err:  # already gone, or the API is unreachable
            self._say(f"could not delete Katib Experiment {namespace}/{name}: {err}")

    def run(self, settings: ExperimentSettings, search_space: SearchSpace,
            data_dir: str) -> TuningResult:
        experiment = build_experiment(settings, search_space, data_dir)  # validates first
        name, namespace = settings.name, settings.target_namespace
        client = self.client(namespace)
        started = time.time()
        if self._exists(name, namespace):
            self._say(f"re-attaching to the existing Katib Experiment {namespace}/{name}")
        else:
            client.create_experiment(experiment, namespace=namespace)
            self._say(f"created Katib Experiment {namespace}/{name} ({settings.algorithm}, "
                      f"{settings.max_trial_count} trials, {settings.parallel_trial_count} at a "
                      f"time, objective {settings.objective_metric})")
        previous = sigterm_as_exit()
        try:
            finished = self._wait(settings, started)
        except BaseException:  # terminated (SIGTERM), timed out, or interrupted
            self._delete(name, namespace)
            raise
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        condition = _latest_condition(finished.status)
        if condition.type == "Failed":
            raise TuningError(f"Katib Experiment {namespace}/{name} failed: {condition.reason}: "
                              f"{condition.message} ({self._progress(settings, finished)})")
        return self._result(settings, finished, time.time() - started)

    def _wait(self, settings: ExperimentSettings, started: float):
        """Polls until the Experiment succeeds or fails; returns it."""
        name, namespace = settings.name, settings.target_namespace
        seen = None
        while True:
            experiment = self.client(namespace).get_experiment(name, namespace=namespace)
            progress = self._progress(settings, experiment)
            if progress != seen:
                seen = progress
                self._say(f"Katib Experiment {namespace}/{name}: {progress}")
            condition = _latest_condition(experiment.status)
            if condition is not None and condition.type in ("Succeeded", "Failed"):
                return experiment
            if self.timeout_seconds and time.time() - started > self.timeout_seconds:
                raise TimeoutError(f"Katib Experiment {namespace}/{name} did not finish in "
                                   f"{self.timeout_seconds:.0f} s")
            time.sleep(self.poll_seconds)

    @staticmethod
    def _progress(settings: ExperimentSettings, experiment) -> str:
        status = experiment.status
        condition = _latest_condition(status)
        spec = experiment.spec
        total = (spec.max_trial_count if spec else None) or settings.max_trial_count
        counts = ", ".join(
            f"{getattr(status, field, None) or 0} {label}" for field, label in (
                ("trials_succeeded", "succeeded"), ("trials_running", "running"),
                ("trials_failed", "failed"), ("trials_early_stopped", "early-stopped"))
        )
        line = f"{condition.type if condition else 'Pending'}: {counts} of {total} trials"
        optimal = status.current_optimal_trial if status else None
        best = _metrics(optimal.observation if optimal else None, settings.metric_strategy)
        if optimal and optimal.best_trial_name and settings.objective_metric in best:
            values = ", ".join(f"{k}={v}" for k, v in
                               _assignments(optimal.parameter_assignments).items()
                               if k != TRIAL_NAME_PARAMETER)
            line += (f"; best {settings.objective_metric}="
                     f"{best[settings.objective_metric]:.4f} in {optimal.best_trial_name} "
                     f"({values})")
        return line

    def _result(self, settings: ExperimentSettings, experiment, seconds: float) -> TuningResult:
        name, namespace = settings.name, settings.target_namespace
        optimal = experiment.status.current_optimal_trial
        best = _metrics(optimal.observation if optimal else None, settings.metric_strategy)
        if not optimal or not optimal.best_trial_name or settings.objective_metric not in best:
            raise TuningError(f"Katib Experiment {namespace}/{name} succeeded without an optimal "
                              f"trial reporting {settings.objective_metric}")
        trials = [self._trial(settings, trial) for trial in
                  self.client(namespace).list_trials(name, namespace=namespace)]
        return TuningResult(
            experiment=name,
            backend="kubernetes",
            algorithm=settings.algorithm,
            objective_metric=settings.objective_metric,
            objective_type=OBJECTIVE_TYPES[settings.objective_metric],
            best_trial=optimal.best_trial_name,
            best_parameters=typed_assignments(_assignments(optimal.parameter_assignments)),
            best_objective=best[settings.objective_metric],
            trials=sorted(trials, key=lambda t: t.name),
            early_stopping=settings.early_stopping is not None,
            seconds=round(seconds, 2),
            base_config=asdict(settings.training_config()),
        )

    @staticmethod
    def _trial(settings: ExperimentSettings, trial) -> TrialRecord:
        name = trial.metadata.name
        status = trial.status
        condition = _latest_condition(status)
        metrics = _metrics(status.observation if status else None, settings.metric_strategy)
        elapsed = 0.0
        if status and status.start_time and status.completion_time:
            elapsed = (status.completion_time - status.start_time).total_seconds()
        return TrialRecord(
            name=name,
            parameters=typed_assignments(
                _assignments(trial.spec.parameter_assignments if trial.spec else None)),
            status=condition.type if condition else "Pending",
            objective=metrics.pop(settings.objective_metric, None),
            metrics=metrics,
            epochs=_epochs_run(f"{settings.trials_root}/{name}"),
            seconds=elapsed,
        )
