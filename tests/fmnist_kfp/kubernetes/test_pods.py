"""Why a job's pods do not run yet (fmnist_kfp.kubernetes.pods), read from pods as the API
server returns them; the scheduler's side runs for real in
tests/fmnist_kfp/launcher/test_tfjob_on_the_cluster.py."""

from __future__ import annotations

from kubernetes.client import ApiClient

from fmnist_kfp.kubernetes.pods import why_not_running


def _pod(name: str, phase: str, conditions=(), waiting: dict | None = None):
    """A V1Pod decoded from its JSON, as the client decodes the API server's answer."""
    statuses = [{"name": "tensorflow", "ready": False, "restartCount": 0, "image": "x",
                 "imageID": "", "state": {"waiting": waiting}}] if waiting else []
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "status": {"phase": phase, "conditions": list(conditions),
                       "containerStatuses": statuses}}

    class Answer:
        data = __import__("json").dumps(body)

    return ApiClient().deserialize(Answer(), "V1Pod")


UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/1 nodes are available: 1 Insufficient cpu."}


def test_the_schedulers_and_the_kubelets_reasons_are_quoted():
    pods = [_pod("job-worker-0", "Pending", [UNSCHEDULABLE]),
            _pod("job-worker-1", "Pending", waiting={
                "reason": "ImagePullBackOff",
                "message": 'Back-off pulling image "registry.example.com/ml/fmnist-kfp:0.2"'}),
            _pod("job-chief-0", "Running")]
    assert why_not_running(pods) == (
        "job-worker-0: Unschedulable: 0/1 nodes are available: 1 Insufficient cpu.; "
        'job-worker-1: ImagePullBackOff: Back-off pulling image '
        '"registry.example.com/ml/fmnist-kfp:0.2"')


def test_a_pod_starting_normally_is_not_held_back():
    starting = _pod("job-worker-0", "Pending", [
        {"type": "PodScheduled", "status": "True"}], waiting={"reason": "ContainerCreating"})
    assert why_not_running([starting, _pod("job-worker-1", "Succeeded")]) == ""
