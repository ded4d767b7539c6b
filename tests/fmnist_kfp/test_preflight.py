"""``fmnist-kfp preflight`` against a stand-in cluster (the API server and KServe stand-in with
RBAC evaluated from the stored Roles, plus the KFP API stand-in) set up with the repository's
own manifests: ready when every piece is there; each piece taken away, one at a time, is named
and makes it exit non-zero."""

from __future__ import annotations

import pytest

from fmnist_kfp.cli import main as cli_main
from fmnist_kfp.preflight import PERMISSIONS
from tests.fmnist_kfp.test_cluster_client import HEALTHZ_2_5
from tests.kubeflow_roles import kubeflow_profile
from tests.setup_manifests import build
from tests.standins.kfp import KfpStandIn
from tests.standins.kserve import KServeStandIn

NS = "kubeflow"
TFJOB_CRD = ("CustomResourceDefinition", "", "tfjobs.kubeflow.org")
KATIB_POD = ("Pod", NS, "katib-controller-6c8d9f7b5-x2k4p")
RESTART = "kubectl rollout restart deployment/katib-controller -n kubeflow"
# katib-config as Kubeflow installs it: kubeflow/manifests v1.11.0 applications/katib/upstream/
# installs/katib-cert-manager/katib-config.yaml lines 1-13 (= kubeflow/katib v0.19.0
# manifests/v1beta1/installs/katib-cert-manager/katib-config.yaml).
KATIB_CONFIG = """apiVersion: config.kubeflow.org/v1beta1
kind: KatibConfig
init:
  controller:
    webhookPort: 8443
    trialResources:
      - TrainJob.v1alpha1.trainer.kubeflow.org
      - Job.v1.batch
      - TFJob.v1.kubeflow.org
      - PyTorchJob.v1.kubeflow.org
      - MPIJob.v1.kubeflow.org
      - XGBoostJob.v1.kubeflow.org
"""


def katib_controller_pod(started: str, container_started: str | None = None) -> dict:
    """A running katib-controller pod as its Deployment makes it (kubeflow/katib v0.19.0
    manifests/v1beta1/components/controller/controller.yaml lines 14-25: the label
    katib.kubeflow.org/component=controller, container katib-controller)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": KATIB_POD[2], "namespace": NS,
                         "labels": {"katib.kubeflow.org/component": "controller",
                                    "sidecar.istio.io/inject": "false",
                                    "pod-template-hash": "6c8d9f7b5"}},
            "spec": {"containers": [{"name": "katib-controller",
                                     "image": "ghcr.io/kubeflow/katib/katib-controller:v0.19.0"}]},
            "status": {"phase": "Running", "startTime": started, "containerStatuses": [{
                "name": "katib-controller", "ready": True, "restartCount": 0,
                "image": "ghcr.io/kubeflow/katib/katib-controller:v0.19.0", "imageID": "",
                "state": {"running": {"startedAt": container_started or started}}}]}}


def ready_cluster(standin: KServeStandIn) -> None:
    """Standalone KFP in ``kubeflow`` after the README's setup steps: Training Operator v1
    installed before Katib (its CRD older than katib-controller's start)."""
    for base in ("pvc", "standalone-rbac", "serving-credentials", "serving-access"):
        for obj in build(base, namespace=NS):
            standin.put(obj)
    claim = standin.objects[("PersistentVolumeClaim", NS, "fmnist-data")]
    claim["status"] = {"phase": "Bound", "accessModes": ["ReadWriteMany"]}
    standin.put({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                 "metadata": {"name": "tfjobs.kubeflow.org"}})
    standin.objects[TFJOB_CRD]["metadata"]["creationTimestamp"] = "2026-01-01T09:00:00Z"
    standin.put(katib_controller_pod("2026-01-01T09:10:00Z"))
    standin.put({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "katib-config", "namespace": NS},
                 "data": {"katib-config.yaml": KATIB_CONFIG}})


def _crd_created(at: str):
    return lambda s, k: s.objects[TFJOB_CRD]["metadata"].update(creationTimestamp=at)


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
    # Training Operator v1 installed after Katib: katib-controller skipped the TFJob watch
    # (kubeflow/katib v0.19.0 pkg/controller.v1beta1/trial/trial_controller.go lines 103-127).
    "katib-started-before-tfjob-crd": ("Katib watches TFJobs",
                                       _crd_created("2026-01-01T09:10:01Z")),
    # katib-config without TFJob: never watched (cmd/katib-controller/v1beta1/main.go 80-85).
    "katib-config-without-tfjob": ("Katib watches TFJobs", lambda s, k: s.objects[
        ("ConfigMap", NS, "katib-config")]["data"].update(
        {"katib-config.yaml": KATIB_CONFIG.replace("      - TFJob.v1.kubeflow.org\n", "")})),
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


def _rows(output: str, check: str) -> list[str]:
    lines = output.splitlines()
    return [line + "\n" + (lines[i + 1] if i + 1 < len(lines) else "")
            for i, line in enumerate(lines) if check in line]


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
