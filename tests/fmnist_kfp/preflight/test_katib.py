"""Whether Katib watches TFJobs (fmnist_kfp.preflight.katib): katib-controller started before
the TFJob CRD was created is named with the restart as the fix (kubeflow/katib v0.19.0
pkg/controller.v1beta1/trial/trial_controller.go lines 103-127); what RBAC hides is a note."""

from __future__ import annotations

import pytest

from tests.fmnist_kfp.preflight.cluster import (
    KATIB_POD,
    RESTART,
    _crd_created,
    _rows,
    katib_controller_pod,
    preflight,
)


def test_katib_started_before_the_tfjob_crd_is_named_with_the_restart(cluster, capsys):
    """The rule (kubeflow/katib v0.19.0 trial_controller.go lines 103-127): the TFJob watch is
    set up only if the CRD is mapped when katib-controller starts. A CRD created after the
    controller container started fails preflight with the restart as the fix."""
    standin, kfp = cluster
    _crd_created("2026-01-01T09:30:00Z")(standin, kfp)
    assert preflight(standin, kfp) == 1
    (row,) = _rows(capsys.readouterr().out, "Katib watches TFJobs")
    assert row.startswith("MISSING")
    assert (f"katib-controller pod {KATIB_POD[2]} started 2026-01-01 09:10:00 UTC, before the "
            "TFJob CRD was created (2026-01-01 09:30:00 UTC): it is not watching TFJobs") in row
    assert f"fix: {RESTART}" in row


def test_a_katib_controller_restarted_after_the_crd_watches_it(cluster, capsys):
    """A container restart re-runs katib-controller's setup (its watches with it): the
    container's start counts, not the pod's."""
    standin, kfp = cluster
    standin.objects[KATIB_POD].update(katib_controller_pod(
        "2026-01-01T08:00:00Z", container_started="2026-01-01T09:20:00Z"))
    assert preflight(standin, kfp) == 0
    (row,) = _rows(capsys.readouterr().out, "Katib watches TFJobs")
    assert row.startswith("ok") and "started 2026-01-01 09:20:00 UTC, after the TFJob CRD" in row
    _crd_created("2026-01-01T09:30:00Z")(standin, kfp)
    assert preflight(standin, kfp) == 1


@pytest.mark.parametrize(("path", "what"), [
    ("/api/v1/namespaces/kubeflow/pods", "cannot list pods in kubeflow (HTTP 403 Forbidden)"),
    ("/customresourcedefinitions/tfjobs.kubeflow.org",
     "cannot read the CRD tfjobs.kubeflow.org (HTTP 403 Forbidden)"),
])
def test_when_rbac_hides_the_katib_check_it_says_so_and_does_not_fail(cluster, capsys, path,
                                                                      what):
    from tests.standins.apiserver import Fault

    standin, kfp = cluster
    _crd_created("2026-01-01T09:30:00Z")(standin, kfp)  # would fail, were it readable
    standin.faults.append(Fault("GET", path, status=403, times=10))
    assert preflight(standin, kfp) == 0
    (row,) = _rows(capsys.readouterr().out, "Katib watches TFJobs")
    assert row.startswith("note") and f"could not check: {what}" in row
    assert RESTART in row


def test_the_katib_check_applies_only_when_tfjobs_and_katib_are_served(cluster, capsys):
    standin, kfp = cluster
    _crd_created("2026-01-01T09:30:00Z")(standin, kfp)
    standin.served.discard(("kubeflow.org", "v1beta1", "experiments"))
    preflight(standin, kfp)
    assert not _rows(capsys.readouterr().out, "Katib watches TFJobs")
