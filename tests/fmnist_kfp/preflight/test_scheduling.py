"""Scheduling (fmnist_kfp.preflight.scheduling; ``--scheduling``: the run's
kubernetes.scheduling; docs/scheduling.md): Kueue and its LocalQueue, the PriorityClasses,
Volcano's or scheduler-plugins' PodGroup API, Volcano's queue and the training operator's
--gang-scheduler-name, each missing piece named with its fix; the server-side dry run that asks
Kueue.

The PriorityClass and gang scheduling checks run on Kubeflow on a real API server (tests/
fmnist_kfp/preflight/on_the_api_server.py, with Volcano's and scheduler-plugins' CRDs; the
status Volcano's scheduler writes on its Queue written by the test). Kueue's run on the API
server stand-in, whose Kueue webhook each test turns on or off (:func:`kueue_webhook`): on the
real Kueue that is a rollout restart, and its real rows are checked in tests/fmnist_kfp/
launcher/test_queued_on_the_cluster.py."""

from __future__ import annotations

import pytest

from tests.fmnist_kfp.preflight.cluster import NS, missing_lines, preflight
from tests.fmnist_kfp.preflight.on_the_api_server import training_operator, volcano_queue
from tests.setup_manifests import build
from tests.standins.apiserver import ADD_ONS

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
SCHEDULING = '{"queue": "fmnist", "priority_class": "fmnist-high", "gang": "volcano"}'
LOCAL_QUEUE = ("LocalQueue", NS, "fmnist")
VOLCANO_DEFAULT = ("Queue", "", "default")


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
    "workload-priority-class": ("Kueue WorkloadPriorityClass fmnist-high",
                                "kubectl apply -k manifests/scheduling", lambda s: s.objects.pop(
                                    ("WorkloadPriorityClass", "", "fmnist-high"))),
}


def _assert_the_one_missing_row(output: str, name: str, fix: str) -> None:
    """Row ``name`` is the one missing, and its fix says ``fix``."""
    (missing,) = missing_lines(output)
    row = _scheduling_rows(output)[name]
    assert row.startswith(missing), output
    _, _, fix_line = row.partition("\n")
    assert "fix: " in fix_line and fix in fix_line, row


@pytest.mark.parametrize("piece", list(SCHEDULING_PIECES))
def test_each_missing_scheduling_piece_is_named_with_its_fix(cluster, capsys, piece):
    standin, kfp = cluster
    scheduling_cluster(standin)
    name, fix, take_away = SCHEDULING_PIECES[piece]
    take_away(standin)
    assert preflight(standin, kfp, "--scheduling", SCHEDULING) == 1
    _assert_the_one_missing_row(capsys.readouterr().out, name, fix)


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


@pytest.mark.parametrize(("fault", "check", "said"), [
    # The user may not create TFJobs, or Kueue's webhook is down (failurePolicy Fail).
    (("POST", "/tfjobs", 403), "Kueue manages TFJobs",
     "could not check: the server-side dry run of the run's TFJob (labelled "
     "kueue.x-k8s.io/queue-name=fmnist) in kubeflow was refused (HTTP 403"),
    (("POST", "/tfjobs", 500), "Kueue manages TFJobs", "was refused (HTTP 500"),
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


def _run_tfjob(queue: str) -> dict:
    """The TFJob preflight sends as a dry run for a run with ``queue``: the train step's own
    (``build_tfjob``, from the run's settings)."""
    from fmnist_kfp.kubernetes.manifest import to_manifest
    from fmnist_kfp.kubernetes.tfjob import build_tfjob
    from fmnist_kfp.preflight import Cluster, run_settings
    from fmnist_kfp.preflight.common import probe_name, run_job_spec
    from fmnist_kfp.settings.scheduling import SchedulingSettings

    cluster = Cluster(namespace=NS, runner_service_account="pipeline-runner", pvc="fmnist-data",
                      credentials_secret="", serving_namespace=NS, serving_service_account="",
                      multi_user=False, scheduling=SchedulingSettings(queue=queue),
                      operator="tfjob")
    settings = run_settings(cluster)
    return to_manifest(build_tfjob(run_job_spec(probe_name(), settings), settings))


def test_the_dry_run_tfjob_is_the_train_steps_own():
    """What preflight sends is the train step's TFJob (the builder's, not a hand-made probe):
    the queue's label, the claim, the release image; and the TFJob CRD takes it strictly
    (../shared/crds)."""
    from tests.crd_schemas import validate_strict

    probe = _run_tfjob("fmnist")
    validate_strict(probe, "tfjob.kubeflow.org_v1.yaml", "v1")
    assert probe["metadata"]["labels"][QUEUE_LABEL] == "fmnist"
    assert probe["metadata"]["name"].startswith("fmnist-preflight-")
    (replica,) = probe["spec"]["tfReplicaSpecs"].values()
    (container,) = replica["template"]["spec"]["containers"]
    assert container["name"] == "tensorflow" and container["image"]
    assert replica["template"]["spec"]["volumes"][0]["persistentVolumeClaim"] == {
        "claimName": "fmnist-data"}
    assert "suspend" not in probe["spec"]["runPolicy"]  # suspended only if Kueue does it


def test_the_standins_dry_run_admits_and_stores_nothing():
    """The stand-in's dryRun=All, as the API server does it (tests/standins/apiserver.py's
    docstring: mutating admission runs, the write is skipped, 409 for an existing object, 422
    for a dryRun value other than All)."""
    from kubernetes import client

    from tests.standins.kserve import KServeStandIn

    probe = _run_tfjob("q")

    with KServeStandIn() as standin:
        standin.mutators.append(kueue_webhook)
        api = client.CustomObjectsApi(standin.api_client())
        answer = api.create_namespaced_custom_object("kubeflow.org", "v1", NS, "tfjobs",
                                                     probe, dry_run="All")
        assert answer["spec"]["runPolicy"]["suspend"] is True
        assert answer["metadata"]["uid"] and "resourceVersion" not in answer["metadata"]
        assert not [key for key in standin.objects if key[0] == "TFJob"]
        stored = api.create_namespaced_custom_object("kubeflow.org", "v1", NS, "tfjobs",
                                                     probe)
        assert stored["metadata"]["resourceVersion"]
        with pytest.raises(client.ApiException) as exists:
            api.create_namespaced_custom_object("kubeflow.org", "v1", NS, "tfjobs",
                                                probe, dry_run="All")
        assert exists.value.status == 409
        with pytest.raises(client.ApiException) as invalid:
            api.create_namespaced_custom_object("kubeflow.org", "v1", NS, "tfjobs",
                                                _run_tfjob("r"), dry_run="Yes")
        assert invalid.value.status == 422


# -- on the real API server: the PriorityClass and gang scheduling, no queue ---------------------

GANG = '{"priority_class": "fmnist-high", "gang": "volcano"}'
GANG_ROWS = ["PriorityClass fmnist-high", "Volcano PodGroup", "Volcano queue default",
             "training operator gang scheduling"]


def test_a_cluster_set_up_for_priority_and_gang_scheduling_passes(kubeflow_and_volcano, capsys):
    cluster, kfp = kubeflow_and_volcano
    assert preflight(cluster, kfp, "--scheduling", GANG) == 0, capsys.readouterr().out
    rows = _scheduling_rows(capsys.readouterr().out)
    assert sorted(rows) == sorted(GANG_ROWS)
    assert all(row.startswith("ok") for row in rows.values()), rows
    assert "value 1000, preemptionPolicy Never" in rows["PriorityClass fmnist-high"]
    assert "--gang-scheduler-name=volcano" in rows["training operator gang scheduling"]


GANG_PIECES = {
    "priority-class": ("PriorityClass fmnist-high", "kubectl apply -k manifests/scheduling",
                       lambda c: c.delete("scheduling.k8s.io/v1", "PriorityClass",
                                          "fmnist-high")),
    "volcano": ("Volcano PodGroup", "volcano/v1.15.1/installer/volcano-development.yaml",
                lambda c: [c.uninstall_crd(name) for name in (
                    "podgroups.scheduling.volcano.sh", "queues.scheduling.volcano.sh")]),
    "volcano-queue": ("Volcano queue default", "is volcano-scheduler running in "
                      "volcano-system?", lambda c: c.delete(
                          "scheduling.volcano.sh/v1beta1", "Queue", "default")),
    "volcano-queue-closed": ("Volcano queue default", "vcctl queue operate --name default "
                             "--action open", lambda c: c.write_status(
                                 volcano_queue("default")[0], {"state": "Closed"})),
    # kubeflow/manifests' training operator: `/manager`, no flag (schedulingPolicy ignored).
    "operator-flag": ("training operator gang scheduling", "--gang-scheduler-name=volcano",
                      lambda c: c.put(training_operator())),
    "operator-flag-none": ("training operator gang scheduling",
                           "--gang-scheduler-name=volcano",
                           lambda c: c.put(training_operator("--gang-scheduler-name=None"))),
    "operator-flag-other": ("training operator gang scheduling", "set gang to "
                            "scheduler-plugins", lambda c: c.put(training_operator(
                                "--gang-scheduler-name=scheduler-plugins"))),
}


@pytest.mark.parametrize("piece", list(GANG_PIECES))
def test_each_missing_gang_or_priority_piece_is_named_with_its_fix(kubeflow_and_volcano, capsys,
                                                                   piece):
    cluster, kfp = kubeflow_and_volcano
    name, fix, take_away = GANG_PIECES[piece]
    take_away(cluster)
    assert preflight(cluster, kfp, "--scheduling", GANG) == 1
    _assert_the_one_missing_row(capsys.readouterr().out, name, fix)


@pytest.mark.parametrize(("denied", "check", "said"), [
    (("apps", "deployments"), "training operator gang scheduling",
     "could not check: cannot read deployment kubeflow/training-operator (HTTP 403 Forbidden); "
     "the operator ignores runPolicy.schedulingPolicy unless it runs with "
     "--gang-scheduler-name"),
    (("scheduling.k8s.io", "priorityclasses"), "PriorityClass fmnist-high",
     "cannot read it (HTTP 403 Forbidden)"),
    (("scheduling.volcano.sh", "queues"), "Volcano queue default",
     "cannot read it (HTTP 403 Forbidden)"),
])
def test_what_rbac_hides_is_a_note_not_a_miss(kubeflow_and_volcano, capsys, denied, check,
                                              said):
    """Run by a user the real authorizer refuses that one read."""
    cluster, kfp = kubeflow_and_volcano
    cluster.run_as_one_who_may_not(denied)
    assert preflight(cluster, kfp, "--scheduling", GANG) == 0, capsys.readouterr().out
    row = _scheduling_rows(capsys.readouterr().out)[check]
    assert row.startswith("note") and said in row.partition("\n")[0], row


def test_an_unreadable_training_operator_is_a_note_with_the_flag_to_set(kubeflow_and_volcano,
                                                                        capsys):
    cluster, kfp = kubeflow_and_volcano
    cluster.delete("apps/v1", "Deployment", "training-operator", NS)  # installed elsewhere
    assert preflight(cluster, kfp, "--scheduling", GANG) == 0
    row = _scheduling_rows(capsys.readouterr().out)["training operator gang scheduling"]
    assert row.startswith("note") and "(not found)" in row
    assert "--gang-scheduler-name=volcano" in row


def test_volcano_default_queue_follows_the_namespace_annotation(kubeflow_and_volcano, capsys):
    """Volcano's PodGroup webhook replaces the queue ``default`` with the namespace's
    scheduling.volcano.sh/queue-name (volcano v1.15.1 pkg/webhooks/admission/podgroups/mutate/
    mutate_podgroup.go lines 104-122), so that is the queue that must be Open."""
    cluster, kfp = kubeflow_and_volcano
    cluster.edit("v1", "Namespace", NS, "", lambda namespace: namespace["metadata"].setdefault(
        "annotations", {}).update({"scheduling.volcano.sh/queue-name": "team-a"}))
    assert preflight(cluster, kfp, "--scheduling", '{"gang": "volcano"}') == 1
    rows = _scheduling_rows(capsys.readouterr().out)
    row = rows["Volcano queue team-a"]
    assert row.startswith("MISSING")
    assert "namespace kubeflow's scheduling.volcano.sh/queue-name" in row
    queue, status = volcano_queue("team-a")
    cluster.put(queue)
    cluster.write_status(queue, status)
    assert preflight(cluster, kfp, "--scheduling", '{"gang": "volcano"}') == 0
    # gang_queue, when given, is the queue (the operator sets it: job.go lines 281-299).
    assert preflight(cluster, kfp, "--scheduling",
                     '{"gang": "volcano", "gang_queue": "research"}') == 1
    assert _scheduling_rows(capsys.readouterr().out)["Volcano queue research"].startswith(
        "MISSING")


@pytest.mark.parametrize("flags", [["--gang-scheduler-name=scheduler-plugins"],
                                   ["--gang-scheduler-name", "scheduler-plugins-scheduler"],
                                   ["-gang-scheduler-name=scheduler-plugins"]])
def test_scheduler_plugins_needs_its_podgroup_api_and_the_operator_flag(kubeflow, capsys, flags):
    """Any --gang-scheduler-name but volcano (and None) makes the operator create
    scheduler-plugins' PodGroups (kubeflow/trainer v1.9.2 cmd/training-operator.v1/main.go
    lines 191-202); Go's flag package reads ``-name=value``, ``--name=value`` and ``--name
    value`` alike."""
    cluster, kfp = kubeflow
    cluster.put(training_operator(*flags))
    scheduling = '{"gang": "scheduler-plugins", "gang_timeout_seconds": 120}'
    assert preflight(cluster, kfp, "--scheduling", scheduling) == 1
    rows = _scheduling_rows(capsys.readouterr().out)
    assert rows["scheduler-plugins PodGroup"].startswith("MISSING")
    assert "podgroups.scheduling.x-k8s.io/v1alpha1 is not served" in rows[
        "scheduler-plugins PodGroup"]
    assert "as-a-second-scheduler" in rows["scheduler-plugins PodGroup"]
    assert rows["training operator gang scheduling"].startswith("ok")
    cluster.install("podgroups.scheduling.x-k8s.io")
    assert preflight(cluster, kfp, "--scheduling", scheduling) == 0
    rows = _scheduling_rows(capsys.readouterr().out)
    assert "podgroups.scheduling.x-k8s.io, served at v1alpha1" in rows[
        "scheduler-plugins PodGroup"]
    assert not any(name.startswith("Volcano") for name in rows)
