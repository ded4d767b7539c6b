"""Scheduling (fmnist_kfp.preflight.scheduling; ``--scheduling``: the run's
kubernetes.scheduling; docs/scheduling.md): Kueue and its LocalQueue, the PriorityClasses,
Volcano's or scheduler-plugins' PodGroup API, Volcano's queue and the training operator's
--gang-scheduler-name, each missing piece named with its fix.

All on a real API server: Kubeflow 1.11 on kube-apiserver v1.34.1 (tests/fmnist_kfp/preflight/
on_the_api_server.py, with Volcano's, scheduler-plugins' and Kueue's CRDs; the status Volcano's
scheduler writes on its Queue written by the test). What needs Kueue itself running (its
webhook suspending the run's job on the dry run, the LocalQueue's Active condition, each of its
pieces taken away, its webhook down) runs on the real Kueue v0.19.2 in tests/fmnist_kfp/
launcher/test_queued_on_the_cluster.py."""

from __future__ import annotations

import pytest

from localcluster.fault_proxy import FaultProxy
from tests.fmnist_kfp.preflight.cluster import NS, missing_lines, preflight
from tests.fmnist_kfp.preflight.on_the_api_server import training_operator, volcano_queue

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
LOCAL_QUEUES = "localqueues.kueue.x-k8s.io"
WORKLOAD_PRIORITY_CLASSES = "workloadpriorityclasses.kueue.x-k8s.io"


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


def _assert_the_one_missing_row(output: str, name: str, fix: str) -> None:
    """Row ``name`` is the one missing, and its fix says ``fix``."""
    (missing,) = missing_lines(output)
    row = _scheduling_rows(output)[name]
    assert row.startswith(missing), output
    _, _, fix_line = row.partition("\n")
    assert "fix: " in fix_line and fix in fix_line, row


def _preflight_through(proxy: FaultProxy, cluster, kfp, *extra) -> int:
    """``fmnist-kfp preflight`` with a kubeconfig whose server is ``proxy`` (no faults: it
    records every request the API server is sent)."""
    from fmnist_kfp.cli import main as cli_main

    kubeconfig = proxy.kubeconfig(cluster.plane.state_dir / "kubeconfig-recorded")
    return cli_main(["preflight", "--host", kfp.url, "--kubeconfig", str(kubeconfig), *extra])


def test_without_scheduling_nothing_of_it_is_checked(kubeflow, capsys):
    cluster, kfp = kubeflow
    with FaultProxy(cluster.kubeconfig(NS)) as proxy:
        assert _preflight_through(proxy, cluster, kfp) == 0, capsys.readouterr().out
    assert _scheduling_rows(capsys.readouterr().out) == {}
    assert proxy.requests  # preflight asked the API server through the proxy
    assert not [path for _, path, _ in proxy.requests if "kueue" in path or "volcano" in path]


def test_a_queue_without_kueue_installed_is_named_with_its_install(kubeflow, capsys):
    """Kubeflow does not install Kueue (kubeflow/manifests v1.11.0, 26.03: no Kueue
    component): localqueues.kueue.x-k8s.io is served at no version."""
    cluster, kfp = kubeflow
    assert preflight(cluster, kfp, "--scheduling", '{"queue": "fmnist"}') == 1
    output = capsys.readouterr().out
    _assert_the_one_missing_row(output, "Kueue", "install Kueue")
    assert "localqueues.kueue.x-k8s.io is not served (v1beta2/v1beta1)" in output
    assert sorted(_scheduling_rows(output)) == ["Kueue"]  # nothing of Kueue asked further


def test_an_older_kueue_serving_only_v1beta1_is_asked_at_v1beta1(kubeflow, capsys):
    """Kueue before 0.15 serves only kueue.x-k8s.io/v1beta1 (v1beta2 came in v0.15.0): its
    CRDs as v0.19.2's serving v1beta1 alone; the LocalQueue's Active condition as Kueue writes
    it (kueue v0.19.2 pkg/controller/core/localqueue_controller.go lines 193-213; no Kueue
    runs on this server). Read at v1beta1, the LocalQueue and the WorkloadPriorityClass are
    found; no webhook suspends the dry run's TFJob, so Kueue does not manage TFJobs here."""
    cluster, kfp = kubeflow
    for name in (LOCAL_QUEUES, WORKLOAD_PRIORITY_CLASSES):
        cluster.install_older(name, "v1beta1")
    local_queue = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                   "metadata": {"name": "fmnist", "namespace": NS},
                   "spec": {"clusterQueue": "fmnist"}}
    cluster.put(local_queue)
    cluster.write_status(local_queue, {"conditions": [
        {"type": "Active", "status": "True", "reason": "Ready",
         "message": "Can submit new workloads to localQueue",
         "lastTransitionTime": "2026-01-01T09:00:00Z"}]})
    cluster.put({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadPriorityClass",
                 "metadata": {"name": "fmnist-high"}, "value": 1000})
    cluster.put({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                 "metadata": {"name": "fmnist-high"}, "value": 1000,
                 "preemptionPolicy": "Never"})
    preflight(cluster, kfp, "--scheduling", '{"queue": "fmnist", "priority_class": '
                                            '"fmnist-high"}')
    rows = _scheduling_rows(capsys.readouterr().out)
    assert "served at v1beta1" in rows["Kueue"]
    assert rows["Kueue LocalQueue kubeflow/fmnist"].startswith("ok"), rows
    assert "ClusterQueue fmnist, active" in rows["Kueue LocalQueue kubeflow/fmnist"]
    assert rows["Kueue WorkloadPriorityClass fmnist-high"].startswith("ok"), rows
    assert rows["Kueue manages TFJobs"].startswith("MISSING"), rows


@pytest.mark.parametrize(("given", "error"), [
    ("{queue: fmnist}", "--scheduling is not JSON"),
    ('["fmnist"]', "--scheduling must be a JSON object"),
    ('{"gang": "slurm"}', "unknown gang scheduler 'slurm'"),
    ('{"queue": "Team_A"}', "is not a LocalQueue name"),
    ('{"gang_queue": "q"}', "gang is not `volcano`"),
    ('{"queues": "q"}', "unknown scheduling settings ['queues']"),
])
def test_bad_scheduling_is_refused_before_any_request(kubeflow, capsys, given, error):
    cluster, kfp = kubeflow
    with FaultProxy(cluster.kubeconfig(NS)) as proxy:
        assert _preflight_through(proxy, cluster, kfp, "--scheduling", given) == 2
    assert error in capsys.readouterr().err
    assert proxy.requests == []


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
