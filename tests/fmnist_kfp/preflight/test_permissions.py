"""The permissions preflight asks as the pipeline's ServiceAccount
(fmnist_kfp.preflight.permissions): impersonation, standalone KFP's pipeline-runner and a
profile's default-editor on multi-user Kubeflow (its roles as kubeflow/manifests ships them),
and the TrainJob path's permissions beside the TFJob path's; on Kubeflow on a real API server
(tests/fmnist_kfp/preflight/on_the_api_server.py), whose authorizer answers."""

from __future__ import annotations

import pytest

from fmnist_kfp.cli import main as cli_main
from tests.fmnist_kfp.preflight.cluster import missing_lines, preflight
from tests.kubeflow_roles import kubeflow_profile
from tests.setup_manifests import build


def test_without_impersonation_it_says_whose_permissions_it_shows(kubeflow, capsys):
    """Run by a user the real authorizer lets do everything but impersonate."""
    cluster, kfp = kubeflow
    cluster.run_as_one_who_may_not(impersonate=False)
    assert preflight(cluster, kfp) == 1
    output = capsys.readouterr().out
    assert "you may not impersonate system:serviceaccount:kubeflow:pipeline-runner" in output
    assert "you may create tfjobs.kubeflow.org" in output


def test_multi_user_checks_the_profiles_default_editor(kubeflow, capsys):
    cluster, kfp = kubeflow
    preflight(cluster, kfp, "--namespace", "team-a")
    output = capsys.readouterr().out
    asked = [line for line in output.splitlines() if " may " in line and "kubectl" not in line]
    assert asked and all(" default-editor may " in line for line in asked), output
    assert "kubeflow-edit" in output  # the fix for multi-user names Kubeflow's role


# (Kubeflow tag, the run's training operator). "tfjob": the tag's example install with the
# Training Operator v1 installed on top from the same tag, as docs/first-run.md step 1 does
# (its overlay's roles with it; Trainer v2 still served, so ``auto`` picks TFJobs). "trainjob":
# the example install as it ships (Trainer v2, no TFJob CRD; ``auto`` picks TrainJobs), with
# manifests/trainer-runtime applied, as the page's TrainJob section does.
# Each tag with both paths is checked permission by permission in
# test_permissions_on_the_api_server.py; here preflight runs whole on the path each tag's
# docs take first.
PROFILES = [("v1.11.0", "tfjob"), ("26.03", "trainjob")]
SHAPE = {"tfjob": "kubeflow_and_trainer", "trainjob": "kubeflow_2603"}


@pytest.mark.work_unit("kubeflow_api_server")  # its shape's fixture, by getfixturevalue
@pytest.mark.parametrize(("kubeflow", "operator"), PROFILES)
def test_on_multi_user_kubeflow_the_profiles_roles_grant_every_permission(
        request, kubeflow, operator, capsys):
    """The README says multi-user Kubeflow needs no RBAC step: the profile controller binds the
    profile's ``default-editor`` to ``kubeflow-edit`` (kubeflow/kubeflow v1.10.0
    components/profile-controller/controllers/profile_controller.go L209-213, 592-632; Kubeflow
    1.11 and 26.03 run that controller), which aggregates the roles each component installs.
    With those roles as kubeflow/manifests ships them (tests/kubeflow_roles/, extracted at the
    tag: the example install's, plus the Training Operator overlay's where it is installed),
    aggregated by the controller manager's ClusterRole aggregation controller, and no Role of
    ours, preflight is green: every permission of the path ``operator`` (:data:`PROFILES`) is
    granted, the TFJob path's once the Training Operator is installed, the TrainJob path's on
    the stock install (kubeflow-trainer-edit). Without the aggregation, none is."""
    from fmnist_kfp.preflight import permissions_for

    cluster, kfp = request.getfixturevalue(SHAPE[operator])
    cluster.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    kubeflow_profile(cluster, "team-a", kubeflow, training_operator=operator == "tfjob")
    for base in ("pvc", "serving-credentials", "serving-access"):
        for obj in build(base, namespace="team-a"):
            cluster.put({**obj, "metadata": {**obj["metadata"], "namespace": "team-a"}})
    cluster.bind_claim("team-a", "fmnist-data")
    wanted = permissions_for(operator)
    cluster.until_granted("team-a", "default-editor", wanted)
    code = cli_main(["preflight", "--host", kfp.url, "--namespace", "team-a",
                     "--kubeconfig", str(cluster.kubeconfig("team-a"))])
    output = capsys.readouterr().out
    assert code == 0, output
    granted = [line for line in output.splitlines() if " default-editor may " in line]
    assert len(granted) == len(wanted) and all(line.startswith("ok") for line in granted)
    assert {"tfjob": "may create tfjobs.kubeflow.org",
            "trainjob": "may create trainjobs.trainer.kubeflow.org"}[operator] in output

    def without_aggregation(role: dict) -> None:
        del role["aggregationRule"]
        role["rules"] = []

    cluster.edit("rbac.authorization.k8s.io/v1", "ClusterRole", "kubeflow-edit", "",
                 without_aggregation)
    cluster.until_granted("team-a", "default-editor", wanted, granted=False)
    assert cli_main(["preflight", "--host", kfp.url, "--namespace", "team-a",
                     "--kubeconfig", str(cluster.kubeconfig("team-a"))]) == 1
    assert len(missing_lines(capsys.readouterr().out)) == len(wanted)


def test_the_trainjob_permissions_stand_in_for_the_tfjob_ones_only():
    """The TrainJob path drops the TFJob rows, adds the TrainJob rows, and keeps every other
    step's permissions as they are."""
    from fmnist_kfp.preflight import PERMISSIONS, TRAINJOB_PERMISSIONS, permissions_for

    trainjob = permissions_for("trainjob")
    assert {row[2] for row in trainjob} & {"tfjobs"} == set()
    assert [row for row in PERMISSIONS if row[2] != "tfjobs" and row[:4] not in {
        r[:4] for r in TRAINJOB_PERMISSIONS}] == [row for row in trainjob
                                                 if row not in TRAINJOB_PERMISSIONS]
    assert set(TRAINJOB_PERMISSIONS) <= set(trainjob)
    assert permissions_for("tfjob") == PERMISSIONS == permissions_for("auto")
