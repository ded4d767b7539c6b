"""The training operator (fmnist_kfp.preflight.training_operator): Training Operator v1
(TFJob), Kubeflow Trainer v2 (TrainJob) or both, which one ``kubernetes.operator`` picks, and
what the TrainJob path needs besides (JobSet, the ClusterTrainingRuntime, Katib's TrainJob
watch, its permissions); docs/first-run.md's TrainJob block run as written.

Kubeflow 26.03's example install ships Trainer v2.1.0 (with JobSet v0.10.1) and leaves the
Training Operator v1 commented out (kubeflow/manifests 26.03 example/kustomization.yaml lines
90-93); it installs Trainer together with Katib, so the TrainJob CRD is older than
katib-controller's start.

On Kubeflow on a real API server (tests/fmnist_kfp/preflight/on_the_api_server.py): Trainer's
and JobSet's CRDs installed (``install_trainer``), the Training Operator's taken away by
deleting its CRD. The first-run page's TrainJob block still runs on the stand-in Kubeflow of
tests/fmnist_kfp/test_first_run.py."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.fmnist_kfp.preflight.cluster import (
    KATIB_CONFIG,
    NS,
    RESTART,
    RUNTIME_FIX,
    _rows,
    apply_runtime,
    install_trainer_v2,
    missing_lines,
    preflight,
)
from tests.fmnist_kfp.preflight.on_the_api_server import TFJOB_CRD, TRAINJOB_CRD
from tests.fmnist_kfp.preflight.on_the_api_server import apply_runtime as apply_runtime_on
from tests.standins.kfp import KfpStandIn
from tests.standins.kserve import KServeStandIn


def _row(output: str, check: str) -> str:
    (row,) = _rows(output, check)
    return row


def test_on_2603_without_training_operator_v1_the_runtime_is_what_is_missing(kubeflow_2603,
                                                                            capsys):
    """A stock 26.03 (Trainer v2, no TFJob CRD): red, naming the runtime's apply as the fix,
    until ``manifests/trainer-runtime`` is applied; then green, on TrainJobs, with the TrainJob
    path's permissions (granted by manifests/standalone-rbac) and Katib's TrainJob watch."""
    from fmnist_kfp.preflight import permissions_for

    cluster, kfp = kubeflow_2603
    cluster.delete("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime", "fmnist-tensorflow")
    assert preflight(cluster, kfp) == 1
    output = capsys.readouterr().out
    (missing,) = missing_lines(output)
    assert "ClusterTrainingRuntime fmnist-tensorflow" in missing and "missing" in missing
    assert f"fix: {RUNTIME_FIX}" in _row(output, "ClusterTrainingRuntime fmnist-tensorflow")
    assert _row(output, "TFJob (Training Operator v1)").startswith("note")
    assert "TrainJobs (Trainer v2) run the training" in output

    apply_runtime_on(cluster)
    assert preflight(cluster, kfp) == 0, capsys.readouterr().out
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
    granted = [line for line in output.splitlines() if " pipeline-runner may " in line]
    assert len(granted) == len(permissions_for("trainjob")) and all(
        line.startswith("ok") for line in granted), output


def _katib_config_without_trainjob(config_map: dict) -> None:
    # katib-config without TrainJob (cmd/katib-controller/v1beta1/main.go lines 80-85).
    config_map["data"]["katib-config.yaml"] = KATIB_CONFIG.replace(
        "      - TrainJob.v1alpha1.trainer.kubeflow.org\n", "")


TRAINJOB_PIECES = {
    "runtime": ("ClusterTrainingRuntime fmnist-tensorflow", RUNTIME_FIX, lambda c: c.delete(
        "trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime", "fmnist-tensorflow")),
    "jobset": ("JobSet", "manifests/third-party/jobset",
               lambda c: c.uninstall_crd("jobsets.jobset.x-k8s.io")),
    "katib-config-without-trainjob": (
        "Katib watches TrainJobs", "add TrainJob.v1alpha1.trainer.kubeflow.org",
        lambda c: c.edit("v1", "ConfigMap", "katib-config", NS, _katib_config_without_trainjob)),
    # Trainer installed after Katib (kubeflow/katib v0.19.0 trial_controller.go 103-127).
    "katib-started-before-trainjob-crd": (
        "Katib watches TrainJobs", RESTART,
        lambda c: c.katib_started(c.crd_created(TRAINJOB_CRD) - timedelta(minutes=20))),
    **{f"may-{verb}-{resource}{'-' + sub if sub else ''}": (
        f"may {verb} {resource}{'.' + group if group else ''}{'/' + sub if sub else ''}",
        "kubectl apply -k manifests/standalone-rbac",
        (lambda v, g, r: lambda c: c.drop_permission(v, g, r))(
            verb, group, f"{resource}/{sub}" if sub else resource))
       for verb, group, resource, sub, _ in __import__(
           "fmnist_kfp.preflight", fromlist=["TRAINJOB_PERMISSIONS"]).TRAINJOB_PERMISSIONS},
}


@pytest.mark.parametrize("piece", list(TRAINJOB_PIECES))
def test_each_missing_trainjob_piece_is_named_with_its_fix(kubeflow_2603, capsys, piece):
    cluster, kfp = kubeflow_2603
    name, fix, take_away = TRAINJOB_PIECES[piece]
    take_away(cluster)
    assert preflight(cluster, kfp) == 1
    output = capsys.readouterr().out
    (missing,) = missing_lines(output)
    assert name in missing, output
    fix_line = output.splitlines()[output.splitlines().index(missing) + 1]
    assert "fix: " in fix_line and fix in fix_line, fix_line


@pytest.mark.work_unit("kubeflow_api_server")  # its shape's fixture, by getfixturevalue
@pytest.mark.parametrize(("setting", "offered", "operator", "missing"), [
    # kubernetes.operator tfjob where only Trainer v2 runs: the TFJob API is missing, and the
    # runtime is not asked for (the run would not use it).
    ("tfjob", "trainjob", "tfjob", ["TFJob (Training Operator v1)"]),
    # kubernetes.operator trainjob where only TFJobs are served: the TrainJob API is missing.
    ("trainjob", "tfjob", "trainjob", ["TrainJob (Trainer v2)"]),
    ("trainjob", "both", "trainjob", []),
    ("auto", "both", "tfjob", []),
])
def test_the_operator_setting_decides_what_is_checked(request, setting, offered, operator,
                                                      missing):
    """``Cluster.operator`` (the run's ``kubernetes.operator``), through the train step's own
    rule (``training_operators.choose_operator``)."""
    from fmnist_kfp.preflight import Cluster, permissions_for
    from fmnist_kfp.preflight.training_operator import check_training_operator

    cluster, _ = request.getfixturevalue(
        {"tfjob": "kubeflow", "both": "kubeflow_and_trainer", "trainjob": "kubeflow_2603"}[offered])
    rows, chosen = check_training_operator(
        cluster.api_client, Cluster(NS, "pipeline-runner", "fmnist-data", "", NS,
                                        "fmnist-serving", False, operator=setting))
    assert chosen == operator
    assert [row.check for row in rows if row.ok is False] == missing, rows
    assert all(row.fix for row in rows if row.ok is False)
    assert ("ClusterTrainingRuntime fmnist-tensorflow" in {row.check for row in rows}) == (
        operator == "trainjob" and offered != "tfjob")
    assert permissions_for(operator) == (
        __import__("fmnist_kfp.preflight", fromlist=["PERMISSIONS"]).PERMISSIONS
        if operator == "tfjob" else permissions_for("trainjob"))


def test_with_both_operators_it_says_both_and_that_auto_picks_tfjob(kubeflow_and_trainer,
                                                                   capsys):
    cluster, kfp = kubeflow_and_trainer
    assert preflight(cluster, kfp) == 0, capsys.readouterr().out
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


def test_neither_operator_names_both_installs(kubeflow, capsys):
    cluster, kfp = kubeflow
    cluster.uninstall_crd(TFJOB_CRD)
    assert preflight(cluster, kfp) == 1
    output = capsys.readouterr().out
    (missing,) = missing_lines(output)
    assert "TFJob (Training Operator v1)" in missing
    row = _row(output, "TFJob (Training Operator v1)")
    assert "training-operator/upstream/overlays/kubeflow" in row and RUNTIME_FIX in row


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
