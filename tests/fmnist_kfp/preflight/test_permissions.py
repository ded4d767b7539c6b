"""The permissions preflight asks as the pipeline's ServiceAccount
(fmnist_kfp.preflight.permissions): impersonation, standalone KFP's pipeline-runner and a
profile's default-editor on multi-user Kubeflow (its roles as kubeflow/manifests ships them),
and the TrainJob path's permissions beside the TFJob path's."""

from __future__ import annotations

import pytest

from fmnist_kfp.cli import main as cli_main
from tests.fmnist_kfp.preflight.cluster import (
    apply_runtime,
    install_trainer_v2,
    missing_lines,
    preflight,
)
from tests.kubeflow_roles import kubeflow_profile
from tests.setup_manifests import build
from tests.standins.kfp import KfpStandIn
from tests.standins.kserve import KServeStandIn


def test_without_impersonation_it_says_whose_permissions_it_shows(cluster, capsys):
    standin, kfp = cluster
    standin.impersonation = False
    assert preflight(standin, kfp) == 1
    output = capsys.readouterr().out
    assert "you may not impersonate system:serviceaccount:kubeflow:pipeline-runner" in output
    assert "you may create tfjobs.kubeflow.org" in output


def test_multi_user_checks_the_profiles_default_editor(cluster, capsys):
    standin, kfp = cluster
    preflight(standin, kfp, "--namespace", "team-a")
    output = capsys.readouterr().out
    assert set(standin.impersonated) == {"system:serviceaccount:team-a:default-editor"}
    assert "kubeflow-edit" in output  # the fix for multi-user names Kubeflow's role


# (Kubeflow tag, the run's training operator). "tfjob": the tag's example install with the
# Training Operator v1 installed on top from the same tag, as docs/first-run.md step 1 does
# (its overlay's roles with it; Trainer v2 still served, so ``auto`` picks TFJobs). "trainjob":
# the example install as it ships (Trainer v2, no TFJob CRD; ``auto`` picks TrainJobs), with
# manifests/trainer-runtime applied, as the page's TrainJob section does.
PROFILES = [(kubeflow, operator) for kubeflow in ("v1.11.0", "26.03")
            for operator in ("tfjob", "trainjob")]


@pytest.mark.parametrize(("kubeflow", "operator"), PROFILES)
def test_on_multi_user_kubeflow_the_profiles_roles_grant_every_permission(
        kubeflow, operator, monkeypatch, tmp_path, capsys):
    """The README says multi-user Kubeflow needs no RBAC step: the profile controller binds the
    profile's ``default-editor`` to ``kubeflow-edit`` (kubeflow/kubeflow v1.10.0
    components/profile-controller/controllers/profile_controller.go L209-213, 592-632; Kubeflow
    1.11 and 26.03 run that controller), which aggregates the roles each component installs.
    With those roles as kubeflow/manifests ships them (tests/kubeflow_roles/, extracted at the
    tag: the example install's, plus the Training Operator overlay's where it is installed) and
    no Role of ours, every permission of the path ``operator`` (:data:`PROFILES`) is granted:
    the TFJob path's once the Training Operator is installed, the TrainJob path's on the stock
    install (kubeflow-trainer-edit)."""
    from fmnist_kfp.preflight import permissions_for

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("FMNIST_CREDENTIALS_SECRET", raising=False)
    monkeypatch.delenv("FMNIST_PVC_NAME", raising=False)
    with KServeStandIn(rbac=True) as standin, KfpStandIn() as kfp:
        kubeflow_profile(standin, "team-a", kubeflow, training_operator=operator == "tfjob")
        install_trainer_v2(standin, monkeypatch)  # the example install's Trainer v2
        if operator == "trainjob":
            standin.uninstall("training-operator")  # no TFJob CRD
            apply_runtime(standin)
        for base in ("pvc", "serving-credentials", "serving-access"):
            for obj in build(base, namespace="team-a"):
                standin.put(obj)
        claim = standin.objects[("PersistentVolumeClaim", "team-a", "fmnist-data")]
        claim["status"] = {"phase": "Bound", "accessModes": ["ReadWriteMany"]}
        code = cli_main(["preflight", "--host", kfp.url, "--namespace", "team-a",
                         "--kubeconfig", str(standin.kubeconfig("team-a"))])
        output = capsys.readouterr().out
        assert code == 0, output
        assert set(standin.impersonated) == {"system:serviceaccount:team-a:default-editor"}
        assert len(standin.impersonated) == len(permissions_for(operator))
        assert {"tfjob": "may create tfjobs.kubeflow.org",
                "trainjob": "may create trainjobs.trainer.kubeflow.org"}[operator] in output
        # Without the aggregation (kubeflow-edit's own rules are empty) nothing is granted.
        edit = standin.objects[("ClusterRole", "", "kubeflow-edit")]
        del edit["aggregationRule"]
        assert cli_main(["preflight", "--host", kfp.url, "--namespace", "team-a",
                         "--kubeconfig", str(standin.kubeconfig("team-a"))]) == 1
        assert len(missing_lines(capsys.readouterr().out)) == len(permissions_for(operator))


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
