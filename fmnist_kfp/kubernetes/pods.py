"""Why a job's pods do not run yet, in the words of the program that holds them back.

An operator reports its job Running once it has made the pods, whether or not they run: a pod
the scheduler cannot place (too little CPU, memory or GPUs on every node, a taint, a node
selector nothing matches) keeps condition ``PodScheduled`` False with reason
``Unschedulable`` and the scheduler's message (kubernetes v1.34.1
pkg/scheduler/schedule_one.go 1044-1062, ``handleSchedulingFailure``); a pod whose image
cannot be pulled, or whose Secret or ConfigMap is missing, waits with the kubelet's reason on
its container (``ErrImagePull``, ``ImagePullBackOff``, ``CreateContainerConfigError``;
pkg/kubelet/images/types.go 28-41, pkg/kubelet/kuberuntime/kuberuntime_container.go 67-68).
A launcher shows these as its job's progress, so a step that can only wait for its deadline
says why.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# A container waiting for one of these reasons waits on something the user must fix; others
# (ContainerCreating, PodInitializing) are a pod's normal start.
STUCK_REASONS = frozenset({
    "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
    "CreateContainerConfigError", "CreateContainerError",
})


def why_not_running(pods: Iterable[Any]) -> str:
    """``"<pod>: <reason>: <message>"`` for each of ``pods`` (kubernetes client ``V1Pod``s)
    that the scheduler cannot place or whose container cannot start, joined by ``"; "``;
    ``""`` when none is held back."""
    found = []
    for pod in pods:
        status = pod.status
        if status is None or status.phase not in (None, "Pending"):
            continue
        unscheduled = next((c for c in status.conditions or [] if c.type == "PodScheduled"
                            and c.status == "False" and c.reason == "Unschedulable"), None)
        if unscheduled is not None:
            found.append(f"{pod.metadata.name}: Unschedulable: {unscheduled.message}")
            continue
        for container in [*(status.init_container_statuses or []),
                          *(status.container_statuses or [])]:
            waiting = container.state.waiting if container.state else None
            if waiting is not None and waiting.reason in STUCK_REASONS:
                found.append(f"{pod.metadata.name}: {waiting.reason}: {waiting.message}")
                break
    return "; ".join(found)
