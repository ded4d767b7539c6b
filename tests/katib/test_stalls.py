"""katib/stalls.py on its own: what a trial that never progresses is said to be, read from the
trial's TFJob at given times (the launcher's tests run the same through the Katib stand-in)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kubernetes.client.exceptions import ApiException

from fmnist_kfp.katib.stalls import FINISHED_GRACE_SECONDS, RESTART, STALL_SECONDS, StallWatch
from tests.katib.test_katib_launcher import _tfjob

TRIAL = "fmnist-tune-a1b2c3d4"
START = 10_000.0  # a clock far from zero, so that times are told apart from durations


def _watch(tfjob):
    """A watch on namespace team-a whose TFJob reads return (or raise) ``tfjob()``."""
    said: list[str] = []
    now = [START]
    watch = StallWatch("team-a", read_tfjob=lambda name: tfjob(), clock=lambda: now[0],
                       say=said.append)
    return watch, said, now


def _status(running=(), pending=()):
    return SimpleNamespace(running_trial_list=list(running), pending_trial_list=list(pending))


def test_minutes_are_counted_from_when_the_trial_was_first_listed():
    watch, said, now = _watch(lambda: None)
    watch.update(_status(pending=[TRIAL]))
    now[0] += STALL_SECONDS + 12 * 60
    watch.update(_status(pending=[TRIAL]))
    assert said == [f"trial {TRIAL} is not progressing: pending for 22 min, and its TFJob "
                    f"team-a/{TRIAL} was never created: katib-controller could not create it. "
                    "Is Training Operator v1 installed (kubectl get crd tfjobs.kubeflow.org)? "
                    f"If it was installed after Katib: {RESTART}. katib-controller's log says "
                    "why (kubectl logs -n kubeflow deployment/katib-controller)"]


def test_a_running_trial_whose_tfjob_was_deleted_is_named_gone():
    watch, said, now = _watch(lambda: None)
    watch.update(_status(running=[TRIAL]))
    now[0] += STALL_SECONDS
    watch.update(_status(running=[TRIAL]))
    assert said == [f"trial {TRIAL} is not progressing: running for 10 min, but its TFJob "
                    f"team-a/{TRIAL} no longer exists (deleted by hand?); Katib does not "
                    f"recreate it: kubectl delete trial -n team-a {TRIAL} lets the search go "
                    "on without it"]
    assert watch.summary() == (f"trials that never progressed: {TRIAL} (their TFJobs were "
                               "deleted while Katib counts them as running)")


@pytest.mark.parametrize("conditions", [("Created", "Running"), ("Created", "Restarting")])
def test_a_trial_whose_tfjob_runs_or_restarts_is_training(conditions):
    """Restarting replaces Running while a replica restarts (kubeflow/trainer v1.9.2
    pkg/util/status.go lines 126-135): the trial trains, nothing to say."""
    watch, said, now = _watch(lambda: _tfjob(TRIAL, *conditions))
    watch.update(_status(running=[TRIAL]))
    now[0] += STALL_SECONDS * 3
    watch.update(_status(running=[TRIAL]))
    assert said == [] and watch.summary() == ""


def test_a_finished_tfjob_is_named_only_after_the_grace_minute():
    watch, said, now = _watch(lambda: _tfjob(TRIAL, "Created", "Running", "Succeeded"))
    watch.update(_status(running=[TRIAL]))
    now[0] += STALL_SECONDS
    watch.update(_status(running=[TRIAL]))  # first seen finished
    now[0] += FINISHED_GRACE_SECONDS - 1
    watch.update(_status(running=[TRIAL]))
    assert said == []
    now[0] += 1
    watch.update(_status(running=[TRIAL]))
    assert len(said) == 1
    assert said[0].startswith(
        f"trial {TRIAL} is not progressing: its TFJob team-a/{TRIAL} succeeded, but Katib "
        "still counts the trial as running 1 min later. Most likely katib-controller is not "
        "watching TFJobs")
    assert said[0].endswith(f" (Less likely: its metrics collector never reported; kubectl "
                            f"describe trial -n team-a {TRIAL}.)")


def test_a_tfjob_seen_finished_then_absent_starts_its_grace_again():
    answers = [_tfjob(TRIAL, "Created", "Running", "Failed"), None,
               _tfjob(TRIAL, "Created", "Running", "Failed")]
    watch, said, now = _watch(lambda: answers.pop(0))
    watch.update(_status(pending=[TRIAL]))
    now[0] += STALL_SECONDS
    watch.update(_status(pending=[TRIAL]))  # finished, within grace
    now[0] += FINISHED_GRACE_SECONDS
    watch.update(_status(pending=[TRIAL]))  # absent
    now[0] += 1
    watch.update(_status(pending=[TRIAL]))  # finished again: a new grace minute
    assert [line.split(": ")[1].split(",")[0] for line in said] == ["pending for 11 min"]


@pytest.mark.parametrize(("error", "read"), [
    (ApiException(status=403, reason="Forbidden"), "HTTP 403 Forbidden)"),
    (ConnectionError("connection refused"), "ConnectionError: connection refused"),
])
def test_a_tfjob_that_cannot_be_read_says_why(error, read):
    def refuse():
        raise error

    watch, said, now = _watch(refuse)
    watch.update(_status(running=[TRIAL]))
    now[0] += STALL_SECONDS
    watch.update(_status(running=[TRIAL]))
    assert len(said) == 1
    assert f"running for 10 min; its TFJob team-a/{TRIAL} could not be read ({read}" in said[0]


def test_a_trial_whose_tfjob_kueue_holds_is_named_queued_with_where_to_look():
    """Kueue's webhook suspends a trial TFJob of a LocalQueue until admission (kueue v0.19.2
    jobframework/defaults.go lines 36-46, kubeflowjob_controller.go 50-56): the trial is
    queued for quota, not held up by its pods; once admitted and running, nothing to say."""
    job = _tfjob(TRIAL, "Created")
    job["metadata"].update(uid="u-1", labels={"kueue.x-k8s.io/queue-name": "team-a"})
    job["spec"] = {"runPolicy": {"suspend": True}}
    watch, said, now = _watch(lambda: job)
    watch.update(_status(running=[TRIAL]))
    now[0] += STALL_SECONDS
    watch.update(_status(running=[TRIAL]))
    assert said == [f"trial {TRIAL} is not progressing: running for 10 min, and its TFJob "
                    f"team-a/{TRIAL} is queued: suspended until Kueue admits it to LocalQueue "
                    "team-a (kubectl get workloads -n team-a -l kueue.x-k8s.io/job-uid=u-1 says "
                    "why)"]
    assert "wait in a Kueue queue that has no quota for them yet" in watch.summary()
    job["spec"]["runPolicy"]["suspend"] = False
    job["status"]["conditions"].append({"type": "Running", "status": "True"})
    now[0] += 60
    watch.update(_status(running=[TRIAL]))
    assert watch.summary() == ""
