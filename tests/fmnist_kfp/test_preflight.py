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
from tests.standins.apiserver import ADD_ONS
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
        f"may {verb} {resource}{'.' + group if group else ''}{'/' + sub if sub else ''}",
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


# -- scheduling (--scheduling: the run's kubernetes.scheduling; docs/scheduling.md) ----------

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
SCHEDULING = '{"queue": "fmnist", "priority_class": "fmnist-high", "gang": "volcano"}'
LOCAL_QUEUE = ("LocalQueue", NS, "fmnist")
VOLCANO_DEFAULT = ("Queue", "", "default")
OPERATOR = ("Deployment", NS, "training-operator")


def kueue_webhook(kind: str, body: dict) -> None:
    """Kueue's mutating webhook with the kubeflow.org/tfjob integration on: a TFJob labelled
    with a queue is suspended (kubernetes-sigs/kueue v0.19.2 pkg/controller/jobframework/
    base_webhook.go lines 69-82, defaults.go lines 36-46, utils.go lines 130-157;
    pkg/controller/jobs/kubeflow/kubeflowjob/kubeflowjob_controller.go lines 50-56). With the
    integration off (v0.19's default: config/components/manager/controller_manager_config.yaml
    line 55) the webhook is a no-op (jobframework/setup.go lines 108-111): no mutator."""
    labels = (body.get("metadata") or {}).get("labels") or {}
    if kind == "TFJob" and labels.get(QUEUE_LABEL):
        body["spec"].setdefault("runPolicy", {})["suspend"] = True


def training_operator(*flags: str) -> dict:
    """The training operator's Deployment as kubeflow/trainer v1.9.2 manifests/base/
    deployment.yaml lines 1-21 has it (``command: [/manager]``), with ``flags`` added the way
    its CI adds them (scripts/gha/setup-training-operator.sh lines 43-44, 50-51: into
    ``command`` after /manager)."""
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "training-operator", "namespace": NS,
                         "labels": {"control-plane": "kubeflow-training-operator"}},
            "spec": {"selector": {"matchLabels": {"control-plane": "kubeflow-training-operator"}},
                     "template": {"metadata": {"labels": {
                         "control-plane": "kubeflow-training-operator"}},
                         "spec": {"containers": [{
                             "name": "training-operator", "command": ["/manager", *flags],
                             "image": "ghcr.io/kubeflow/training-v1/training-operator"}]}}}}


def _set_status(standin, key, status: dict) -> None:
    standin.write_status(key, status)


def _local_queue_active(standin, status: str = "True", reason: str = "Ready",
                        message: str = "Can submit new workloads to localQueue") -> None:
    """The LocalQueue's Active condition as Kueue writes it (kueue v0.19.2
    pkg/controller/core/localqueue_controller.go lines 193-213)."""
    _set_status(standin, LOCAL_QUEUE, {"conditions": [
        {"type": "Active", "status": status, "reason": reason, "message": message,
         "lastTransitionTime": "2026-01-01T09:00:00Z"}], "pendingWorkloads": 0,
        "admittedWorkloads": 0})


def scheduling_cluster(standin) -> None:
    """Kueue (TFJob integration on) and Volcano installed, manifests/scheduling applied in
    the pipeline's namespace, Volcano's default queue Open (its scheduler creates it: volcano
    v1.15.1 pkg/scheduler/cache/cache.go lines 464-519), the training operator run with
    --gang-scheduler-name=volcano."""
    standin.install("kueue", "volcano")
    standin.mutators.append(kueue_webhook)
    for obj in build("scheduling"):
        if obj["kind"] == "LocalQueue":  # the only namespaced one: `kubectl apply -n`
            obj["metadata"]["namespace"] = NS
        standin.put(obj)
    _local_queue_active(standin)
    standin.put({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                 "metadata": {"name": "default"}, "spec": {"reclaimable": True, "weight": 1}})
    _set_status(standin, VOLCANO_DEFAULT, {"state": "Open"})
    standin.put(training_operator("--gang-scheduler-name=volcano"))


def _scheduling_rows(output: str) -> dict[str, str]:
    """The scheduling rows by check: the line, and the fix under it when there is one."""
    checks = ("Kueue", "PriorityClass", "Volcano", "scheduler-plugins",
              "training operator gang scheduling")
    rows = {}
    lines = output.splitlines()
    for index, line in enumerate(lines):
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0] in ("ok", "MISSING", "note") and parts[1].startswith(
                checks):
            name = parts[1].split("  ")[0].strip()
            after = lines[index + 1] if index + 1 < len(lines) else ""
            rows[name] = line + ("\n" + after if "fix:" in after else "")
    return rows


def test_a_cluster_set_up_for_the_scheduling_passes(cluster, capsys):
    standin, kfp = cluster
    scheduling_cluster(standin)
    assert preflight(standin, kfp, "--scheduling", SCHEDULING) == 0, capsys.readouterr().out
    rows = _scheduling_rows(capsys.readouterr().out)
    assert sorted(rows) == sorted([
        "Kueue", "Kueue LocalQueue kubeflow/fmnist", "Kueue manages TFJobs",
        "PriorityClass fmnist-high", "Kueue WorkloadPriorityClass fmnist-high",
        "Volcano PodGroup", "Volcano queue default", "training operator gang scheduling"])
    assert all(row.startswith("ok") for row in rows.values()), rows
    assert "served at v1beta2" in rows["Kueue"]
    assert "ClusterQueue fmnist, active" in rows["Kueue LocalQueue kubeflow/fmnist"]
    assert "value 1000, preemptionPolicy Never" in rows["PriorityClass fmnist-high"]
    assert "--gang-scheduler-name=volcano" in rows["training operator gang scheduling"]
    # Kueue was asked by a server-side dry run, which stored nothing.
    (call,) = [(method, path, body) for method, path, body in standin.calls
               if method == "POST" and "/tfjobs" in path]
    assert "dryRun=All" in call[1] and call[2]["metadata"]["labels"][QUEUE_LABEL] == "fmnist"
    assert not [key for key in standin.objects if key[0] == "TFJob"]


def test_without_scheduling_nothing_of_it_is_checked(cluster, capsys):
    standin, kfp = cluster
    assert preflight(standin, kfp) == 0
    assert _scheduling_rows(capsys.readouterr().out) == {}
    assert not [path for _, path, _ in standin.calls if "kueue" in path or "volcano" in path]


def _status_of(key, status):
    return lambda s: _set_status(s, key, status)


SCHEDULING_PIECES = {
    # Kubeflow does not install Kueue (kubeflow/manifests v1.11.0, 26.03: no Kueue component).
    "kueue": ("Kueue", "install Kueue", lambda s: setattr(s, "served",
                                                          s.served - ADD_ONS["kueue"])),
    "local-queue": ("Kueue LocalQueue kubeflow/fmnist",
                    "kubectl apply -k manifests/scheduling -n kubeflow",
                    lambda s: s.objects.pop(LOCAL_QUEUE)),
    "cluster-queue": ("Kueue LocalQueue kubeflow/fmnist", "create or reactivate ClusterQueue "
                      "fmnist", lambda s: _local_queue_active(
                          s, "False", "ClusterQueueDoesNotExist",
                          "Can't submit new workloads to clusterQueue")),
    # Kueue v0.19's default: the TFJob integration off, the queue label ignored.
    "tfjob-integration": ("Kueue manages TFJobs", "enable kubeflow.org/tfjob in "
                          "integrations.frameworks of ConfigMap kueue-manager-config in "
                          "kueue-system (off by default since Kueue v0.19), and restart "
                          "kueue-controller-manager", lambda s: s.mutators.clear()),
    "priority-class": ("PriorityClass fmnist-high", "kubectl apply -k manifests/scheduling",
                       lambda s: s.objects.pop(("PriorityClass", "", "fmnist-high"))),
    "workload-priority-class": ("Kueue WorkloadPriorityClass fmnist-high",
                                "kubectl apply -k manifests/scheduling", lambda s: s.objects.pop(
                                    ("WorkloadPriorityClass", "", "fmnist-high"))),
    "volcano": ("Volcano PodGroup", "volcano/v1.15.1/installer/volcano-development.yaml",
                lambda s: setattr(s, "served", s.served - ADD_ONS["volcano"])),
    "volcano-queue": ("Volcano queue default", "is volcano-scheduler running in "
                      "volcano-system?", lambda s: s.objects.pop(VOLCANO_DEFAULT)),
    "volcano-queue-closed": ("Volcano queue default", "vcctl queue operate --name default "
                             "--action open", _status_of(VOLCANO_DEFAULT, {"state": "Closed"})),
    # kubeflow/manifests' training operator: `/manager`, no flag (schedulingPolicy ignored).
    "operator-flag": ("training operator gang scheduling", "--gang-scheduler-name=volcano",
                      lambda s: s.objects[OPERATOR]["spec"]["template"]["spec"][
                          "containers"][0].update(command=["/manager"])),
    "operator-flag-none": ("training operator gang scheduling",
                           "--gang-scheduler-name=volcano", lambda s: s.objects[OPERATOR][
                               "spec"]["template"]["spec"]["containers"][0].update(
                               command=["/manager", "--gang-scheduler-name=None"])),
    "operator-flag-other": ("training operator gang scheduling", "set gang to "
                            "scheduler-plugins", lambda s: s.objects[OPERATOR]["spec"][
                                "template"]["spec"]["containers"][0].update(
                                command=["/manager", "--gang-scheduler-name=scheduler-plugins"])),
}


@pytest.mark.parametrize("piece", list(SCHEDULING_PIECES))
def test_each_missing_scheduling_piece_is_named_with_its_fix(cluster, capsys, piece):
    standin, kfp = cluster
    scheduling_cluster(standin)
    name, fix, take_away = SCHEDULING_PIECES[piece]
    take_away(standin)
    assert preflight(standin, kfp, "--scheduling", SCHEDULING) == 1
    output = capsys.readouterr().out
    (missing,) = missing_lines(output)
    row = _scheduling_rows(output)[name]
    assert row.startswith(missing), output
    _, _, fix_line = row.partition("\n")
    assert "fix: " in fix_line and fix in fix_line, row


def test_an_older_kueue_serving_only_v1beta1_is_asked_at_v1beta1(cluster, capsys):
    """Kueue before 0.15 serves only kueue.x-k8s.io/v1beta1 (v1beta2 came in v0.15.0)."""
    standin, kfp = cluster
    scheduling_cluster(standin)
    standin.served = {key for key in standin.served
                      if key[:2] != ("kueue.x-k8s.io", "v1beta2")}
    assert preflight(standin, kfp, "--scheduling", SCHEDULING) == 0
    rows = _scheduling_rows(capsys.readouterr().out)
    assert "served at v1beta1" in rows["Kueue"]
    assert rows["Kueue WorkloadPriorityClass fmnist-high"].startswith("ok")
    assert any("/kueue.x-k8s.io/v1beta1/namespaces/kubeflow/localqueues/fmnist" in path
               for _, path, _ in standin.calls)


@pytest.mark.parametrize("flags", [["--gang-scheduler-name=scheduler-plugins"],
                                   ["--gang-scheduler-name", "scheduler-plugins-scheduler"],
                                   ["-gang-scheduler-name=scheduler-plugins"]])
def test_scheduler_plugins_needs_its_podgroup_api_and_the_operator_flag(cluster, capsys, flags):
    """Any --gang-scheduler-name but volcano (and None) makes the operator create
    scheduler-plugins' PodGroups (kubeflow/trainer v1.9.2 cmd/training-operator.v1/main.go
    lines 191-202); Go's flag package reads ``-name=value``, ``--name=value`` and ``--name
    value`` alike."""
    standin, kfp = cluster
    standin.put(training_operator(*flags))
    scheduling = '{"gang": "scheduler-plugins", "gang_timeout_seconds": 120}'
    assert preflight(standin, kfp, "--scheduling", scheduling) == 1
    rows = _scheduling_rows(capsys.readouterr().out)
    assert rows["scheduler-plugins PodGroup"].startswith("MISSING")
    assert "podgroups.scheduling.x-k8s.io/v1alpha1 is not served" in rows[
        "scheduler-plugins PodGroup"]
    assert "as-a-second-scheduler" in rows["scheduler-plugins PodGroup"]
    assert rows["training operator gang scheduling"].startswith("ok")
    standin.install("scheduler-plugins")
    assert preflight(standin, kfp, "--scheduling", scheduling) == 0
    rows = _scheduling_rows(capsys.readouterr().out)
    assert "podgroups.scheduling.x-k8s.io, served at v1alpha1" in rows[
        "scheduler-plugins PodGroup"]
    assert not any(name.startswith("Volcano") for name in rows)


def test_volcano_default_queue_follows_the_namespace_annotation(cluster, capsys):
    """Volcano's PodGroup webhook replaces the queue ``default`` with the namespace's
    scheduling.volcano.sh/queue-name (volcano v1.15.1 pkg/webhooks/admission/podgroups/mutate/
    mutate_podgroup.go lines 104-122), so that is the queue that must be Open."""
    standin, kfp = cluster
    scheduling_cluster(standin)
    standin.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": NS, "annotations": {"scheduling.volcano.sh/queue-name": "team-a"}}})
    assert preflight(standin, kfp, "--scheduling", '{"gang": "volcano"}') == 1
    rows = _scheduling_rows(capsys.readouterr().out)
    row = rows["Volcano queue team-a"]
    assert row.startswith("MISSING")
    assert "namespace kubeflow's scheduling.volcano.sh/queue-name" in row
    standin.put({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                 "metadata": {"name": "team-a"}, "spec": {"weight": 1}})
    _set_status(standin, ("Queue", "", "team-a"), {"state": "Open"})
    assert preflight(standin, kfp, "--scheduling", '{"gang": "volcano"}') == 0
    # gang_queue, when given, is the queue (the operator sets it: job.go lines 281-299).
    assert preflight(standin, kfp, "--scheduling",
                     '{"gang": "volcano", "gang_queue": "research"}') == 1
    assert _scheduling_rows(capsys.readouterr().out)["Volcano queue research"].startswith(
        "MISSING")


@pytest.mark.parametrize(("fault", "check", "said"), [
    # The user may not create TFJobs, or Kueue's webhook is down (failurePolicy Fail).
    (("POST", "/tfjobs", 403), "Kueue manages TFJobs",
     "could not check: the server-side dry run of a TFJob labelled "
     "kueue.x-k8s.io/queue-name=fmnist in kubeflow was refused (HTTP 403"),
    (("POST", "/tfjobs", 500), "Kueue manages TFJobs", "was refused (HTTP 500"),
    (("GET", "/deployments/training-operator", 403), "training operator gang scheduling",
     "could not check: cannot read deployment kubeflow/training-operator (HTTP 403 Forbidden); "
     "the operator ignores runPolicy.schedulingPolicy unless it runs with "
     "--gang-scheduler-name"),
    (("GET", "/priorityclasses/fmnist-high", 403), "PriorityClass fmnist-high",
     "cannot read it (HTTP 403 Forbidden)"),
    (("GET", "/queues/default", 403), "Volcano queue default",
     "cannot read it (HTTP 403 Forbidden)"),
])
def test_what_cannot_be_checked_is_a_note_not_a_miss(cluster, capsys, fault, check, said):
    from tests.standins.apiserver import Fault

    standin, kfp = cluster
    scheduling_cluster(standin)
    method, path, status = fault
    standin.faults.append(Fault(method, path, status=status, times=10))
    assert preflight(standin, kfp, "--scheduling", SCHEDULING) == 0
    row = _scheduling_rows(capsys.readouterr().out)[check]
    assert row.startswith("note") and said in row.partition("\n")[0], row


def test_an_unreadable_training_operator_is_a_note_with_the_flag_to_set(cluster, capsys):
    standin, kfp = cluster
    scheduling_cluster(standin)
    standin.objects.pop(OPERATOR)  # installed elsewhere, or not at all
    assert preflight(standin, kfp, "--scheduling", SCHEDULING) == 0
    row = _scheduling_rows(capsys.readouterr().out)["training operator gang scheduling"]
    assert row.startswith("note") and "(not found)" in row
    assert "--gang-scheduler-name=volcano" in row


@pytest.mark.parametrize(("given", "error"), [
    ("{queue: fmnist}", "--scheduling is not JSON"),
    ('["fmnist"]', "--scheduling must be a JSON object"),
    ('{"gang": "slurm"}', "unknown gang scheduler 'slurm'"),
    ('{"queue": "Team_A"}', "is not a LocalQueue name"),
    ('{"gang_queue": "q"}', "gang is not `volcano`"),
    ('{"queues": "q"}', "unknown scheduling settings ['queues']"),
])
def test_bad_scheduling_is_refused_before_any_request(cluster, capsys, given, error):
    standin, kfp = cluster
    standin.calls.clear()
    assert preflight(standin, kfp, "--scheduling", given) == 2
    assert error in capsys.readouterr().err
    assert standin.calls == []


def test_the_dry_run_tfjob_is_one_the_api_server_accepts():
    """The probe fits the TFJob CRD strictly (../shared/crds) and the training operator's
    webhook (kubeflow/trainer v1.9.2 pkg/webhooks/tensorflow/tfjob_webhook.go lines 73-127: a
    DNS-1035 name, a container named tensorflow with an image)."""
    from fmnist_kfp.preflight import _queue_probe
    from fmnist_kfp.settings.names import is_dns_1035_label
    from tests.crd_schemas import validate_strict

    probe = _queue_probe("fmnist")
    validate_strict(probe, "tfjob.kubeflow.org_v1.yaml", "v1")
    assert is_dns_1035_label(probe["metadata"]["name"])
    (replica,) = probe["spec"]["tfReplicaSpecs"].values()
    (container,) = replica["template"]["spec"]["containers"]
    assert container["name"] == "tensorflow" and container["image"]
    assert probe["metadata"]["labels"][QUEUE_LABEL] == "fmnist"
    assert "runPolicy" not in probe["spec"]  # suspended only if Kueue's webhook does it


def test_the_standins_dry_run_admits_and_stores_nothing():
    """The stand-in's dryRun=All, as the API server does it (tests/standins/apiserver.py's
    docstring: mutating admission runs, the write is skipped, 409 for an existing object, 422
    for a dryRun value other than All)."""
    from kubernetes import client

    from fmnist_kfp.preflight import _queue_probe
    from tests.standins.kserve import KServeStandIn

    with KServeStandIn() as standin:
        standin.mutators.append(kueue_webhook)
        api = client.CustomObjectsApi(standin.api_client())
        answer = api.create_namespaced_custom_object("kubeflow.org", "v1", NS, "tfjobs",
                                                     _queue_probe("q"), dry_run="All")
        assert answer["spec"]["runPolicy"]["suspend"] is True
        assert answer["metadata"]["uid"] and "resourceVersion" not in answer["metadata"]
        assert not [key for key in standin.objects if key[0] == "TFJob"]
        stored = api.create_namespaced_custom_object("kubeflow.org", "v1", NS, "tfjobs",
                                                     _queue_probe("q"))
        assert stored["metadata"]["resourceVersion"]
        with pytest.raises(client.ApiException) as exists:
            api.create_namespaced_custom_object("kubeflow.org", "v1", NS, "tfjobs",
                                                _queue_probe("q"), dry_run="All")
        assert exists.value.status == 409
        with pytest.raises(client.ApiException) as invalid:
            api.create_namespaced_custom_object("kubeflow.org", "v1", NS, "tfjobs",
                                                _queue_probe("r"), dry_run="Yes")
        assert invalid.value.status == 422


# -- in a pod (a Kubeflow notebook): the in-cluster configuration --------------------------------


@pytest.fixture
def pod(monkeypatch, tmp_path):
    """A pod's environment: the API server's address in the environment, the ServiceAccount's
    token and CA where the kubernetes client reads them, no kubeconfig."""
    from kubernetes.config import incluster_config

    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("token-of-the-pod")
    (account / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nnot checked here\n")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(account / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(account / "ca.crt"))
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    return account


def test_in_a_pod_the_in_cluster_configuration_is_used(pod):
    from fmnist_kfp.preflight import kubernetes_api

    api_client, source = kubernetes_api()
    configuration = api_client.configuration
    assert configuration.host == "https://10.96.0.1:443"
    assert configuration.api_key["authorization"] == "bearer token-of-the-pod"
    assert configuration.ssl_ca_cert == str(pod / "ca.crt")
    assert source.startswith("in-cluster configuration") and str(pod / "token") in source


@pytest.mark.parametrize("given", ["--kubeconfig", "--context", "$KUBECONFIG", "~/.kube/config"])
def test_in_a_pod_a_kubeconfig_asked_for_wins(pod, given, monkeypatch, tmp_path):
    from fmnist_kfp.preflight import kubernetes_api

    with KServeStandIn() as standin:
        path = str(standin.kubeconfig(NS))
        arguments = {"--kubeconfig": (path, ""), "--context": (path, "standin")}.get(given,
                                                                                   ("", ""))
        if given == "$KUBECONFIG":
            monkeypatch.setenv("KUBECONFIG", path)
        if given == "~/.kube/config":
            (tmp_path / ".kube").mkdir()
            (tmp_path / ".kube" / "config").write_text(open(path).read())
        api_client, source = kubernetes_api(*arguments)
    assert api_client.configuration.host == standin.url
    assert source.startswith("kubeconfig ") and source.endswith("context standin")


def test_preflight_in_a_pod_says_which_configuration_it_used(pod, monkeypatch, capsys):
    """From a notebook: no kubeconfig; the pod's API server address (here one that refuses
    connections) and its token."""
    import socket

    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))
    port = refused.getsockname()[1]
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(port))
    try:
        with KfpStandIn() as kfp:
            code = cli_main(["preflight", "--host", kfp.url])
    finally:
        refused.close()
    out = capsys.readouterr().out
    assert code == 1, out
    assert out.splitlines()[0] == (f"Kubernetes API server https://127.0.0.1:{port} (in-cluster "
                                   f"configuration: this pod's ServiceAccount token, "
                                   f"{pod / 'token'})")
    [row] = missing_lines(out)
    assert "Kubernetes API server" in row and f"cannot reach https://127.0.0.1:{port}" in row


def test_in_a_pod_without_its_token_the_error_says_what_to_mount(pod, capsys):
    (pod / "token").unlink()
    with KfpStandIn() as kfp:
        assert cli_main(["preflight", "--host", kfp.url]) == 2
    err = capsys.readouterr().err
    assert "cannot load this pod's in-cluster configuration" in err
    assert "--kubeconfig" in err and "Traceback" not in err


def test_outside_a_pod_it_says_which_kubeconfig_it_used(cluster, capsys):
    standin, kfp = cluster
    assert preflight(standin, kfp) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (f"Kubernetes API server {standin.url} (kubeconfig "
                     f"{standin.kubeconfig(NS)}, context standin)")


def test_on_kubeflow_2603_the_gateway_network_policy_is_required(cluster, capsys):
    """Kubeflow 26.03 isolates istio-system (kubeflow/manifests 26.03 common/istio/
    istio-namespace/base/default-allow-same-namespace.yaml): where that policy exists,
    manifests/serving-network's must too; once applied, the cluster is ready again."""
    from tests.standins.network import install_kubeflow_2603

    standin, kfp = cluster
    install_kubeflow_2603(standin, "team-a")
    assert preflight(standin, kfp) == 1
    [row] = missing_lines(capsys.readouterr().out)
    assert "NetworkPolicy istio-system/fmnist-pipelines-to-local-gateway" in row
    for obj in build("serving-network"):
        standin.put(obj)
    assert preflight(standin, kfp) == 0
    output = capsys.readouterr().out
    assert "ok       NetworkPolicy istio-system/fmnist-pipelines-to-local-gateway" in output


def test_without_kubeflows_gateway_policy_no_network_row_is_shown(cluster, capsys):
    standin, kfp = cluster
    assert preflight(standin, kfp) == 0
    assert "fmnist-pipelines-to-local-gateway" not in capsys.readouterr().out


# -- the training operator: Training Operator v1 (TFJob), Kubeflow Trainer v2 (TrainJob) --------
# Kubeflow 26.03's example install ships Trainer v2.1.0 (with JobSet v0.10.1) and leaves the
# Training Operator v1 commented out (kubeflow/manifests 26.03 example/kustomization.yaml lines
# 90-93); it installs Trainer together with Katib, so the TrainJob CRD is older than
# katib-controller's start.

TRAINER_V2 = {("trainer.kubeflow.org", "v1alpha1", "trainjobs"): "TrainJob",
              ("jobset.x-k8s.io", "v1alpha2", "jobsets"): "JobSet"}
TRAINER_V2_CLUSTER_SCOPED = {
    ("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes"): "ClusterTrainingRuntime"}
TRAINJOB_CRD = ("CustomResourceDefinition", "", "trainjobs.trainer.kubeflow.org")
RUNTIME_FIX = "kubectl apply -k manifests/trainer-runtime"


def install_trainer_v2(standin, monkeypatch, crd_created: str = "2026-01-01T09:00:00Z") -> None:
    """Serves Trainer v2's and JobSet's APIs on the API server stand-in (its ``trainer``
    add-on where it has one, else registered here for this test) and stores the TrainJob CRD."""
    from tests.standins import apiserver

    if "trainer" in apiserver.ADD_ONS:
        standin.install("trainer")
    else:
        for key, kind in TRAINER_V2.items():
            monkeypatch.setitem(apiserver.CORE, key, kind)
        for key, kind in TRAINER_V2_CLUSTER_SCOPED.items():
            monkeypatch.setitem(apiserver.CLUSTER_SCOPED, key, kind)
        standin.served |= set(TRAINER_V2) | set(TRAINER_V2_CLUSTER_SCOPED)
    standin.put({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                 "metadata": {"name": TRAINJOB_CRD[2]}})
    standin.objects[TRAINJOB_CRD]["metadata"]["creationTimestamp"] = crd_created


def without_training_operator_v1(standin) -> None:
    standin.served.discard(("kubeflow.org", "v1", "tfjobs"))
    standin.objects.pop(TFJOB_CRD)


def apply_runtime(standin) -> None:
    """``kubectl apply -k manifests/trainer-runtime``."""
    for obj in build("trainer-runtime"):
        standin.put(obj)


def _row(output: str, check: str) -> str:
    (row,) = _rows(output, check)
    return row


def test_on_2603_without_training_operator_v1_the_runtime_is_what_is_missing(cluster, capsys,
                                                                            monkeypatch):
    """A stock 26.03 (Trainer v2, no TFJob CRD): red, naming the runtime's apply as the fix,
    until ``manifests/trainer-runtime`` is applied; then green, on TrainJobs, with the TrainJob
    path's permissions (granted by manifests/standalone-rbac) and Katib's TrainJob watch."""
    from fmnist_kfp.preflight import permissions_for

    standin, kfp = cluster
    without_training_operator_v1(standin)
    install_trainer_v2(standin, monkeypatch)
    assert preflight(standin, kfp) == 1
    output = capsys.readouterr().out
    (missing,) = missing_lines(output)
    assert "ClusterTrainingRuntime fmnist-tensorflow" in missing and "missing" in missing
    assert f"fix: {RUNTIME_FIX}" in _row(output, "ClusterTrainingRuntime fmnist-tensorflow")
    assert _row(output, "TFJob (Training Operator v1)").startswith("note")
    assert "TrainJobs (Trainer v2) run the training" in output

    apply_runtime(standin)
    standin.impersonated.clear()
    assert preflight(standin, kfp) == 0, capsys.readouterr().out
    output = capsys.readouterr().out
    assert not missing_lines(output) and "ready for a first run" in output
    assert "kubernetes.operator auto picks TrainJobs (Trainer v2), the only one served" in output
    assert _row(output, "TrainJob (Trainer v2)").startswith("ok")
    assert "trainjobs.trainer.kubeflow.org, served at v1alpha1" in output
    assert _row(output, "JobSet").startswith("ok")
    assert _row(output, "ClusterTrainingRuntime fmnist-tensorflow").startswith("ok")
    assert _row(output, "Katib watches TrainJobs").startswith("ok")
    assert "pipeline-runner may create trainjobs.trainer.kubeflow.org" in output
    assert "may create tfjobs" not in output
    assert len(standin.impersonated) == len(permissions_for("trainjob"))


def test_with_both_operators_it_says_both_and_that_auto_picks_tfjob(cluster, capsys,
                                                                   monkeypatch):
    standin, kfp = cluster
    install_trainer_v2(standin, monkeypatch)
    apply_runtime(standin)
    assert preflight(standin, kfp) == 0, capsys.readouterr().out
    output = capsys.readouterr().out
    row = _row(output, "training operator ")
    assert row.startswith("note")
    assert ("both served: kubernetes.operator auto picks TFJobs (Training Operator v1); "
            "kubernetes.operator trainjob picks TrainJobs (Trainer v2)") in row
    assert _row(output, "TFJob (Training Operator v1)").startswith("ok")
    assert _row(output, "TrainJob (Trainer v2)").startswith("ok")
    assert _row(output, "Katib watches TFJobs").startswith("ok")
    assert "may create tfjobs.kubeflow.org" in output and "trainjobs" not in output.split(
        "Katib Experiment")[1]  # the TFJob path's permissions, not the TrainJob path's
    assert not _rows(output, "ClusterTrainingRuntime")  # not the path auto takes here


TRAINJOB_PIECES = {
    "runtime": ("ClusterTrainingRuntime fmnist-tensorflow", RUNTIME_FIX,
                lambda s: s.objects.pop(("ClusterTrainingRuntime", "", "fmnist-tensorflow"))),
    "jobset": ("JobSet", "manifests/third-party/jobset",
               lambda s: s.served.discard(("jobset.x-k8s.io", "v1alpha2", "jobsets"))),
    # katib-config without TrainJob (cmd/katib-controller/v1beta1/main.go lines 80-85).
    "katib-config-without-trainjob": (
        "Katib watches TrainJobs", "add TrainJob.v1alpha1.trainer.kubeflow.org",
        lambda s: s.objects[("ConfigMap", NS, "katib-config")]["data"].update(
            {"katib-config.yaml": KATIB_CONFIG.replace(
                "      - TrainJob.v1alpha1.trainer.kubeflow.org\n", "")})),
    # Trainer installed after Katib (kubeflow/katib v0.19.0 trial_controller.go 103-127).
    "katib-started-before-trainjob-crd": (
        "Katib watches TrainJobs", RESTART,
        lambda s: s.objects[TRAINJOB_CRD]["metadata"].update(
            creationTimestamp="2026-01-01T09:30:00Z")),
    **{f"may-{verb}-{resource}{'-' + sub if sub else ''}": (
        f"may {verb} {resource}{'.' + group if group else ''}{'/' + sub if sub else ''}",
        "kubectl apply -k manifests/standalone-rbac",
        (lambda v, g, r: lambda s: _drop_permission(s, v, g, r))(
            verb, group, f"{resource}/{sub}" if sub else resource))
       for verb, group, resource, sub, _ in __import__(
           "fmnist_kfp.preflight", fromlist=["TRAINJOB_PERMISSIONS"]).TRAINJOB_PERMISSIONS},
}


@pytest.mark.parametrize("piece", list(TRAINJOB_PIECES))
def test_each_missing_trainjob_piece_is_named_with_its_fix(cluster, capsys, monkeypatch, piece):
    standin, kfp = cluster
    without_training_operator_v1(standin)
    install_trainer_v2(standin, monkeypatch)
    apply_runtime(standin)
    name, fix, take_away = TRAINJOB_PIECES[piece]
    take_away(standin)
    assert preflight(standin, kfp) == 1
    output = capsys.readouterr().out
    (missing,) = missing_lines(output)
    assert name in missing, output
    fix_line = output.splitlines()[output.splitlines().index(missing) + 1]
    assert "fix: " in fix_line and fix in fix_line, fix_line


def test_neither_operator_names_both_installs(cluster, capsys):
    standin, kfp = cluster
    without_training_operator_v1(standin)
    assert preflight(standin, kfp) == 1
    output = capsys.readouterr().out
    (missing,) = missing_lines(output)
    assert "TFJob (Training Operator v1)" in missing
    row = _row(output, "TFJob (Training Operator v1)")
    assert "training-operator/upstream/overlays/kubeflow" in row and RUNTIME_FIX in row


@pytest.mark.parametrize(("setting", "offered", "operator", "missing"), [
    # kubernetes.operator trainjob where only TFJobs are served: the TrainJob API is missing.
    ("trainjob", "tfjob", "trainjob", ["TrainJob (Trainer v2)"]),
    # kubernetes.operator tfjob where only Trainer v2 runs: the TFJob API is missing, and the
    # runtime is not asked for (the run would not use it).
    ("tfjob", "trainjob", "tfjob", ["TFJob (Training Operator v1)"]),
    ("trainjob", "both", "trainjob", []),
    ("auto", "both", "tfjob", []),
])
def test_the_operator_setting_decides_what_is_checked(cluster, monkeypatch, setting, offered,
                                                      operator, missing):
    """``Cluster.operator`` (the run's ``kubernetes.operator``), through the train step's own
    rule (``training_operators.choose_operator``)."""
    from fmnist_kfp.preflight import Cluster, permissions_for
    from fmnist_kfp.preflight.training_operator import check_training_operator

    standin, kfp = cluster
    if offered != "tfjob":
        install_trainer_v2(standin, monkeypatch)
        apply_runtime(standin)
    if offered == "trainjob":
        without_training_operator_v1(standin)
    rows, chosen = check_training_operator(
        standin.api_client(NS), Cluster(NS, "pipeline-runner", "fmnist-data", "", NS,
                                        "fmnist-serving", False, operator=setting))
    assert chosen == operator
    assert [row.check for row in rows if row.ok is False] == missing, rows
    assert all(row.fix for row in rows if row.ok is False)
    assert ("ClusterTrainingRuntime fmnist-tensorflow" in {row.check for row in rows}) == (
        operator == "trainjob" and offered != "tfjob")
    assert permissions_for(operator) == (
        __import__("fmnist_kfp.preflight", fromlist=["PERMISSIONS"]).PERMISSIONS
        if operator == "tfjob" else permissions_for("trainjob"))


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


def test_the_first_run_pages_trainjob_path_runs_as_written(monkeypatch, tmp_path, capsys):
    """docs/first-run.md's TrainJob block on a stand-in stock 26.03 (tests/fmnist_kfp/
    test_first_run.py's, with Trainer v2 served as its example install serves it, the TrainJob
    CRD installed with Katib, and its kubeflow-trainer-edit aggregated into kubeflow-edit as
    tests/kubeflow_roles/26.03.yaml holds it): the page's step 2 and 3 setup, then the block's
    commands, each printing what the page shows."""
    from tests.first_run_doc import blocks, matches
    from tests.fmnist_kfp import test_first_run as page

    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("FMNIST_CREDENTIALS_SECRET", "FMNIST_PVC_NAME", "KF_PIPELINES_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    with KServeStandIn(rbac=True) as standin, KfpStandIn(multi_user=True) as kfp:
        kubeflow = page.FreshKubeflow(standin, kfp, "26.03", monkeypatch)
        install_trainer_v2(standin, monkeypatch, crd_created="2026-01-05T09:59:30Z")
        setup = [command for block in blocks() if block.kind == "step"
                 for command in block.commands if command.argv[0] == "kubectl"
                 and "training-operator" not in command.line and "rollout" not in command.line]
        for command in [*setup, *[c for b in blocks() if b.kind == "step"
                                  for c in b.commands if c.argv[0] == "export"]]:
            assert kubeflow.run(command.argv, capsys)[0] == 0, command.line
        [block] = [b for b in blocks() if b.kind == "trainjob"]
        for command in block.commands:
            if command.argv == ["kubectl", "apply", "-k", "manifests/trainer-runtime"]:
                apply_runtime(standin)
                code, output = 0, ""
            else:
                code, output = kubeflow.run(command.argv, capsys)
            assert code == 0, f"$ {command.line}\n{output}"
            assert matches(command.expected, output), (
                f"$ {command.line}\nthe page shows:\n{command.expected}\nit printed:\n{output}")
