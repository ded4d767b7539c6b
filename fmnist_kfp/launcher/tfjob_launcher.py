"""The Kubernetes backend: each training job is a Kubeflow TFJob, run by the remote-job runner
(:mod:`fmnist_kfp.kubernetes.runner`: create or re-attach by the job's stable name, SIGTERM guard
before the create call, transient API errors retried, cleanup on SIGTERM, deadline or failure).

What is particular to TFJobs:

* **Terminal state.** TFJob conditions are cumulative, one per type, and once ``Failed=True``
  is set the list is frozen; a job can even carry ``Succeeded=True`` *and* ``Failed=True``.
  So ``Failed=True``
  anywhere fails the step, then ``Succeeded=True`` ends it; the *last* condition is only what
  ``kubectl`` shows as the state, printed as progress.
* **One restart budget.** ``max_restarts`` bounds restarts here as it does on the local
  backend. The operator does not: under ``restartPolicy: ExitCode`` it recreates a pod that
  exited with a code >= 128 without limit, because ``runPolicy.backoffLimit`` only counts
  container restarts of running pods (kubeflow/trainer#2045). The launcher
  counts restarts itself — each ``Restarting`` transition of the job, each replica pod
  recreated under a new UID, each container restart — and fails the job (and deletes it) once
  they exceed ``max_restarts``. ``backoffLimit`` is set to match (:func:`backoff_limit`).
* **Preemption is no restart.** When Kueue evicts a job (preempted, or ``waitForPodsReady``'s
  timeout, on by default since Kueue 0.19) it suspends the TFJob again; the operator deletes
  every pod and, once Kueue re-admits it, creates them all anew under new UIDs. Each
  admission is a *generation* of replicas, bounded by the changes of the TFJob's ``Suspended``
  condition (the operator sets it as it suspends and resumes a job, kubeflow/trainer v1.9.2
  pkg/controller.v1/common/job.go lines 146-173); only pods recreated within one generation
  are restarts (:class:`RestartCount`). The time suspended counts against
  ``scheduling.start_deadline_minutes`` again.
* **Logs.** The master pod's (``training.kubeflow.org/job-role=master``: the Chief, else Worker
  0) new log lines are printed on each poll, across pod restarts; a log read that fails is
  skipped, never waited on (the SDK's ``get_job_logs(follow=True)`` hangs forever when its
  stream breaks).
* **Held back.** A pod the scheduler cannot place, or whose image cannot be pulled, is named in
  the progress with the scheduler's or the kubelet's reason (:mod:`fmnist_kfp.kubernetes.pods`):
  the operator calls such a job Running.
* **A failed job is deleted** after its reason is reported, so a retried step creates a fresh
  TFJob instead of re-attaching to the failure.
* **Queued.** A TFJob that Kueue holds (``runPolicy.suspend`` true: Kueue's webhook suspends
  every job of a LocalQueue until its ClusterQueue admits it) is shown as ``queued: <reason>``,
  the reason read from its Workload (:mod:`fmnist_kfp.kubernetes.workload`); the wait counts against
  ``scheduling.start_deadline_minutes``, not against the job's run time.

upstream: docs/upstream.md#training-operator
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from fmnist_kfp.kubernetes.pods import why_not_running
from fmnist_kfp.kubernetes.runner import (
    FAILED,
    JobStatus,
    RemoteJob,
)
from fmnist_kfp.kubernetes.tfjob import (
    CONTAINER_NAME,
    JOB_NAME_LABEL,
    JOB_ROLE_LABEL,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
    build_tfjob,
)
from fmnist_kfp.kubernetes.training_operators import ClusterJob
from fmnist_kfp.kubernetes.workload import queued_status
from fmnist_kfp.launcher.base import ClusterLauncher, Watching
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.training.training_job import TrainingJobResult, TrainingJobSpec

TFJOB_KIND = "TFJob"
TFJOB_PLURAL = "tfjobs"
# A Suspended condition's transition time is the operator's clock, a pod's creationTimestamp
# the API server's, both in whole seconds: a pod created up to this long before a change of
# Suspended is of the generation after it. (A pod of the previous generation was created before
# the job was suspended, and a suspension deletes every pod.)
CLOCK_SKEW = timedelta(seconds=2)


def _suspended(job) -> bool:
    """``runPolicy.suspend``: the operator keeps no pods (kubeflow/trainer v1.9.2
    pkg/controller.v1/common/job.go lines 146-166); Kueue sets it until admission."""
    run_policy = job.spec.run_policy if job.spec else None
    return bool(run_policy is not None and run_policy.suspend)


def _true(conditions, kind: str):
    return next((c for c in conditions if c.type == kind and c.status == "True"), None)


def _moment(value) -> datetime | None:
    """A timestamp as the clients give it (a ``datetime``, or an RFC 3339 string)."""
    if value is None or isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))  # 3.10 wants +00:00
    except ValueError:
        return None


def _suspension_changed_at(conditions) -> tuple[datetime, bool] | None:
    """When the TFJob's ``Suspended`` condition last changed, and whether to suspended: the
    operator sets it True as it suspends the job and deletes its pods, False
    (``TFJobResumed``) as it resumes it and creates them again (kubeflow/trainer v1.9.2
    pkg/controller.v1/common/job.go lines 146-173). None for a job never suspended."""
    for c in conditions:
        if c.type == "Suspended":
            moment = _moment(c.last_transition_time or c.last_update_time)
            return None if moment is None else (moment, c.status == "True")
    return None


@dataclass
class RestartCount:
    """Restarts seen so far: new ``Restarting`` transitions of the TFJob, replica pods
    recreated under a new UID (``ExitCode``: the operator deletes a failed pod and creates a
    new one of the same name, pkg/controller.v1/common/pod.go v1.9.2 lines 350-366) and
    container restarts inside a pod (``OnFailure``/``Always``). Polls can miss a short-lived
    ``Restarting`` condition or pod, so the larger of the two counts is taken.

    Pods are counted per *generation*: a suspended TFJob (Kueue's preemption or eviction) has
    every pod deleted (kubeflow/trainer v1.9.2 pkg/controller.v1/common/job.go lines 146-166,
    ``DeletePodsAndServices`` 43-69: cleanPodPolicy is ignored while the job is unfinished),
    and its resumption creates every replica again under new UIDs: a new generation, not a
    restart of each replica. Generations are bounded by the times the job's ``Suspended``
    condition changed (:func:`_suspension_changed_at`; no pod is created while it is
    suspended), every one seen being kept: a pod is put in the generation it was created in
    (its ``creationTimestamp``), even when a poll missed a whole suspend/resume cycle, reads
    the job just before the operator records the resume but lists the new pods, or still
    lists a terminating pod of the previous generation. A pod with no timestamp goes in the
    latest generation seen. Container restarts count in any generation."""

    transitions: set[str] = field(default_factory=set)
    # pod UID -> (replica type, replica index, creationTimestamp, the latest boundary seen
    # when the pod was first seen: the generation of a pod without a timestamp)
    pods: dict[str, tuple[str, str, datetime | None, datetime | None]] = field(
        default_factory=dict)
    container_restarts: dict[str, int] = field(default_factory=dict)
    # each change of Suspended seen: its moment -> whether it suspended the job
    boundaries: dict[datetime, bool] = field(default_factory=dict)

    def _generation(self, created: datetime | None, fallback: datetime | None):
        """A resumption starts a generation a little before its recorded moment (the pods'
        and the condition's clocks may differ); a suspension only after its own second: no
        pod is made while the job is suspended, so a pod of the same second or before it is
        the previous generation's (Kueue preempts a job seconds after its pods were made)."""
        if created is None:
            return fallback
        return max((start for start, suspended in self.boundaries.items()
                    if (created > start if suspended else start - CLOCK_SKEW <= created)),
                   default=None)

    def update(self, conditions, pods) -> int:
        for c in conditions:
            if c.type == "Restarting" and c.status == "True":
                self.transitions.add(str(c.last_transition_time or c.last_update_time))
        changed = _suspension_changed_at(conditions)
        if changed is not None:
            self.boundaries[changed[0]] = changed[1]
        for pod in pods:
            uid = pod.metadata.uid
            labels = pod.metadata.labels or {}
            if uid not in self.pods:
                self.pods[uid] = (labels.get(REPLICA_TYPE_LABEL, ""),
                                  labels.get(REPLICA_INDEX_LABEL, ""),
                                  _moment(pod.metadata.creation_timestamp),
                                  max(self.boundaries, default=None))
            statuses = (pod.status.container_statuses if pod.status else None) or []
            restarts = sum(s.restart_count or 0 for s in statuses)
            self.container_restarts[uid] = max(restarts, self.container_restarts.get(uid, 0))
        # Generations are recomputed on each poll: a boundary learnt later still moves the
        # pods created after it into their own generation.
        slots: dict[tuple, int] = {}
        for rtype, index, created, latest in self.pods.values():
            slot = (self._generation(created, latest), rtype, index)
            slots[slot] = slots.get(slot, 0) + 1
        from_pods = sum(count - 1 for count in slots.values()) + sum(
            self.container_restarts.values())
        return max(len(self.transitions), from_pods)


class TFJobLauncher(ClusterLauncher):
    """Runs a training job as a TFJob; see the module docstring. ``settings``: the pods'
    (:func:`fmnist_kfp.settings.jobs.cluster_settings`, with the step's image inputs). ``clock``
    and ``sleep`` go to the :class:`RemoteJobRunner` (tests wait without waiting);
    ``request_timeout_seconds`` bounds each API call."""

    def __init__(self, settings: KubernetesSettings, training_client=None, **watching: Any):
        """``watching``: the fields of :class:`~fmnist_kfp.launcher.base.Watching`."""
        super().__init__(settings, Watching(**watching))
        self._client = training_client

    @property
    def client(self):
        if self._client is None:
            from kubeflow.training import TrainingClient

            self._client = TrainingClient(namespace=self.namespace, job_kind=TFJOB_KIND)
        return self._client

    OPERATOR = "tfjob"

    def run(self, job: TrainingJobSpec | ClusterJob) -> TrainingJobResult:
        checked = self.checked(job)  # before anything is created
        spec = checked.spec
        tfjob = build_tfjob(spec, checked.settings)
        started = self.runner.clock()
        watch = _Watch(self, spec)
        remote = RemoteJob(
            kind=TFJOB_KIND, namespace=self.namespace, name=spec.name,
            create=lambda: self.client.create_job(job=tfjob, namespace=self.namespace),
            read=watch.read, status=watch.status, cleanup=watch.cleanup,
            describe_created=f"{spec.replicas} replicas, at most {spec.max_restarts} restarts",
        )
        return self._run(remote, spec, started, lambda: watch.restarts)


class _Watch:
    """Reads one TFJob with its pods, judges it, prints the master's new log lines."""

    def __init__(self, launcher: TFJobLauncher, spec: TrainingJobSpec):
        self.launcher = launcher
        self.spec = spec
        self.counter = RestartCount()
        self.restarts = 0
        self.printed: dict[str, int] = {}  # pod UID -> log lines printed

    def read(self):
        launcher, timeout = self.launcher, self.launcher.request_timeout_seconds
        job = launcher.client.get_job(self.spec.name, namespace=launcher.namespace,
                                      job_kind=TFJOB_KIND, timeout=timeout)
        pods = launcher.client.core_api.list_namespaced_pod(
            launcher.namespace, label_selector=f"{JOB_NAME_LABEL}={self.spec.name}",
            _request_timeout=timeout).items
        return job, pods

    def status(self, snapshot) -> JobStatus:
        job, pods = snapshot
        self._print_master_log(pods)
        conditions = (job.status.conditions if job.status else None) or []
        finished = _true(conditions, "Failed") or _true(conditions, "Succeeded")
        if _suspended(job) and finished is None:
            launcher = self.launcher
            return queued_status(launcher.client.custom_api, launcher.namespace,
                                 {"uid": job.metadata.uid, "labels": job.metadata.labels},
                                 launcher.request_timeout_seconds)
        self.restarts = self.counter.update(conditions, pods)
        last = conditions[-1] if conditions else None
        # The operator's latest condition; one that is False says its reason instead (a
        # resumed job's last is Suspended False, TFJobResumed, until it runs).
        state = "Pending (no status yet)" if last is None else (
            last.type if last.status == "True" else last.reason or f"not {last.type}")
        held = why_not_running(pods)
        progress = state + (f", {self.restarts} restart(s)" if self.restarts else "") + (
            f" ({last.message})" if last is not None and last.message else "") + (
            f"; waiting for {held}" if held else "")
        failed = _true(conditions, "Failed")
        if failed is not None:
            return JobStatus(done=True, failed=True, progress=progress,
                             reason=f"{failed.reason}: {failed.message}")
        if _true(conditions, "Succeeded") is not None:
            return JobStatus(done=True, progress=progress)
        if self.restarts > self.spec.max_restarts:
            restarting = next((c for c in reversed(conditions) if c.type == "Restarting"), None)
            return JobStatus(
                done=True, failed=True, progress=progress,
                reason=f"{self.restarts} restarts, more than max_restarts="
                       f"{self.spec.max_restarts}" + (f" (last: {restarting.message})"
                                                     if restarting is not None else ""))
        return JobStatus(progress=progress)

    def _print_master_log(self, pods) -> None:
        """New lines of the master pod's ``tensorflow`` container; a failed read is skipped."""
        launcher = self.launcher
        for pod in pods:
            if (pod.metadata.labels or {}).get(JOB_ROLE_LABEL) != "master":
                continue
            if pod.status is None or pod.status.phase == "Pending":
                continue
            launcher._say_new_log_lines(launcher.client.core_api, pod, CONTAINER_NAME,
                                        self.printed)

    def cleanup(self, why: str) -> None:
        launcher = self.launcher
        if why == FAILED:
            launcher._say(f"deleting the failed TFJob {launcher.namespace}/{self.spec.name} so "
                          "that a retry of this step starts afresh")
        launcher.client.delete_job(self.spec.name, namespace=launcher.namespace,
                                   job_kind=TFJOB_KIND)
        launcher._say(f"deleted TFJob {launcher.namespace}/{self.spec.name}")
