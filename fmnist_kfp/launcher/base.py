"""The training backends' seam: a launcher runs a :class:`TrainingJobSpec` to completion.

``local`` (:mod:`fmnist_kfp.launcher.local_processes`) starts the replicas as processes on this
machine; ``kubernetes`` runs them as a TFJob of the Training Operator v1
(:mod:`fmnist_kfp.launcher.tfjob_launcher`) or a TrainJob of Kubeflow Trainer v2
(:mod:`fmnist_kfp.launcher.trainjob_launcher`), both through :class:`ClusterLauncher`. The step
checks the name with :func:`fmnist_kfp.backends.require_backend` and picks one with a plain
``if``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from fmnist_kfp.errors import TrainingJobError
from fmnist_kfp.kubernetes.runner import RemoteJob, RemoteJobError, RemoteJobRunner
from fmnist_kfp.kubernetes.training_operators import ClusterJob
from fmnist_kfp.kubernetes.trainjob import OVERRIDES
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.training.trainer import read_result
from fmnist_kfp.training.training_job import TrainingJobResult, TrainingJobSpec


class TrainingLauncher(Protocol):
    def run(self, spec: TrainingJobSpec) -> TrainingJobResult:
        """Runs the job to completion; raises ``TrainingJobError`` if it fails. (A cluster
        launcher also takes the job as a :class:`ClusterJob`, checked for its operator.)"""
        ...


@dataclass(frozen=True)
class Watching:
    """How a cluster launcher follows its job, one object for the launchers' keywords of
    these names: the poll interval, the step's deadline (0: the job's own, see
    :meth:`RemoteJobRunner.for_job`), where it prints (``out``, default stdout), the bound on
    each API call, and the runner's ``clock`` and ``sleep`` (tests wait without waiting)."""

    poll_seconds: float = 10.0
    timeout_seconds: float = 0.0
    out: Any = None
    request_timeout_seconds: float = 60.0
    clock: Callable[[], float] | None = None
    sleep: Callable[[float], None] | None = None


class ClusterLauncher:
    """What the two cluster launchers share: their ``settings`` (as
    :func:`~fmnist_kfp.settings.jobs.cluster_settings` validated them), how they follow their
    job (:class:`Watching`: where they print, the one :class:`RemoteJobRunner` that creates,
    watches and cleans up their job, the bound on each API call), and the job checked once
    against their operator (:meth:`checked`)."""

    OPERATOR = ""  # the operator whose jobs the launcher runs: tfjob or trainjob
    shape = OVERRIDES  # a TrainJob's pod settings

    def __init__(self, settings: KubernetesSettings, watching: Watching):
        self.settings = settings
        self.out = watching.out or sys.stdout
        injected = {k: v for k, v in (("clock", watching.clock), ("sleep", watching.sleep))
                    if v is not None}
        self.runner = RemoteJobRunner.for_job(self.settings,
                                              timeout_seconds=watching.timeout_seconds,
                                              poll_seconds=watching.poll_seconds, log=self._say,
                                              **injected)
        self.request_timeout_seconds = watching.request_timeout_seconds

    def checked(self, job: TrainingJobSpec | ClusterJob) -> ClusterJob:
        """``job`` as this launcher's operator runs it: a :class:`ClusterJob` as given (the
        train step checked it before staging anything), else the spec checked now, before
        anything is created."""
        if isinstance(job, ClusterJob):
            return job
        return ClusterJob(job, self.settings, self.OPERATOR, self.shape)

    @property
    def namespace(self) -> str:
        return self.settings.target_namespace

    def _say(self, message: str) -> None:
        print(message, file=self.out, flush=True)

    def _say_new_log_lines(self, core_api, pod, container: str, printed: dict[str, int]
                           ) -> None:
        """Prints the lines of ``pod``'s ``container`` log that ``printed`` (how many of each
        pod's lines were printed, by uid) has not seen; a failed read is skipped."""
        try:
            text = core_api.read_namespaced_pod_log(
                pod.metadata.name, self.namespace, container=container,
                _request_timeout=self.request_timeout_seconds)
        except Exception:  # logs are a courtesy; the job's outcome is what counts
            return
        lines = [line for line in (text or "").splitlines() if line.strip()]
        done = printed.get(pod.metadata.uid, 0)
        for line in lines[done:]:
            self._say(f"[{pod.metadata.name}] {line}")
        printed[pod.metadata.uid] = max(done, len(lines))

    def _run(self, job: RemoteJob, spec: TrainingJobSpec, started: float, restarts
             ) -> TrainingJobResult:
        """Runs ``job`` (started at ``started`` on the runner's clock) to its end: the result
        the chief left in the work dir (on shared storage: a PVC mount or a bucket), or a
        ``TrainingJobError``. ``restarts``: how many restarts the job's watch counted."""
        try:
            self.runner.run(job)
        except RemoteJobError as error:
            raise TrainingJobError(str(error)) from error
        return TrainingJobResult(read_result(spec.work_dir),
                                 round(self.runner.clock() - started, 2), restarts())
