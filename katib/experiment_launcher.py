"""The Kubernetes backend of the tuning step: the search is a Katib Experiment, run by the
remote-job runner (:mod:`fmnist_kfp.kubernetes.runner`), like the training step's TFJob:

* the Experiment is built and validated before anything is created, and named by the settings,
  so a retried launcher pod re-attaches to the Experiment it created (HTTP 409 on create)
  instead of starting a second one; the SIGTERM guard is in place before the create call;
* it waits, reading the Experiment through :class:`KatibApi` (Katib's own models over the
  Kubernetes client), printing a line whenever the progress changes (trials succeeded,
  running, failed and early-stopped, and the best trial so far); transient API errors (5xx,
  429, timeouts, dropped connections) are retried, never taken for a failure;
* it fails the step when the Experiment fails, naming Katib's reason and message (the retired
  KFP Katib launcher printed the failed Experiment as its output instead), and deletes it so
  that a retried step starts a fresh search instead of re-attaching to the failed one;
* it deletes the Experiment when the run is terminated (SIGTERM) or the step's deadline passes;
* it reports trials that never progress (:mod:`fmnist_kfp.katib.stalls`): a trial Katib lists as
  pending or running for ``stall_seconds`` is examined through its TFJob, and a line names it and
  the likely cause, above all a katib-controller that is not watching TFJobs because Training
  Operator v1 was installed after it (then trials stay Running for hours); when the deadline
  passes, the failure names those trials;
* a 401, 403 or 410 reading the Experiment or listing its trials leaves the Experiment running
  for a retried step to re-attach to (the runner's
  :class:`~fmnist_kfp.kubernetes.runner.ReadRefused`);
* the trials' job is a TFJob or a TrainJob, as the train step decides it from
  ``kubernetes.operator`` and what the API server serves
  (:func:`fmnist_kfp.kubernetes.training_operators.choose_operator`), printed; TrainJob trials
  are not examined for stalls (the stall rules read a TFJob's conditions).

Katib's conditions are cumulative, one per type, a re-set type moving to the end: the outcome
is read from ``Failed=True`` then ``Succeeded=True``, not from the order.

What it returns is a :class:`~fmnist_kfp.katib.results.TuningResult`, the same as the local
search's: the best trial's values typed as the trainer's, and every trial with its status and
objective.

upstream: docs/upstream.md#katib
"""

from __future__ import annotations

import sys
from dataclasses import asdict

from fmnist_kfp.errors import TuningError
from fmnist_kfp.katib.parameter_budget import over_budget, trial_parameter_count
from fmnist_kfp.katib.results import (
    EARLY_STOPPED,
    FAILED,
    KILLED,
    METRICS_UNAVAILABLE,
    OVER_PARAMETER_BUDGET,
    SUCCEEDED,
    TrialRecord,
    TuningResult,
    typed_assignments,
)
from fmnist_kfp.katib.stalls import STALL_SECONDS, StallWatch
from fmnist_kfp.kubernetes.api_errors import is_transient
from fmnist_kfp.kubernetes.experiment import (
    build_checked_experiment,
    check_experiment,
    trial_pod_settings,
)
from fmnist_kfp.kubernetes.manifest import to_manifest
from fmnist_kfp.kubernetes.runner import FAILED as FAILED_JOB
from fmnist_kfp.kubernetes.runner import (
    DeadlineExceeded,
    JobStatus,
    RemoteJob,
    RemoteJobError,
    RemoteJobRunner,
)
from fmnist_kfp.kubernetes.trainjob import OVERRIDES
from fmnist_kfp.tuning.experiment_settings import (
    API_VERSION,
    OBJECTIVE_TYPES,
    TRIAL_NAME_PARAMETER,
    ExperimentSettings,
)
from fmnist_kfp.tuning.search_space import SearchSpace

GROUP, VERSION = API_VERSION.split("/")
EXPERIMENT_PLURAL = "experiments"
TRIAL_PLURAL = "trials"
# The label Katib gives each Trial of an Experiment, and lists them by (kubeflow/katib v0.19.0
# pkg/controller.v1beta1/util/labels.go lines 40-47, consts/const.go line 67,
# experiment/experiment_controller.go lines 264-267; the SDK's constants.py line 38).
EXPERIMENT_LABEL = "katib.kubeflow.org/experiment"
# A trial's job: a TFJob named after the trial (pkg/controller.v1beta1/experiment/manifest/
# generator.go lines 102-104), of Training Operator v1's kubeflow.org/v1.
TFJOB_GROUP, TFJOB_VERSION, TFJOB_PLURAL = "kubeflow.org", "v1", "tfjobs"


class KatibApi:
    """The four Katib calls the launcher makes, and a read of a trial's TFJob, on the
    Kubernetes client's ``CustomObjectsApi``, answering Katib's own models
    (``kubeflow_katib_api``: pydantic, generated from Katib's OpenAPI spec, kubeflow/katib
    v0.19.0 api/python_api/).

    They are the requests kubeflow-katib 0.19.0's ``KatibClient`` sends (sdk/python/v1beta1/
    kubeflow/katib/api/katib_client.py: create_experiment lines 136-157, get_experiment
    742-758, list_trials 1410-1431, delete_experiment 1223-1237). The errors are the Kubernetes
    client's own (``ApiException``; urllib3's timeouts and connection errors), which the runner
    classifies (:mod:`fmnist_kfp.kubernetes.runner`). KatibClient wrapped them in a ``RuntimeError``
    with the original as its context, which the runner looked through, so the same errors are
    transient and the messages name the same HTTP status; only a read's timeout now reads as
    urllib3's ``ReadTimeoutError`` instead of ``TimeoutError("Timeout to get ...")``. As in
    KatibClient, the reads take a timeout and create and delete take none.

    A read that a model refuses raises pydantic's ``ValidationError``, which the runner takes
    for a permanent error (KatibClient's deserializer failing was the same)."""

    def __init__(self, api_client=None):
        from kubernetes import client

        from fmnist_kfp.kubernetes.runner import load_cluster_config

        if api_client is None:  # in a step's pod, its ServiceAccount; else the kube-config
            load_cluster_config()
        self.api = client.CustomObjectsApi(api_client)

    def create_experiment(self, experiment, namespace: str) -> None:
        """Creates ``experiment`` (a ``V1beta1Experiment``); the reply is not parsed, so that
        nothing but the API server's answer decides whether it was created."""
        self.api.create_namespaced_custom_object(GROUP, VERSION, namespace, EXPERIMENT_PLURAL,
                                                 to_manifest(experiment))

    def get_experiment(self, name: str, namespace: str, timeout: float):
        """The ``V1beta1Experiment`` called ``name``."""
        from kubeflow_katib_api.models import V1beta1Experiment

        found = self.api.get_namespaced_custom_object(GROUP, VERSION, namespace,
                                                      EXPERIMENT_PLURAL, name,
                                                      _request_timeout=timeout)
        return V1beta1Experiment.from_dict(found)

    def list_trials(self, experiment_name: str, namespace: str, timeout: float) -> list:
        """The experiment's ``V1beta1Trial`` objects, selected by Katib's label."""
        from kubeflow_katib_api.models import V1beta1TrialList

        found = self.api.list_namespaced_custom_object(
            GROUP, VERSION, namespace, TRIAL_PLURAL,
            label_selector=f"{EXPERIMENT_LABEL}={experiment_name}", _request_timeout=timeout)
        return V1beta1TrialList.from_dict(found).items

    def delete_experiment(self, name: str, namespace: str) -> None:
        self.api.delete_namespaced_custom_object(GROUP, VERSION, namespace, EXPERIMENT_PLURAL,
                                                 name)

    def training_operator(self, setting: str, timeout: float) -> tuple[str, str]:
        """``(operator, shape)`` for the trials: ``tfjob`` or ``trainjob`` for the
        ``kubernetes.operator`` ``setting`` on this cluster, and a TrainJob's pod-settings shape
        (the train step's rule: :func:`~fmnist_kfp.kubernetes.training_operators.
        choose_operator`, :func:`~fmnist_kfp.kubernetes.training_operators.trainjob_api`)."""
        from fmnist_kfp.kubernetes.training_operators import (
            ClusterDiscovery,
            choose_operator,
            trainjob_api,
        )

        discovery = ClusterDiscovery(self.api.api_client, request_timeout=timeout)
        operator = choose_operator(setting, discovery)
        return operator, trainjob_api(discovery) if operator == "trainjob" else OVERRIDES

    def get_tfjob(self, name: str, namespace: str, timeout: float) -> dict | None:
        """The TFJob called ``name`` as stored (a dict: only its status is read), None when the
        API server answers 404 (no such TFJob, or no TFJob CRD). Other errors raise."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self.api.get_namespaced_custom_object(TFJOB_GROUP, TFJOB_VERSION, namespace,
                                                         TFJOB_PLURAL, name,
                                                         _request_timeout=timeout)
        except ApiException as error:
            if error.status == 404:
                return None
            raise


# A trial's outcome, most decisive first; then whether it is under way.
_TRIAL_STATES = (FAILED, METRICS_UNAVAILABLE, EARLY_STOPPED, KILLED, SUCCEEDED, "Running",
                 "Created")


def _holds(status, kind: str):
    """The condition of type ``kind`` if it is True, else None."""
    conditions = (status.conditions if status else None) or []
    return next((c for c in conditions if c.type == kind and c.status == "True"), None)


def _state(status, kinds: tuple[str, ...]) -> str:
    """The first of ``kinds`` whose condition holds, else ``Pending``."""
    return next((kind for kind in kinds if _holds(status, kind) is not None), "Pending")


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
    from fmnist_kfp.training.trainer import HISTORY_FILE, read_history

    return len(read_history(f"{trial_dir}/{HISTORY_FILE}"))


class KatibExperimentLauncher:
    """Runs a search as a Katib Experiment; see the module docstring."""

    def __init__(self, katib_client: KatibApi | None = None, poll_seconds: float = 15.0,
                 timeout_seconds: float = 0.0, out=None, request_timeout_seconds: float = 60.0,
                 clock=None, sleep=None, stall_seconds: float = STALL_SECONDS):
        self._client = katib_client
        # The trials' job, tfjob or trainjob (with a TrainJob's shape): asked of the cluster
        # when the Experiment is made (experiment()).
        self.operator, self.shape = "", OVERRIDES
        self.stall_seconds = stall_seconds
        self.out = out or sys.stdout
        # timeout 0: wait as long as the Experiment runs
        injected = {k: v for k, v in (("clock", clock), ("sleep", sleep)) if v is not None}
        self.runner = RemoteJobRunner(poll_seconds=poll_seconds, timeout_seconds=timeout_seconds,
                                      log=self._say, **injected)
        self.request_timeout_seconds = request_timeout_seconds

    def client(self) -> KatibApi:
        if self._client is None:
            self._client = KatibApi()
        return self._client

    def _say(self, message: str) -> None:
        print(message, file=self.out, flush=True)

    def _training_operator(self, settings: ExperimentSettings) -> tuple[str, str]:
        """The trials' operator and TrainJob shape, asked of the cluster (its transient errors
        retried, as the runner retries reads), and printed."""
        setting = trial_pod_settings(settings).operator
        pause, most = self.runner.retry_seconds
        while True:
            try:
                operator, shape = self.client().training_operator(
                    setting, self.request_timeout_seconds)
                break
            except Exception as error:
                if not is_transient(error) or pause > most:
                    raise
                self._say(f"asking which training operator the cluster serves: {error}; "
                          f"retrying in {pause:.0f}s")
                self.runner.sleep(pause)
                pause *= 2
        if operator == "trainjob":  # TFJob trials, as ever: nothing new to say
            self._say(f"trials run as TrainJobs (Kubeflow Trainer v2, pod settings as {shape}); "
                      f"kubernetes.operator is {setting}")
        return operator, shape

    def experiment(self, settings: ExperimentSettings, search_space: SearchSpace,
                   data_dir: str):
        """The Experiment this launcher would create, each rule checked once: the Experiment's
        own before any call to the cluster, then, the trials' operator asked (and kept for
        :meth:`run`), what that operator cannot do of the trials' job."""
        check_experiment(settings, search_space, data_dir)
        self.operator, self.shape = self._training_operator(settings)
        return build_checked_experiment(settings, search_space, data_dir, self.operator,
                                        self.shape)

    def run(self, settings: ExperimentSettings, search_space: SearchSpace,
            data_dir: str, experiment=None) -> TuningResult:
        """Runs the search to its end; ``experiment``: what :meth:`experiment` made for the
        same arguments (the tuning step's, checked before it staged the dataset), else made
        here."""
        if experiment is None:
            experiment = self.experiment(settings, search_space, data_dir)
        operator = self.operator
        name, namespace = settings.name, settings.target_namespace
        client = self.client()
        timeout = self.request_timeout_seconds
        started = self.runner.clock()
        # The stall rules read a trial's TFJob (fmnist_kfp.katib.stalls): TrainJob trials are
        # not examined.
        stalls = StallWatch(namespace, clock=self.runner.clock, say=self._say,
                            read_tfjob=lambda trial: client.get_tfjob(trial, namespace=namespace,
                                                                      timeout=timeout),
                            stall_seconds=self.stall_seconds if operator == "tfjob"
                            else float("inf"))

        def read():
            """The Experiment, and its trials once it has finished (so that a transient error
            listing them is retried like any other read)."""
            current = client.get_experiment(name, namespace=namespace, timeout=timeout)
            trials = None
            if _holds(current.status, SUCCEEDED) is not None:
                trials = client.list_trials(name, namespace=namespace, timeout=timeout)
            return current, trials

        def status(snapshot) -> JobStatus:
            current, _ = snapshot
            progress = self._progress(settings, current)
            failed = _holds(current.status, FAILED)
            if failed is not None:
                return JobStatus(done=True, failed=True, progress=progress,
                                 reason=f"{failed.reason}: {failed.message} ({progress})")
            done = _holds(current.status, SUCCEEDED) is not None
            if not done:
                stalls.update(current.status)
            return JobStatus(done=done, progress=progress)

        def cleanup(why: str) -> None:
            if why == FAILED_JOB:
                self._say(f"deleting the failed Katib Experiment {namespace}/{name} so that a "
                          "retry of this step starts a fresh search")
            client.delete_experiment(name, namespace=namespace)
            self._say(f"deleted Katib Experiment {namespace}/{name}")

        job = RemoteJob(
            kind="Katib Experiment", namespace=namespace, name=name,
            create=lambda: client.create_experiment(experiment, namespace=namespace),
            read=read, status=status, cleanup=cleanup,
            describe_created=f"{settings.algorithm}, {settings.max_trial_count} trials, "
                             f"{settings.parallel_trial_count} at a time, objective "
                             f"{settings.objective_metric}")
        try:
            finished, trials = self.runner.run(job)
        except RemoteJobError as error:
            raise TuningError(str(error)) from error
        except DeadlineExceeded as error:
            stuck = stalls.summary()
            if not stuck:
                raise
            raise DeadlineExceeded(f"{error}; {stuck}") from error
        return self._result(settings, finished, trials, self.runner.clock() - started)

    @staticmethod
    def _progress(settings: ExperimentSettings, experiment) -> str:
        status = experiment.status
        spec = experiment.spec
        total = (spec.max_trial_count if spec else None) or settings.max_trial_count
        counts = ", ".join(
            f"{getattr(status, field, None) or 0} {label}" for field, label in (
                ("trials_succeeded", "succeeded"), ("trials_running", "running"),
                ("trials_failed", "failed"), ("trials_early_stopped", "early-stopped"))
        )
        state = _state(status, ("Failed", "Succeeded", "Restarting", "Running", "Created"))
        line = f"{state}: {counts} of {total} trials"
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

    def _result(self, settings: ExperimentSettings, experiment, trials,
                seconds: float) -> TuningResult:
        name, namespace = settings.name, settings.target_namespace
        optimal = experiment.status.current_optimal_trial
        best = _metrics(optimal.observation if optimal else None, settings.metric_strategy)
        if not optimal or not optimal.best_trial_name or settings.objective_metric not in best:
            raise TuningError(f"Katib Experiment {namespace}/{name} succeeded without an optimal "
                              f"trial reporting {settings.objective_metric}")
        trials = [self._trial(settings, trial) for trial in trials or []]
        if any(t.name == optimal.best_trial_name and t.status == OVER_PARAMETER_BUDGET
               for t in trials):
            raise TuningError(
                f"Katib Experiment {namespace}/{name}: every trial was over tuning."
                f"max_parameters={settings.max_parameters:,} (none trained): raise it, or "
                "search smaller models")
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
        metrics = _metrics(status.observation if status else None, settings.metric_strategy)
        elapsed = 0.0
        if status and status.start_time and status.completion_time:
            elapsed = (status.completion_time - status.start_time).total_seconds()
        parameters = typed_assignments(
            _assignments(trial.spec.parameter_assignments if trial.spec else None))
        count = trial_parameter_count(settings, parameters)
        state = _state(status, _TRIAL_STATES)
        objective = metrics.pop(settings.objective_metric, None)
        if over_budget(settings, count) and state == SUCCEEDED:
            # Its trainer refused it and reported 0 for Katib's suggestions to learn from;
            # it was never trained, so it has no objective of its own.
            state, objective = OVER_PARAMETER_BUDGET, None
        return TrialRecord(
            name=name,
            parameters=parameters,
            status=state,
            objective=objective,
            metrics=dict(metrics),  # a record's may hold an error too
            epochs=_epochs_run(f"{settings.trials_root}/{name}"),
            seconds=elapsed,
            parameter_count=count,
        )
