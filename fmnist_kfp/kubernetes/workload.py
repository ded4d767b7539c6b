"""Kueue's Workload: why a queued job waits, in Kueue's own words.

A job carrying ``kueue.x-k8s.io/queue-name`` is created suspended by Kueue's webhook and gets a
Workload, labelled ``kueue.x-k8s.io/job-uid=<the job's uid>``; Kueue unsuspends the job once
its ClusterQueue admits the Workload. While it waits, the Workload's ``QuotaReserved``
condition is False and its message says why ("couldn't assign flavors to pod set worker:
insufficient unused quota for cpu in flavor default-flavor, 4 more needed", "LocalQueue team-a
doesn't exist"). kubernetes-sigs/kueue v0.19.2: jobframework/reconciler.go lines 1606-1635 (the
label), scheduler/scheduler.go 1172-1185 and workload_controller.go 2063-2095 (the
condition); docs/scheduling.md.

The Workload is read for the message only: a read that fails (no Kueue, no permission to list
Workloads) gives a reason that says so, never an error, so it cannot fail or clean up a job.
"""

from __future__ import annotations

from typing import Any

from fmnist_kfp.kubernetes.api_errors import api_message
from fmnist_kfp.kubernetes.runner import JobStatus
from fmnist_kfp.settings.scheduling import KUEUE_QUEUE_LABEL

GROUP = "kueue.x-k8s.io"
# v1beta1 is served by every Kueue release with TFJob support (0.9 and later; deprecated but
# still served beside v1beta2 in v0.19.2).
VERSION = "v1beta1"
PLURAL = "workloads"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


def read_workload(custom_api, namespace: str, job_uid: str,
                  request_timeout: float = 60.0) -> dict[str, Any] | str:
    """The Workload of the job with ``job_uid``, or a sentence saying why it cannot be read."""
    try:
        listed = custom_api.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, label_selector=f"{JOB_UID_LABEL}={job_uid}",
            _request_timeout=request_timeout)
    except Exception as error:  # the reason is a courtesy; the job's state is what counts
        return f"its Workload could not be read ({api_message(error)})"
    items = listed.get("items") or []
    return items[0] if items else "Kueue has not created its Workload yet"


def queued_reason(labels: dict[str, str], workload: dict[str, Any] | str) -> str:
    """``<Kueue's reason>`` for ``queued: <reason>``, from the job's labels and its Workload
    (or the sentence :func:`read_workload` gave instead)."""
    queue = labels.get(KUEUE_QUEUE_LABEL, "")
    where = f"LocalQueue {queue}" if queue else "its queue"
    if isinstance(workload, str):
        return f"waiting for Kueue to admit it to {where}; {workload}"
    status = workload.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "QuotaReserved" and condition.get("status") == "False":
            return condition.get("message") or condition.get("reason") or "pending"
        if condition.get("type") == "Admitted" and condition.get("status") == "True":
            # Admitted, and the job not unsuspended yet: a moment until the next read.
            cluster_queue = (status.get("admission") or {}).get("clusterQueue") or "its queue"
            return f"admitted by Kueue to ClusterQueue {cluster_queue}, starting"
    return f"waiting for Kueue to admit it to {where}"


def queued_status(custom_api, namespace: str, metadata: dict[str, Any],
                  request_timeout: float = 60.0) -> JobStatus:
    """What the runner is told of a job Kueue holds suspended (a TFJob or a batch Job, by its
    ``metadata``): queued, with Kueue's reason as the progress line."""
    workload = read_workload(custom_api, namespace, metadata.get("uid") or "", request_timeout)
    return JobStatus(queued=True, progress="queued: " + queued_reason(
        metadata.get("labels") or {}, workload))
