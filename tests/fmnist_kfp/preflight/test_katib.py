"""Whether Katib watches TFJobs (fmnist_kfp.preflight.katib): katib-controller started before
the TFJob CRD was created is named with the restart as the fix (kubeflow/katib v0.19.0
pkg/controller.v1beta1/trial/trial_controller.go lines 103-127); what RBAC hides is a note.
The CRD's ``creationTimestamp`` is the real API server's (tests/fmnist_kfp/preflight/
on_the_api_server.py); katib-controller's start is written against it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.fmnist_kfp.preflight.cluster import KATIB_POD, RESTART, _rows, preflight


def _shown(moment) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def test_katib_started_before_the_tfjob_crd_is_named_with_the_restart(kubeflow, capsys):
    """The rule (kubeflow/katib v0.19.0 trial_controller.go lines 103-127): the TFJob watch is
    set up only if the CRD is mapped when katib-controller starts. A CRD created after the
    controller container started fails preflight with the restart as the fix."""
    cluster, kfp = kubeflow
    created = cluster.crd_created()
    cluster.katib_started(created - timedelta(minutes=20))
    assert preflight(cluster, kfp) == 1
    (row,) = _rows(capsys.readouterr().out, "Katib watches TFJobs")
    assert row.startswith("MISSING")
    assert (f"katib-controller pod {KATIB_POD[2]} started "
            f"{_shown(created - timedelta(minutes=20))}, before the TFJob CRD was created "
            f"({_shown(created)}): it is not watching TFJobs") in row
    assert f"fix: {RESTART}" in row


def test_a_katib_controller_restarted_after_the_crd_watches_it(kubeflow, capsys):
    """A container restart re-runs katib-controller's setup (its watches with it): the
    container's start counts, not the pod's."""
    cluster, kfp = kubeflow
    created = cluster.crd_created()
    cluster.katib_started(created - timedelta(minutes=90), created + timedelta(minutes=10))
    assert preflight(cluster, kfp) == 0
    (row,) = _rows(capsys.readouterr().out, "Katib watches TFJobs")
    assert row.startswith("ok") and (f"started {_shown(created + timedelta(minutes=10))}, "
                                     "after the TFJob CRD") in row
    cluster.katib_started(created - timedelta(minutes=90), created - timedelta(minutes=10))
    assert preflight(cluster, kfp) == 1


@pytest.mark.parametrize(("denied", "what"), [
    (("", "pods"), "cannot list pods in kubeflow (HTTP 403 Forbidden)"),
    (("apiextensions.k8s.io", "customresourcedefinitions"),
     "cannot read the CRD tfjobs.kubeflow.org (HTTP 403 Forbidden)"),
])
def test_when_rbac_hides_the_katib_check_it_says_so_and_does_not_fail(kubeflow, capsys, denied,
                                                                      what):
    """Run by a user the real authorizer refuses that one read (and nothing else)."""
    cluster, kfp = kubeflow
    cluster.katib_started(cluster.crd_created() - timedelta(minutes=20))  # would fail, readable
    cluster.run_as_one_who_may_not(denied)
    assert preflight(cluster, kfp) == 0, capsys.readouterr().out
    (row,) = _rows(capsys.readouterr().out, "Katib watches TFJobs")
    assert row.startswith("note") and f"could not check: {what}" in row
    assert RESTART in row


def test_the_katib_check_applies_only_when_tfjobs_and_katib_are_served(kubeflow, capsys):
    cluster, kfp = kubeflow
    cluster.katib_started(cluster.crd_created() - timedelta(minutes=20))  # would fail, checked
    cluster.uninstall_crd("experiments.kubeflow.org")
    preflight(cluster, kfp)
    assert not _rows(capsys.readouterr().out, "Katib watches TFJobs")
