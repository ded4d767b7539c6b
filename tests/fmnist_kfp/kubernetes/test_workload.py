"""Kueue's Workload read for why a queued job waits, in Kueue's words (kubernetes-sigs/kueue
v0.19.2's QuotaReserved condition), and a read that fails giving a sentence, never an error."""

from __future__ import annotations

from fmnist_kfp.kubernetes.workload import (
    JOB_UID_LABEL,
    queued_reason,
    queued_status,
    read_workload,
)
from fmnist_kfp.settings.scheduling import KUEUE_QUEUE_LABEL

WAITING = {"status": {"conditions": [{
    "type": "QuotaReserved", "status": "False", "reason": "Pending",
    "message": "couldn't assign flavors to pod set worker: insufficient unused quota for cpu "
               "in flavor default-flavor, 4 more needed"}]}}
ADMITTED = {"status": {"conditions": [{"type": "Admitted", "status": "True"}],
                       "admission": {"clusterQueue": "team-a-cq"}}}


class _CustomApi:
    def __init__(self, items=None, error=None):
        self.items, self.error, self.selectors = items or [], error, []

    def list_namespaced_custom_object(self, group, version, namespace, plural, *,
                                      label_selector, _request_timeout):
        self.selectors.append(label_selector)
        if self.error:
            raise self.error
        return {"items": self.items}


def test_the_reason_is_kueues_own_message():
    labels = {KUEUE_QUEUE_LABEL: "team-a"}
    assert queued_reason(labels, WAITING).startswith("couldn't assign flavors to pod set")
    assert queued_reason(labels, ADMITTED) == (
        "admitted by Kueue to ClusterQueue team-a-cq, starting")
    assert queued_reason(labels, {"status": {}}) == (
        "waiting for Kueue to admit it to LocalQueue team-a")


def test_the_workload_is_found_by_the_jobs_uid_and_a_failed_read_is_a_sentence():
    api = _CustomApi(items=[WAITING])
    assert read_workload(api, "kubeflow-user", "uid-1") is WAITING
    assert api.selectors == [f"{JOB_UID_LABEL}=uid-1"]
    assert read_workload(_CustomApi(), "ns", "uid-1") == "Kueue has not created its Workload yet"
    failed = read_workload(_CustomApi(error=RuntimeError("forbidden")), "ns", "uid-1")
    assert failed.startswith("its Workload could not be read (")
    status = queued_status(_CustomApi(error=RuntimeError("forbidden")), "ns",
                           {"uid": "uid-1", "labels": {}})
    assert status.queued and status.progress.startswith(
        "queued: waiting for Kueue to admit it to its queue; its Workload could not be read")
