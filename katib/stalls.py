"""Katib trials that never progress, and the likely cause, for the launcher's log and errors.

Katib's trial controller watches the job kinds of its ``trialResources`` only if their CRDs are
installed when katib-controller starts: for a kind without a REST mapping it logs "Job watch
error. CRD might be missing. Please install CRD and restart katib-controller" and skips the
watch. Kubeflow 1.11's and 26.03's example installs leave Training Operator v1 out, so whoever
installs it after Katib gets a katib-controller that still creates trial TFJobs but never hears
of them again: a Trial is marked Running as soon as its job exists and is reconciled again only
when the Trial itself changes. It stays Running after its TFJob has finished, and the
Experiment never ends.

:class:`StallWatch` follows every trial the Experiment lists as pending or running
(``status.pendingTrialList``/``runningTrialList``). A trial listed so for ``stall_seconds`` is
examined through its TFJob, which Katib names after the trial:

* the TFJob **finished** and, ``FINISHED_GRACE_SECONDS`` later, Katib still counts the trial as
  running: katib-controller is not watching TFJobs (a watched job's end reaches the Trial
  within seconds: while its metrics are missing the trial is requeued every second);
* **no TFJob**: katib-controller never created it;
* a TFJob that **never ran** (no Running condition yet): its pods do not start;
* a TFJob **queued** (``runPolicy.suspend``: Kueue holds it until its ClusterQueue admits it,
  see :mod:`fmnist_kfp.kubernetes.workload`): it waits for quota, and says where to look;
* a TFJob that runs or ran (and restarts): the trial is training; nothing to say.

Each finding is printed once (again only when its cause changes); :meth:`StallWatch.summary`
names them for the step's failure message. The TFJob is read for the diagnosis only: an error
reading it is part of the finding, never raised, so it cannot fail the step or clean anything
up.

upstream: docs/upstream.md#katib, #kubeflow-manifests
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fmnist_kfp.kubernetes.api_errors import api_message, api_status
from fmnist_kfp.settings.scheduling import KUEUE_QUEUE_LABEL

# Ten minutes pending, or running without a running TFJob, is held up: pods are scheduled and
# images pulled well within that (the trainer's image once per node). A trial that trains
# longer is not reported: its TFJob runs.
STALL_SECONDS = 600.0
FINISHED_GRACE_SECONDS = 60.0
KATIB_NAMESPACE = "kubeflow"  # where Kubeflow's and Katib's manifests install katib-controller
RESTART = f"kubectl rollout restart deployment/katib-controller -n {KATIB_NAMESPACE}"
NOT_WATCHING = ("katib-controller is not watching TFJobs: it started before the TFJob CRD "
                "existed (Training Operator v1 installed after Katib) and only logged \"Job "
                "watch error. CRD might be missing. Please install CRD and restart "
                f"katib-controller\". Fix: {RESTART}, and the stuck trials finish; "
                "`fmnist-kfp preflight` checks for this")
# What the step's failure says of each kind of finding, once for all the trials of that kind.
_SUMMARY = {
    "finished": "their TFJobs finished, but Katib still counts them as running: "
                "katib-controller is most likely not watching TFJobs (Training Operator v1 "
                f"installed after Katib); fix: {RESTART}",
    "absent": "their TFJobs were never created: is Training Operator v1 installed (kubectl get "
              f"crd tfjobs.kubeflow.org)? If it was installed after Katib: {RESTART}",
    "gone": "their TFJobs were deleted while Katib counts them as running",
    "not running": "their TFJobs never started running: their pods are likely Pending "
                   "(kubectl describe pods -l training.kubeflow.org/job-name=<trial> says why)",
    "queued": "their TFJobs wait in a Kueue queue that has no quota for them yet (kubectl get "
              "workloads -n <namespace> says why): raise the ClusterQueue's quota, lower "
              "tuning.parallel_trials, or raise tuning.trial_minutes",
    "unreadable": "their TFJobs could not be read; if they finished, katib-controller is most "
                  f"likely not watching TFJobs; fix: {RESTART}",
}


def _true(conditions: list[dict], kind: str) -> dict | None:
    return next((c for c in conditions if c.get("type") == kind and c.get("status") == "True"),
                None)


@dataclass
class _Trial:
    listed: str  # "pending" or "running", as the Experiment lists it
    since: float  # when it was first listed so
    finished_seen: float | None = None  # when its TFJob was first seen finished
    kind: str = ""  # what the last finding found ("finished", "absent", ...); empty: none
    cause: str = ""  # the last finding, in words


@dataclass
class StallWatch:
    """``read_tfjob(name)``: the TFJob of that name in ``namespace`` as a dict, None when the
    API server answers 404 (anything else raises). ``say`` prints a line."""

    namespace: str
    read_tfjob: Callable[[str], dict | None]
    clock: Callable[[], float]
    say: Callable[[str], None]
    stall_seconds: float = STALL_SECONDS
    trials: dict[str, _Trial] = field(default_factory=dict)

    def update(self, status: Any) -> None:
        """Takes one read of the Experiment's status (a ``V1beta1ExperimentStatus`` or None)."""
        now = self.clock()
        listed = {name: "pending" for name in getattr(status, "pending_trial_list", None) or []}
        listed.update({name: "running"
                       for name in getattr(status, "running_trial_list", None) or []})
        for name in list(self.trials):
            if name not in listed:  # finished (or gone): Katib saw it through
                del self.trials[name]
        for name, how in listed.items():
            known = self.trials.get(name)
            if known is None or known.listed != how:
                self.trials[name] = _Trial(how, now)
        for name, known in sorted(self.trials.items()):
            if now - known.since >= self.stall_seconds:
                self._examine(name, known, now)

    def _examine(self, name: str, known: _Trial, now: float) -> None:
        where = f"TFJob {self.namespace}/{name}"
        listed = f"{known.listed} for {(now - known.since) / 60:.0f} min"
        try:
            job = self.read_tfjob(name)
        except Exception as error:
            read = api_message(error) if api_status(error) else f"{type(error).__name__}: {error}"
            self._report(name, known, "unreadable",
                         f"{listed}; its {where} could not be read ({read}). If it has "
                         f"finished, {NOT_WATCHING}")
            return
        if job is None:
            known.finished_seen = None
            if known.listed == "running":  # Katib created it, then it went
                self._report(name, known, "gone",
                             f"{listed}, but its {where} no longer exists (deleted by hand?); "
                             f"Katib does not recreate it: kubectl delete trial -n "
                             f"{self.namespace} {name} lets the search go on without it")
                return
            self._report(name, known, "absent",
                         f"{listed}, and its {where} was never created: katib-controller could "
                         "not create it. Is Training Operator v1 installed (kubectl get crd "
                         "tfjobs.kubeflow.org)? If it was installed after Katib: "
                         f"{RESTART}. katib-controller's log says why (kubectl logs -n "
                         f"{KATIB_NAMESPACE} deployment/katib-controller)")
            return
        conditions = (job.get("status") or {}).get("conditions") or []
        ended = _true(conditions, "Failed") or _true(conditions, "Succeeded")
        if ended is not None:
            known.finished_seen = now if known.finished_seen is None else known.finished_seen
            if now - known.finished_seen < FINISHED_GRACE_SECONDS:
                return  # Katib may be about to record it
            outcome = ended["type"]
            # A Failed TFJob reaches a watching controller at once; a Succeeded one waits for
            # its metrics (requeued every second) should the collector not have reported.
            likely, also = ("Most likely ", f" (Less likely: its metrics collector never "
                                            f"reported; kubectl describe trial -n "
                                            f"{self.namespace} {name}.)") \
                if outcome == "Succeeded" else ("", "")
            self._report(name, known, "finished",
                         f"its {where} {outcome.lower()}, but Katib still counts the trial as "
                         f"{known.listed} {(now - known.finished_seen) / 60:.0f} min later. "
                         f"{likely}{NOT_WATCHING}.{also}")
            return
        known.finished_seen = None
        if ((job.get("spec") or {}).get("runPolicy") or {}).get("suspend"):
            queue = ((job.get("metadata") or {}).get("labels") or {}).get(
                KUEUE_QUEUE_LABEL, "")
            uid = (job.get("metadata") or {}).get("uid", "<uid>")
            self._report(name, known, "queued",
                         f"{listed}, and its {where} is queued: suspended until Kueue admits it"
                         + (f" to LocalQueue {queue}" if queue else "") + " (kubectl get "
                         f"workloads -n {self.namespace} -l kueue.x-k8s.io/job-uid={uid} says "
                         "why)")
            return
        if any(c.get("type") in ("Running", "Restarting") for c in conditions):
            # It runs, or ran and restarts (Restarting replaces Running: kubeflow/trainer
            # v1.9.2 pkg/util/status.go lines 126-135); whatever held it up has passed.
            known.kind = known.cause = ""
            return
        state = conditions[-1].get("type", "") if conditions else "no status yet"
        self._report(name, known, "not running",
                     f"{listed}, and its {where} never started running ({state}): its pods "
                     f"are likely Pending (kubectl describe pods -n {self.namespace} -l "
                     f"training.kubeflow.org/job-name={name} says why: not enough CPU, memory "
                     "or GPUs on any node, an image that cannot be pulled, a claim that cannot "
                     "be mounted)")

    def _report(self, name: str, known: _Trial, kind: str, cause: str) -> None:
        """Keeps the finding; prints it when it is new (the same finding later only ages)."""
        new = kind != known.kind
        known.kind, known.cause = kind, cause
        if new:
            self.say(f"trial {name} is not progressing: {cause}")

    def summary(self) -> str:
        """``trials that never progressed: <names> (<finding and fix>); ...``, one group per
        kind of finding, or empty."""
        kinds: dict[str, list[str]] = {}
        for name, known in sorted(self.trials.items()):
            if known.kind:
                kinds.setdefault(known.kind, []).append(name)
        if not kinds:
            return ""
        return "trials that never progressed: " + "; ".join(
            f"{', '.join(names)} ({_SUMMARY[kind]})" for kind, names in kinds.items())
