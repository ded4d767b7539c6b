"""The Kubernetes backend on Kubeflow Trainer v2: each training job is a TrainJob on the runtime
``fmnist-tensorflow``, run by the remote-job runner (:mod:`fmnist_kfp.kubernetes.runner`:
create or re-attach by the job's stable name, SIGTERM guard before the create call, transient
API errors retried, cleanup on SIGTERM, deadline or failure), as the TFJob launcher does.

What is particular to TrainJobs (kubeflow/trainer v2.1.0; v2.2.0 the same unless said):

* **Terminal state.** Trainer copies its JobSet's ``Completed`` condition to the TrainJob as
  ``Complete`` and ``Failed`` as ``Failed``, reason and message kept (JobSet v0.10.1 reasons
  ``AllJobsCompleted``, ``FailJobSetFailurePolicyAction``, ``ReachedMaxRestarts``, ...), and
  sets ``Suspended`` True/False as the TrainJob is suspended and resumed
  (pkg/controller/trainjob_controller.go lines 96-143 and 187-222;
  pkg/runtime/framework/plugins/jobset/jobset.go lines 309-338). Trainer 2.2 also fails a job
  past ``activeDeadlineSeconds`` (reason ``DeadlineExceeded``). ``Failed=True`` fails the step,
  ``Complete=True`` ends it.
* **Restarts** are the JobSet's: a failed Job (any node lost: the runtime's ``backoffLimit: 0``)
  makes the JobSet delete all its Jobs and create them anew under the next
  ``jobset.sigs.k8s.io/restart-attempt``, up to the runtime's ``failurePolicy.maxRestarts``
  (jobset v0.10.1 pkg/controllers/failure_policy.go lines 181-240,
  jobset_controller.go lines 275-315 and 765-797). The launcher reads that label on the pods
  (the JobSet itself is not in Kubeflow's ``kubeflow-edit`` role) and fails, and deletes, a job
  that restarted more than ``max_restarts`` times: the runtime's ceiling is no budget of ours.
* **Suspension is no restart.** Kueue suspends a TrainJob until admitted (and again when it
  preempts or evicts it); Trainer suspends the JobSet, which suspends its Jobs, whose pods
  Kubernetes deletes; resumed, the same Jobs start new pods under the same restart attempt
  (jobset_controller.go lines 391-512). While the TrainJob is suspended the step shows
  ``queued: <Kueue's reason>`` (:mod:`fmnist_kfp.kubernetes.workload`) and the wait counts
  against ``scheduling.start_deadline_minutes``.
* **Logs** of node 0 (completion index 0, of the latest restart attempt): new lines printed on
  each poll; a failed read is skipped.
* **Held back.** A pod the scheduler cannot place, or whose image cannot be pulled, is named in
  the progress with the scheduler's or the kubelet's reason (:mod:`fmnist_kfp.kubernetes.pods`).
* **A failed job is deleted** after its reason is reported; so is a job whose step is
  terminated or runs past its deadline. Deleting the TrainJob deletes its JobSet, Jobs and
  pods (owner references; Trainer puts no finalizer on a TrainJob).
"""

from __future__ import annotations

from typing import Any

from fmnist_kfp.kubernetes.pods import why_not_running
from fmnist_kfp.kubernetes.runner import (
    FAILED,
    JobStatus,
    RemoteJob,
)
from fmnist_kfp.kubernetes.training_operators import ClusterJob
from fmnist_kfp.kubernetes.trainjob import (
    CONTAINER_NAME,
    CREATION_FAILED,
    GROUP,
    JOBSET_NAME_LABEL,
    KIND,
    OVERRIDES,
    PLURAL,
    RESTART_ATTEMPT_LABEL,
    VERSION,
)
from fmnist_kfp.kubernetes.workload import queued_status
from fmnist_kfp.launcher.base import ClusterLauncher, Watching
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.training.training_job import TrainingJobResult, TrainingJobSpec

# Kubernetes' Indexed Job puts the completion index on each pod as an annotation (always) and a
# label (1.28 and later): kubernetes pkg/controller/job/indexed_job_utils.go.
COMPLETION_INDEX_KEY = "batch.kubernetes.io/job-completion-index"


def _true(conditions, kind: str) -> dict | None:
    return next((c for c in conditions if c.get("type") == kind and c.get("status") == "True"),
                None)


def restart_attempt(pod) -> int:
    """The JobSet restart attempt a pod belongs to (0 for the first run)."""
    labels = pod.metadata.labels or {}
    try:
        return int(labels.get(RESTART_ATTEMPT_LABEL, "0"))
    except ValueError:
        return 0


def completion_index(pod) -> int | None:
    """The pod's completion index in its Indexed Job, or None."""
    for source in (pod.metadata.annotations or {}, pod.metadata.labels or {}):
        if COMPLETION_INDEX_KEY in source:
            try:
                return int(source[COMPLETION_INDEX_KEY])
            except ValueError:
                return None
    return None


class TrainJobLauncher(ClusterLauncher):
    """Runs a training job as a TrainJob; see the module docstring. ``settings``: the pods'
    (:func:`fmnist_kfp.settings.jobs.cluster_settings`); ``shape``: the pod settings' shape the
    cluster serves (:func:`fmnist_kfp.kubernetes.training_operators.trainjob_api`);
    ``api_client``: a ``kubernetes`` ``ApiClient`` (default: in-cluster, else the kubeconfig).
    ``clock`` and ``sleep`` go to the :class:`RemoteJobRunner`; ``request_timeout_seconds``
    bounds each API call."""

    def __init__(self, settings: KubernetesSettings, api_client=None, shape: str = OVERRIDES,
                 **watching: Any):
        """``watching``: the fields of :class:`~fmnist_kfp.launcher.base.Watching` (Trainer
        2.1 has no deadline of its own: the runner's is it)."""
        super().__init__(settings, Watching(**watching))
        self._api_client = api_client
        self.shape = shape

    @property
    def api_client(self):
        if self._api_client is None:
            from fmnist_kfp.kubernetes.runner import default_api_client

            self._api_client = default_api_client()
        return self._api_client

    @property
    def custom_api(self):
        from kubernetes import client

        return client.CustomObjectsApi(self.api_client)

    @property
    def core_api(self):
        from kubernetes import client

        return client.CoreV1Api(self.api_client)

    OPERATOR = "trainjob"

    def run(self, job: TrainingJobSpec | ClusterJob) -> TrainingJobResult:
        checked = self.checked(job)  # what a TrainJob cannot do, refused before creating
        spec = checked.spec
        manifest = checked.manifest()
        started = self.runner.clock()
        watch = _Watch(self, spec)
        remote = RemoteJob(
            kind=KIND, namespace=self.namespace, name=spec.name,
            create=lambda: self.custom_api.create_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, manifest,
                _request_timeout=self.request_timeout_seconds),
            read=watch.read, status=watch.status, cleanup=watch.cleanup,
            describe_created=f"{spec.num_workers} node(s) on runtime "
                             f"{manifest['spec']['runtimeRef']['name']}, at most "
                             f"{spec.max_restarts} restarts")
        return self._run(remote, spec, started, lambda: watch.restarts)


class _Watch:
    """Reads one TrainJob with its pods, judges it, prints node 0's new log lines."""

    def __init__(self, launcher: TrainJobLauncher, spec: TrainingJobSpec):
        self.launcher = launcher
        self.spec = spec
        self.restarts = 0
        self.printed: dict[str, int] = {}  # pod UID -> log lines printed

    def read(self):
        launcher, timeout = self.launcher, self.launcher.request_timeout_seconds
        job = launcher.custom_api.get_namespaced_custom_object(
            GROUP, VERSION, launcher.namespace, PLURAL, self.spec.name,
            _request_timeout=timeout)
        pods = launcher.core_api.list_namespaced_pod(
            launcher.namespace, label_selector=f"{JOBSET_NAME_LABEL}={self.spec.name}",
            _request_timeout=timeout).items
        return job, pods

    def status(self, snapshot) -> JobStatus:
        job, pods = snapshot
        self._print_node0_log(pods)
        conditions = (job.get("status") or {}).get("conditions") or []
        failed, complete = _true(conditions, "Failed"), _true(conditions, "Complete")
        if (job.get("spec") or {}).get("suspend") and not (failed or complete):
            launcher = self.launcher
            return queued_status(launcher.custom_api, launcher.namespace, job["metadata"],
                                 launcher.request_timeout_seconds)
        # Pods of every attempt seen: a restart deletes the previous attempt's Jobs and pods.
        self.restarts = max([self.restarts] + [restart_attempt(p) for p in pods])
        state = (failed or complete or {}).get("type") or (
            f"Running ({len([p for p in pods if p.status and p.status.phase == 'Running'])}"
            f"/{self.spec.num_workers} nodes)" if pods else self._pending())
        held = why_not_running(pods)
        progress = state + (f", {self.restarts} restart(s)" if self.restarts else "") + (
            f"; waiting for {held}" if held else "")
        if failed is not None:
            return JobStatus(done=True, failed=True, progress=progress,
                             reason=f"{failed.get('reason')}: {failed.get('message')}")
        if complete is not None:
            return JobStatus(done=True, progress=progress)
        if self.restarts > self.spec.max_restarts:
            return JobStatus(done=True, failed=True, progress=progress,
                             reason=f"{self.restarts} restarts of its JobSet, more than "
                                    f"max_restarts={self.spec.max_restarts}")
        return JobStatus(progress=progress)

    def _pending(self) -> str:
        """Why a TrainJob without pods has none, as far as Trainer says: when its JobSet
        cannot be made (a webhook refuses it, a missing runtime template), Trainer sets no
        condition, it only records a ``TrainJobResourcesCreationFailed`` event and retries
        (kubeflow/trainer v2.1.0 pkg/controller/trainjob_controller.go 118-131; v2.2.0 133)."""
        launcher = self.launcher
        try:
            events = launcher.core_api.list_namespaced_event(
                launcher.namespace, field_selector=(
                    f"involvedObject.kind={KIND},involvedObject.name={self.spec.name},"
                    f"reason={CREATION_FAILED}"),
                _request_timeout=launcher.request_timeout_seconds).items
        except Exception:  # events are a courtesy: without them, the plain state
            events = []
        if not events:
            return "Pending (no pods yet)"
        latest = max(events, key=lambda e: str(e.last_timestamp or e.event_time or ""))
        return f"Pending: {CREATION_FAILED}: {latest.message}"

    def _print_node0_log(self, pods) -> None:
        """New lines of node 0's ``node`` container (the latest attempt's pod); a failed
        read is skipped."""
        launcher = self.launcher
        nodes = [p for p in pods if completion_index(p) == 0
                 and p.status is not None and p.status.phase != "Pending"]
        for pod in sorted(nodes, key=restart_attempt):
            launcher._say_new_log_lines(launcher.core_api, pod, CONTAINER_NAME, self.printed)

    def cleanup(self, why: str) -> None:
        launcher = self.launcher
        where = f"TrainJob {launcher.namespace}/{self.spec.name}"
        if why == FAILED:
            launcher._say(f"deleting the failed {where} so that a retry of this step starts "
                          "afresh")
        launcher.custom_api.delete_namespaced_custom_object(
            GROUP, VERSION, launcher.namespace, PLURAL, self.spec.name,
            _request_timeout=launcher.request_timeout_seconds)
        launcher._say(f"deleted {where}")
