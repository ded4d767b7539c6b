"""A stand-in for Kueue beside the training operator's (tests/standins/kubernetes.py): what our
launcher sees of a queued TFJob. It is no scheduler; each rule cites kubernetes-sigs/kueue
v0.19.2 (the notes behind them: docs/scheduling.md):

* **managed jobs**: a TFJob whose own metadata carries ``kueue.x-k8s.io/queue-name``
  (pkg/controller/constants/constants.go line 23, read in jobframework/utils.go 180-182);
  others are left alone (``manageJobsWithoutQueueName`` false by default: jobframework/
  reconciler.go 362-373). With the ``kubeflow.org/tfjob`` integration off — Kueue v0.19's
  default (config/components/manager/controller_manager_config.yaml line 55) — nothing is
  managed at all (``tfjob_integration=False``);
* **suspended on create**: Kueue's mutating webhook sets ``spec.runPolicy.suspend: true``
  (jobframework/base_webhook.go 69-82, defaults.go 36-46; kubeflowjob_controller.go 50-56);
* **a Workload per job**: named ``tfjob-<name>-<first 5 hex of sha1(kind, group, name,
  uid)>`` (jobframework/workload_names.go 64-117), owned by the TFJob, labelled
  ``kueue.x-k8s.io/job-uid=<uid>`` (reconciler.go 1606-1635), one PodSet per replica type
  (lower-cased, in the order Chief, Master, PS, Worker, Evaluator; count = replicas:
  kubeflowjob_controller.go 112-132, tfjob_controller.go 120-128), ``spec.queueName`` from the
  label (utils.go 277);
* **pending**: ``QuotaReserved=False`` with reason ``Inadmissible`` and "LocalQueue <q> doesn't
  exist" for an unknown queue (workload_controller.go 2063-2095), else reason ``Pending`` and
  "couldn't assign flavors to pod set <ps>: insufficient unused quota for cpu in flavor
  <flavor>, <n> more needed" (scheduler/scheduler.go 1172-1185, flavorassigner.go 228-246 and
  1368-1369); no ``Admitted`` condition yet (workload/admissionchecks.go 53-56);
* **admission** (here after ``admit_after_reads`` reads of the TFJob, or :meth:`admit`):
  ``QuotaReserved=True`` "Quota reserved in ClusterQueue <cq>" and ``Admitted=True`` "The
  workload is admitted" (workload.go 893-905, admissionchecks.go 59-66), and the TFJob
  unsuspended (reconciler.go 1480-1518, kubeflowjob_controller.go 58-77); the training
  operator then creates its pods (tests/standins/tfjob_operator.py, suspend handling);
* **eviction** (here ``evictions``, each after some reads of the admitted TFJob, or
  :meth:`evict`): preemption (reason ``Preempted``, scheduler/preemption/preemption.go
  177-191) or ``waitForPodsReady``'s timeout (``PodsReadyTimeout``, core/workload_controller.go
  1255-1274; on by default since v0.19: apis/config/v1beta2/defaults.go 99-117, the
  ``DisableWaitForPodsReady`` gate off, pkg/features/kube_features.go 51-52 and 667-669) set
  ``Evicted=True`` (workload/evict/evict.go 95-105; with ``Preempted=True`` for a preemption,
  workload.go 973-982); Kueue then suspends the TFJob again (jobframework/reconciler.go
  580-585 and 1549-1560, kubeflowjob_controller.go 54-56), the training operator deletes every
  pod (tests/standins/tfjob_operator.py), and Kueue, the job no longer active (its replica
  statuses' active counts zeroed by the operator: kubeflowjob_controller.go 134-141), clears the
  admission: ``QuotaReserved=False`` reason ``Pending`` with the eviction's message,
  ``Admitted=False`` ``NoReservation``, ``Requeued`` True for a preemption, False for a timeout
  (reconciler.go 586-611, workload.go 794-814 and 859-872, admissionchecks.go 77-80; the
  ``UnadmittedWorkloadsObservability`` gate off, kube_features.go 899-901). The Workload is
  requeued: admitted again after ``admit_after_reads`` more reads, which resets ``Evicted`` and
  ``Preempted`` to False, "Previously: <message>" (workload.go 893-936); the operator then
  creates every pod anew, under new UIDs.

Workloads are served at ``/apis/kueue.x-k8s.io/v1beta1/namespaces/<ns>/workloads`` (listed by
label selector) and ``…/v1beta2/…`` alike: Kueue v0.19.2 serves both (v1beta1 deprecated).
"""

from __future__ import annotations

import copy
import hashlib
import re
from urllib.parse import parse_qs, urlsplit

from tests.standins.kubernetes import KubernetesStandIn, selects, status_body
from tests.standins.loopback import reply_json

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
_WORKLOADS = re.compile(r"^/apis/kueue\.x-k8s\.io/(v1beta1|v1beta2)/namespaces/([^/]+)/workloads$")
_PODSET_ORDER = ("Chief", "Master", "PS", "Worker", "Evaluator")
FLAVOR = "default-flavor"


def workload_name(name: str, uid: str, kind: str = "TFJob", group: str = "kubeflow.org") -> str:
    """jobframework/workload_names.go v0.19.2 lines 64-117."""
    digest = hashlib.sha1(f"{kind}\n{group}\n{name}\n{uid}".encode()).hexdigest()[:5]
    return f"{kind.lower()}-{name}"[:253 - 1 - 5] + f"-{digest}"


def _set(conditions: list[dict], type_: str, status: str, reason: str, message: str,
         now: str) -> None:
    """apimachinery's meta.SetStatusCondition (v0.31.3 pkg/api/meta/conditions.go 31-68): one
    condition per type, updated in place; the transition time changes with the status only."""
    current = next((c for c in conditions if c["type"] == type_), None)
    if current is None:
        conditions.append({"type": type_, "status": status, "reason": reason,
                           "message": message, "lastTransitionTime": now})
        return
    if current["status"] != status:
        current["lastTransitionTime"] = now
    current.update(status=status, reason=reason, message=message)


class KueueStandIn(KubernetesStandIn):
    """TFJobs with the training operator's stand-in, queued by Kueue's rules (module docstring).
    ``local_queues``: ``(namespace, name) -> ClusterQueue``; ``admit_after_reads``: the reads
    of a queued TFJob before Kueue admits it (None: only :meth:`admit`); ``evictions``:
    ``(reason, reads)`` in order, one per admission: that admission is evicted for ``reason``
    (``Preempted`` or ``PodsReadyTimeout``) after ``reads`` reads of the admitted TFJob."""

    def __init__(self, *, local_queues: dict[tuple[str, str], str] | None = None,
                 admit_after_reads: int | None = 3, tfjob_integration: bool = True,
                 evictions: list[tuple[str, int]] | None = None, **kwargs):
        self.local_queues = dict(local_queues or {})
        self.admit_after_reads = admit_after_reads
        self.tfjob_integration = tfjob_integration
        self.evictions = list(evictions or [])
        self.admitted_reads: dict[tuple[str, str], int] = {}
        self.evicted: list[tuple[str, str, str]] = []  # (namespace, name, reason), in order
        self.workloads: dict[tuple[str, str], dict] = {}  # (namespace, job name) -> Workload
        self.queued_reads: dict[tuple[str, str], int] = {}
        super().__init__(**kwargs)

    def _managed(self, body: dict) -> bool:
        labels = (body.get("metadata") or {}).get("labels") or {}
        return self.tfjob_integration and bool(labels.get(QUEUE_LABEL))

    def on_post(self, handler, body: dict) -> None:
        if isinstance(body, dict) and body.get("kind") == "TFJob" and self._managed(body):
            body = copy.deepcopy(body)
            body["spec"].setdefault("runPolicy", {})["suspend"] = True  # the webhook
        before = set(self.jobs)
        super().on_post(handler, body)
        for key in set(self.jobs) - before:
            self._create_workload(self.jobs[key].job)

    def _create_workload(self, job: dict) -> None:
        if not self._managed(job):
            return
        meta = job["metadata"]
        replicas = job["spec"]["tfReplicaSpecs"]
        queue = meta["labels"][QUEUE_LABEL]
        spec = {
            "queueName": queue,
            "podSets": [{"name": kind.lower(), "count": replicas[kind].get("replicas", 1),
                         "template": copy.deepcopy(replicas[kind]["template"])}
                        for kind in _PODSET_ORDER if kind in replicas],
        }
        if meta["labels"].get(PRIORITY_LABEL):
            spec.update(priorityClassSource="kueue.x-k8s.io/workloadpriorityclass",
                        priorityClassName=meta["labels"][PRIORITY_LABEL])
        workload = {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {
                "name": workload_name(meta["name"], meta["uid"]), "namespace": meta["namespace"],
                "labels": {JOB_UID_LABEL: meta["uid"]},
                "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
                                     "name": meta["name"], "uid": meta["uid"],
                                     "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": spec,
            "status": {"conditions": [self._pending_condition(meta["namespace"], queue, spec)]},
        }
        self.workloads[(meta["namespace"], meta["name"])] = workload

    def _pending_condition(self, namespace: str, queue: str, spec: dict) -> dict:
        if (namespace, queue) not in self.local_queues:
            reason, message = "Inadmissible", f"LocalQueue {queue} doesn't exist"
        else:
            first = spec["podSets"][0]
            reason = "Pending"
            message = (f"couldn't assign flavors to pod set {first['name']}: insufficient "
                       f"unused quota for cpu in flavor {FLAVOR}, 4 more needed")
        return {"type": "QuotaReserved", "status": "False", "reason": reason,
                "message": message, "lastTransitionTime": self.clock()}

    def admit(self, name: str, namespace: str = "kubeflow") -> None:
        """The ClusterQueue admits the job's Workload and Kueue unsuspends the TFJob."""
        workload = self.workloads[(namespace, name)]
        queue = workload["spec"]["queueName"]
        cluster_queue = self.local_queues[(namespace, queue)]
        now = self.clock()
        status = workload["status"]
        status["admission"] = {"clusterQueue": cluster_queue, "podSetAssignments": [
            {"name": ps["name"], "count": ps["count"], "flavors": {"cpu": FLAVOR}}
            for ps in workload["spec"]["podSets"]]}
        conditions = status["conditions"]
        _set(conditions, "QuotaReserved", "True", "QuotaReserved",
             f"Quota reserved in ClusterQueue {cluster_queue}", now)
        for kind in ("Evicted", "Preempted"):  # workload.go 907-913, 922-936
            previous = next((c for c in conditions if c["type"] == kind), None)
            if previous is not None and previous["status"] == "True":
                _set(conditions, kind, "False", "QuotaReserved",
                     f"Previously: {previous['message']}", now)
        _set(conditions, "Admitted", "True", "Admitted", "The workload is admitted", now)
        self.admitted_reads[(namespace, name)] = 0
        controller = self.jobs[(namespace, name)]
        with controller.lock:
            controller.job["spec"]["runPolicy"]["suspend"] = False

    def evict(self, name: str, namespace: str = "kubeflow", reason: str = "Preempted") -> None:
        """Kueue evicts the admitted Workload (``Preempted``, ``PodsReadyTimeout``), suspends
        the TFJob again and requeues it (module docstring)."""
        workload = self.workloads[(namespace, name)]
        meta, status = workload["metadata"], workload["status"]
        if reason == "Preempted":
            message = (f"Preempted to accommodate a workload (UID: uid-preemptor, JobUID: "
                       f"uid-preemptor-job) due to prioritization in the ClusterQueue; "
                       f"preemptor path: /{status['admission']['clusterQueue']}; preemptee "
                       f"path: /{status['admission']['clusterQueue']}")
        else:
            message = f"Exceeded the PodsReady timeout {namespace}/{meta['name']}"
        now = self.clock()
        conditions = status["conditions"]
        _set(conditions, "Evicted", "True", reason, message, now)
        if reason == "Preempted":
            _set(conditions, "Preempted", "True", "InClusterQueue", message, now)
        controller = self.jobs[(namespace, name)]
        with controller.lock:
            controller.job["spec"]["runPolicy"]["suspend"] = True
        # The job no longer active (the operator zeroes its active counts as it suspends),
        # Kueue clears the admission and requeues the Workload.
        status.pop("admission", None)
        _set(conditions, "QuotaReserved", "False", "Pending", message, now)
        _set(conditions, "Admitted", "False", "NoReservation", "The workload has no reservation",
             now)
        _set(conditions, "Requeued", "True" if reason == "Preempted" else "False", reason,
             message, now)
        self.queued_reads[(namespace, name)] = 0
        self.admitted_reads.pop((namespace, name), None)
        self.evicted.append((namespace, name, reason))

    def on_get(self, handler) -> None:
        path = urlsplit(handler.path).path
        if match := _WORKLOADS.match(path):
            if self._fault(handler, "GET", "workloads"):
                return None
            selector = parse_qs(urlsplit(handler.path).query).get("labelSelector", [""])[0]
            items = [copy.deepcopy(w) for (ns, _), w in self.workloads.items()
                     if ns == match[2] and selects(selector, w["metadata"]["labels"])]
            for item in items:
                item["apiVersion"] = f"kueue.x-k8s.io/{match[1]}"
            return reply_json(handler, {"kind": "WorkloadList",
                                        "apiVersion": f"kueue.x-k8s.io/{match[1]}",
                                        "metadata": {}, "items": items})
        if path.startswith("/apis/kueue.x-k8s.io/"):
            return reply_json(handler, status_body(404, "NotFound"), 404)
        super().on_get(handler)
        self._count_read(path)
        return None

    def _count_read(self, path: str) -> None:
        match = re.match(r"^/apis/kubeflow\.org/v1/namespaces/([^/]+)/tfjobs/([^/?]+)$", path)
        if not match or self.admit_after_reads is None:
            return
        key = (match[1], match[2])
        workload = self.workloads.get(key)
        if workload is None or key not in self.jobs or \
                (match[1], workload["spec"]["queueName"]) not in self.local_queues:
            return
        if any(c["type"] == "Admitted" and c["status"] == "True"
               for c in workload["status"]["conditions"]):
            if key in self.admitted_reads and self.evictions:
                self.admitted_reads[key] += 1
                reason, reads = self.evictions[0]
                if self.admitted_reads[key] >= reads:
                    self.evictions.pop(0)
                    self.evict(key[1], key[0], reason)
            return
        self.queued_reads[key] = self.queued_reads.get(key, 0) + 1
        if self.queued_reads[key] >= self.admit_after_reads:
            self.admit(key[1], key[0])

    def on_delete(self, handler) -> None:
        super().on_delete(handler)
        match = re.match(r"^/apis/kubeflow\.org/v1/namespaces/([^/]+)/tfjobs/([^/?]+)",
                         handler.path)
        if match and (match[1], match[2]) not in self.jobs:
            self.workloads.pop((match[1], match[2]), None)  # owned by the TFJob: collected
