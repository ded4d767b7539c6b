"""How the cluster schedules the jobs a run creates (``kubernetes.scheduling``): a fair-share
queue, a priority, and gang scheduling. Every key optional; nothing set, the jobs go to the
default scheduler as before.

The three answers of a shared cluster, each done by an existing scheduler:

* ``queue`` — Kueue: the ``kueue.x-k8s.io/queue-name`` label on every TFJob (training and
  Katib trials) and batch-prediction Job. Kueue's webhook creates the job suspended and
  Kueue unsuspends it once the LocalQueue's ClusterQueue admits it; until then the step prints
  ``queued: <Kueue's reason>`` and the wait counts against ``start_deadline_minutes``, not
  against the job's run time.
* ``priority_class`` — the pods' ``priorityClassName`` (the scheduler may preempt lower ones
  for them); with a queue also Kueue's ``kueue.x-k8s.io/priority-class`` label, naming the
  WorkloadPriorityClass of the same name that orders the queue.
* ``gang`` — the training operator's ``runPolicy.schedulingPolicy`` on every TFJob:
  ``minAvailable`` all of its replicas, so that the operator's gang scheduler (Volcano, or the
  scheduler-plugins' coscheduling) places all of a job's pods or none, and a partly scheduled
  job never holds workers while it waits for the rest.

Locally (``backend: local``) none of them applies: the jobs are processes sharing this
machine's cores, and a local run refuses none of these keys but says once that they are for
the cluster (docs/scheduling.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from fmnist_kfp.settings.names import is_dns_1123_label, is_dns_1123_subdomain
from fmnist_kfp.settings.schema import Settings, not_negative, setting

# Gang schedulers the training operator creates PodGroups for (its --gang-scheduler-name:
# `volcano`, or any other name for scheduler-plugins; kubeflow/trainer v1.9.2
# cmd/training-operator.v1/main.go lines 96-97, 191-202), and the scheduler that places the
# pods of each: Volcano's is `volcano` (volcano v1.15.1 cmd/scheduler/app/options/options.go
# line 35), scheduler-plugins' Helm chart names its second scheduler
# `scheduler-plugins-scheduler` (scheduler-plugins v0.34.7
# manifests/install/charts/as-a-second-scheduler/values.yaml line 6; the operator's own e2e
# sets that name in the pod template: kubeflow/trainer v1.9.2 sdk/python/test/e2e/utils.py
# lines 68-74).
GANG_SCHEDULERS = ("", "volcano", "scheduler-plugins")
DEFAULT_SCHEDULER_NAMES = {"volcano": "volcano",
                           "scheduler-plugins": "scheduler-plugins-scheduler"}
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


def _name_rule(what: str, *, label: bool = True):
    """A ``what`` name: a DNS-1123 label where it is also a label value (at most 63
    characters), else a DNS-1123 subdomain."""
    valid, form = ((is_dns_1123_label, "'-', at most 63 characters, as a label value must be")
                   if label else (is_dns_1123_subdomain, "'-' and '.'"))

    def rule(name: str, value: str) -> str | None:
        if value and not valid(value):
            return f"{name} {value!r} is not a {what} name (lowercase letters, digits and {form})"
        return None

    return rule


@dataclass
class SchedulingSettings(Settings):
    """The ``scheduling`` key of the ``kubernetes`` parameter."""

    WHAT = "scheduling settings"

    queue: str = setting(
        "", help="Kueue LocalQueue of the run's TFJobs, Katib trials and batch Jobs (the "
                 "`kueue.x-k8s.io/queue-name` label); a job waits suspended until Kueue "
                 "admits it, shown as `queued: <reason>`. Empty: no queue.",
        rules=[_name_rule("LocalQueue")])
    priority_class: str = setting(
        "", help="PriorityClass of every pod the run creates (and, with a queue, Kueue's "
                 "WorkloadPriorityClass of the same name). Empty: the cluster's default.",
        rules=[_name_rule("PriorityClass")])
    gang: str = setting(
        "", help="Gang scheduling of TFJobs through the training operator's "
                 "`runPolicy.schedulingPolicy` (`minAvailable`: every replica): `volcano` or "
                 "`scheduler-plugins`, whichever the operator runs with "
                 "(`--gang-scheduler-name`). Empty: none.",
        rules=[lambda name, value: None if value in GANG_SCHEDULERS else (
            f"unknown gang scheduler {value!r}; choose volcano or scheduler-plugins (the "
            "training operator's --gang-scheduler-name), or leave gang empty")])
    gang_scheduler_name: str = setting(
        "", help="The pods' `schedulerName` when gang scheduling: empty for the usual one "
                 "(`volcano`; `scheduler-plugins-scheduler`, the name scheduler-plugins' Helm "
                 "chart gives it).",
        rules=[_name_rule("scheduler", label=False)])
    gang_queue: str = setting(
        "", help="Volcano queue of gang-scheduled TFJobs (`schedulingPolicy.queue`); empty: "
                 "Volcano's `default`.",
        rules=[_name_rule("Volcano queue", label=False)])
    gang_timeout_seconds: int = setting(
        0, help="scheduler-plugins: seconds a gang may wait for all its pods to fit "
                "(`schedulingPolicy.scheduleTimeoutSeconds`); 0: the scheduler's default.",
        rules=[not_negative])
    start_deadline_minutes: int = setting(
        60, help="Minutes a job may be held suspended by its Kueue queue, summed over each "
                 "time it is queued (again after a preemption or eviction), before the step "
                 "deletes it and fails; that wait does not count against the job's run time. "
                 "Only Kueue's suspension counts: once admitted (or with no queue) a job whose "
                 "pods wait unscheduled, a Volcano gang's PodGroup Pending included, is "
                 "running and counts against its run time. 0: wait as long as Kueue holds it.",
        rules=[not_negative])

    def cross_problems(self) -> list[str]:
        problems = []
        if self.gang_queue and self.gang != "volcano":
            problems.append("gang_queue names a Volcano queue, but gang is not `volcano`: set "
                            "gang to volcano, or drop gang_queue (a Kueue queue is `queue`)")
        if self.gang_scheduler_name and not self.gang:
            problems.append("gang_scheduler_name is for gang scheduling, but gang is empty: set "
                            "gang, or drop gang_scheduler_name")
        if self.gang_timeout_seconds and self.gang != "scheduler-plugins":
            problems.append("gang_timeout_seconds is scheduler-plugins' schedule timeout, but "
                            "gang is not `scheduler-plugins`: set gang to scheduler-plugins, or "
                            "drop gang_timeout_seconds")
        return problems

    @property
    def start_deadline_seconds(self) -> float:
        """The runner's start deadline (0: none)."""
        return 60.0 * self.start_deadline_minutes

    @property
    def scheduler_name(self) -> str:
        """The pods' ``schedulerName``: the gang scheduler's, or empty (the default)."""
        if not self.gang:
            return ""
        return self.gang_scheduler_name or DEFAULT_SCHEDULER_NAMES[self.gang]

    @property
    def any(self) -> bool:
        return bool(self.queue or self.priority_class or self.gang)

    def job_labels(self) -> dict[str, str]:
        """The labels Kueue reads on a job (TFJob or batch Job)."""
        if not self.queue:
            return {}
        labels = {KUEUE_QUEUE_LABEL: self.queue}
        if self.priority_class:
            labels[KUEUE_PRIORITY_LABEL] = self.priority_class
        return labels
