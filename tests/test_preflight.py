"""``fmnist-kfp preflight`` against a stand-in cluster (the API server and KServe stand-in with
RBAC evaluated from the stored Roles, plus the KFP API stand-in) set up with the repository's
own manifests: ready when every piece is there; each piece taken away, one at a time, is named
and makes it exit non-zero."""

from __future__ import annotations

import pytest

from fmnist.app.cli import main as cli_main
from fmnist.app.preflight import PERMISSIONS
from tests.kfp_standin import KfpStandIn
from tests.kserve_standin import KServeStandIn
from tests.kubeflow_roles import kubeflow_profile
from tests.setup_manifests import build
from tests.test_cluster_client import HEALTHZ_2_5

NS = "kubeflow"


def ready_cluster(standin: KServeStandIn) -> None:
    """Standalone KFP in ``kubeflow`` after the README's setup steps."""
    for base in ("pvc", "standalone-rbac", "serving-credentials", "serving-access"):
        for obj in build(base, namespace=NS):
            standin.put(obj)
    claim = standin.objects[("PersistentVolumeClaim", NS, "fmnist-data")]
    claim["status"] = {"phase": "Bound", "accessModes": ["ReadWriteMany"]}


@pytest.fixture
def cluster(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("FMNIST_CREDENTIALS_SECRET", raising=False)
    monkeypatch.delenv("FMNIST_PVC_NAME", raising=False)
    with KServeStandIn(rbac=True) as standin, KfpStandIn() as kfp:
        ready_cluster(standin)
        yield standin, kfp


def preflight(standin, kfp, *extra) -> int:
    return cli_main(["preflight", "--host", kfp.url, "--kubeconfig",
                     str(standin.kubeconfig(NS)), *extra])


def missing_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("MISSING")]


def test_a_ready_cluster_passes(cluster, capsys):
    standin, kfp = cluster
    assert preflight(standin, kfp) == 0, capsys.readouterr().out
    output = capsys.readouterr().out
    assert "ready for a first run" in output and not missing_lines(output)
    assert "TFJob (Training Operator v1)" in output and "served at v1" in output
    assert "KServe default mode" in output and "Serverless" in output
    # Permissions are asked as the steps' ServiceAccount.
    assert set(standin.impersonated) == {"system:serviceaccount:kubeflow:pipeline-runner"}
    assert len(standin.impersonated) == len(PERMISSIONS)


def _drop_permission(standin, verb, group, resource):
    role = standin.objects[("Role", NS, "fmnist-pipeline-runner")]
    rules = []
    for rule in role["rules"]:
        for name in rule["resources"]:
            single = {**rule, "resources": [name]}
            if group in rule["apiGroups"] and name == resource:
                single["verbs"] = [v for v in rule["verbs"] if v != verb]
            rules.append(single)
    role["rules"] = rules


PIECES = {
    "kfp-backend": ("KFP backend", lambda s, k: setattr(k, "healthz", HEALTHZ_2_5)),
    "tfjob-crd": ("TFJob", lambda s, k: s.served.discard(("kubeflow.org", "v1", "tfjobs"))),
    "experiment-crd": ("Katib Experiment", lambda s, k: s.served.discard(
        ("kubeflow.org", "v1beta1", "experiments"))),
    "trial-crd": ("Katib Trial", lambda s, k: s.served.discard(
        ("kubeflow.org", "v1beta1", "trials"))),
    "inferenceservice-crd": ("KServe InferenceService", lambda s, k: s.served.discard(
        ("serving.kserve.io", "v1beta1", "inferenceservices"))),
    "servingruntime-crd": ("KServe ServingRuntime", lambda s, k: s.served.discard(
        ("serving.kserve.io", "v1alpha1", "servingruntimes"))),
    "pvc": ("PVC kubeflow/fmnist-data", lambda s, k: s.objects.pop(
        ("PersistentVolumeClaim", NS, "fmnist-data"))),
    "pvc-rwo": ("PVC kubeflow/fmnist-data", lambda s, k: s.objects[
        ("PersistentVolumeClaim", NS, "fmnist-data")]["spec"].update(
        accessModes=["ReadWriteOnce"])),
    "serving-account": ("serving credentials", lambda s, k: s.objects.pop(
        ("ServiceAccount", NS, "fmnist-serving"))),
    "serving-secret": ("serving credentials", lambda s, k: s.objects.pop(
        ("Secret", NS, "fmnist-kfp-object-store"))),
    "serving-endpoint": ("serving credentials", lambda s, k: s.objects[
        ("Secret", NS, "fmnist-kfp-object-store")]["metadata"]["annotations"].pop(
        "serving.kserve.io/s3-endpoint")),
    "istio-policy": ("Istio policy", lambda s, k: s.objects.pop(
        ("AuthorizationPolicy", NS, "fmnist-serving-in-cluster"))),
    **{f"may-{verb}-{resource}{'-' + sub if sub else ''}": (
        f"may {verb} {resource}{'/' + sub if sub else ''}",
        (lambda v, g, r: lambda s, k: _drop_permission(s, v, g, r))(
            verb, group, f"{resource}/{sub}" if sub else resource))
       for verb, group, resource, sub, _ in PERMISSIONS},
}


@pytest.mark.parametrize("piece", list(PIECES))
def test_each_missing_piece_is_named_and_fails(cluster, capsys, piece):
    standin, kfp = cluster
    name, take_away = PIECES[piece]
    take_away(standin, kfp)
    assert preflight(standin, kfp) == 1
    output = capsys.readouterr().out
    missing = missing_lines(output)
    assert len(missing) == 1 and name in missing[0], output
    assert "NOT ready: 1 missing" in output
    fix = output.splitlines()[output.splitlines().index(missing[0]) + 1]
    assert "fix:" in fix


def test_a_configured_credentials_secret_is_checked(cluster, capsys):
    standin, kfp = cluster
    assert preflight(standin, kfp, "--credentials-secret", "s3-creds") == 1
    output = capsys.readouterr().out
    (line,) = missing_lines(output)
    assert "credentials Secret kubeflow/s3-creds" in line and "CreateContainerConfigError" in line
    standin.put({"apiVersion": "v1", "kind": "Secret", "metadata": {
        "name": "s3-creds", "namespace": NS}, "data": {"AWS_ACCESS_KEY_ID": "eA==",
                                                      "AWS_SECRET_ACCESS_KEY": "eA=="}})
    assert preflight(standin, kfp, "--credentials-secret", "s3-creds") == 0


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


@pytest.mark.parametrize("kubeflow", ["v1.11.0", "26.03"])
def test_on_multi_user_kubeflow_the_profiles_roles_grant_every_permission(kubeflow, monkeypatch,
                                                                          tmp_path, capsys):
    """The README says multi-user Kubeflow needs no RBAC step: the profile controller binds the
    profile's ``default-editor`` to ``kubeflow-edit`` (kubeflow/kubeflow v1.10.0
    components/profile-controller/controllers/profile_controller.go L209-213, 592-632; Kubeflow
    1.11 and 26.03 run that controller), which aggregates the roles each component installs.
    With those roles as kubeflow/manifests ships them (tests/kubeflow_roles/, extracted at the
    tag) and no Role of ours, every permission the steps use is granted."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("FMNIST_CREDENTIALS_SECRET", raising=False)
    monkeypatch.delenv("FMNIST_PVC_NAME", raising=False)
    with KServeStandIn(rbac=True) as standin, KfpStandIn() as kfp:
        kubeflow_profile(standin, "team-a", kubeflow)
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
        # Without the aggregation (kubeflow-edit's own rules are empty) nothing is granted.
        edit = standin.objects[("ClusterRole", "", "kubeflow-edit")]
        del edit["aggregationRule"]
        assert cli_main(["preflight", "--host", kfp.url, "--namespace", "team-a",
                         "--kubeconfig", str(standin.kubeconfig("team-a"))]) == 1
        assert len(missing_lines(capsys.readouterr().out)) == len(PERMISSIONS)
