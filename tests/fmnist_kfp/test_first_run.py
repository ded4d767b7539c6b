"""docs/first-run.md, run as written: every command of the walk-through against a stand-in of a
stock multi-user Kubeflow (1.11.0 and 26.03), every output shown compared with what the command
printed, and the step log excerpts compared with what the launchers print against their
stand-ins. A command the page shows and this file cannot run fails the test: nothing on the page
goes unexercised.

The stand-in Kubeflow is the example install as kubeflow/manifests leaves it at each tag
(``example/kustomization.yaml``: Katib, KServe and KFP installed, Training Operator v1 commented
out — v1.11.0 lines 93-94, 26.03 lines 90-91), with a profile ``team-a`` as the profile
controller makes it (``tests/kubeflow_roles``) and katib-controller started at install time.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from fmnist_kfp.cli import main as cli_main
from tests import ROOT
from tests.first_run_doc import Block, blocks, contains_in_order, matches
from tests.fmnist_kfp.preflight.cluster import KATIB_CONFIG, katib_controller_pod
from tests.kubeflow_roles import kubeflow_profile, training_operator_roles
from tests.setup_manifests import build
from tests.standins.kfp import KfpStandIn
from tests.standins.kserve import KServeStandIn

NAMESPACE = "team-a"
HOST = "http://localhost:8080/pipeline"  # what the page's port-forward serves
INSTALLED = "2026-01-05T10:00:00Z"  # the example install: katib-controller starts
LATER = "2026-01-05T11:00:00Z"  # the page's commands, in order, after it
RESTARTED = "2026-01-05T11:05:00Z"
TRAINING_OPERATOR = ("github.com/kubeflow/manifests/applications/training-operator/upstream/"
                     "overlays/kubeflow?ref={tag}")


class FreshKubeflow:
    """The stand-ins as a stock Kubeflow ``tag`` after its example install, and what each
    command of the page does to them: its step 1 serves TFJobs and stores the Training Operator
    overlay's CRD and roles (``tests/kubeflow_roles/training-operator-<tag>.yaml``)."""

    def __init__(self, standin: KServeStandIn, kfp: KfpStandIn, tag: str, monkeypatch):
        self.standin, self.kfp, self.tag, self.monkeypatch = standin, kfp, tag, monkeypatch
        kubeflow_profile(standin, NAMESPACE, tag)
        standin.served.discard(("kubeflow.org", "v1", "tfjobs"))  # no Training Operator v1
        standin.put(katib_controller_pod(INSTALLED))
        standin.put({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "katib-config", "namespace": "kubeflow"},
                     "data": {"katib-config.yaml": KATIB_CONFIG}})
        self.forwarded = False

    # -- the page's commands ---------------------------------------------------------------

    def run(self, argv: list[str], capsys) -> tuple[int, str]:
        """Runs one command of the page; returns its exit code and what it printed."""
        line = " ".join(argv)
        if argv[:3] == ["kubectl", "apply", "--server-side"]:
            assert argv[3:] == ["-k", TRAINING_OPERATOR.format(tag=self.tag)], (
                f"the page installs another Training Operator than Kubeflow {self.tag}'s: {line}")
            self.standin.served.add(("kubeflow.org", "v1", "tfjobs"))
            self.standin.put({"apiVersion": "apiextensions.k8s.io/v1",
                              "kind": "CustomResourceDefinition",
                              "metadata": {"name": "tfjobs.kubeflow.org"}})
            key = ("CustomResourceDefinition", "", "tfjobs.kubeflow.org")
            self.standin.objects[key]["metadata"]["creationTimestamp"] = LATER
            # The overlay's kubeflow-training-roles.yaml (its kustomization.yaml L4-6):
            # kubeflow-training-edit, aggregated into the profile's kubeflow-edit.
            for role in training_operator_roles(self.tag):
                self.standin.put(role)
            return 0, ""
        if argv == ["kubectl", "rollout", "restart", "deployment/katib-controller", "-n",
                    "kubeflow"]:
            pod = katib_controller_pod(RESTARTED)
            self.standin.objects[("Pod", "kubeflow", pod["metadata"]["name"])].update(pod)
            return 0, ""
        if argv[:3] == ["kubectl", "apply", "-k"] and argv[4:] == ["-n", NAMESPACE]:
            base = argv[3].removeprefix("manifests/")
            for obj in build(base, namespace=NAMESPACE):
                self.standin.put(obj)
            if base == "pvc":  # the storage class binds it
                claim = self.standin.objects[("PersistentVolumeClaim", NAMESPACE, "fmnist-data")]
                claim["status"] = {"phase": "Bound", "accessModes": ["ReadWriteMany"]}
            return 0, ""
        if argv == ["kubectl", "wait", "--for=condition=complete",
                    "job/fmnist-data-permissions", "-n", NAMESPACE]:
            # The Job manifests/pvc applied; what it runs is tested in test_setup_manifests.
            assert ("Job", NAMESPACE, "fmnist-data-permissions") in self.standin.objects
            return 0, ""
        if argv == ["kubectl", "port-forward", "-n", "istio-system",
                    "svc/istio-ingressgateway", "8080:80"]:
            self.forwarded = True  # HOST now reaches the KFP API
            return 0, ""
        if argv[:2] == ["export", "KF_PIPELINES_TOKEN=$(kubectl"] and argv[2:] == [
                "-n", NAMESPACE, "create", "token", "default-editor)"]:
            self.monkeypatch.setenv("KF_PIPELINES_TOKEN", "token-of-default-editor")
            return 0, ""
        if argv[0] == "fmnist-kfp":
            assert self.forwarded, "the page calls the KFP API before reaching it"
            args = [self.kfp.url if arg == HOST else arg for arg in argv[1:]]
            if args[0] == "preflight":  # kubectl's own config, here the stand-in's
                args += ["--kubeconfig", str(self.standin.kubeconfig(NAMESPACE))]
            capsys.readouterr()
            code = cli_main(args)
            captured = capsys.readouterr()
            return code, (captured.out + captured.err).replace(self.kfp.url, HOST)
        raise AssertionError(f"docs/first-run.md shows a command no test runs: {line}")


@pytest.fixture(params=["v1.11.0", "26.03"])
def kubeflow(request, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("FMNIST_CREDENTIALS_SECRET", "FMNIST_PVC_NAME", "KF_PIPELINES_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    with KServeStandIn(rbac=True) as standin, KfpStandIn(multi_user=True) as kfp:
        yield FreshKubeflow(standin, kfp, request.param, monkeypatch)


def _page_for(tag: str) -> list[Block]:
    """The page as a reader on ``tag`` follows it (it says: replace ?ref=v1.11.0)."""
    text = ROOT.joinpath("docs", "first-run.md").read_text()
    return blocks(text.replace("?ref=v1.11.0", f"?ref={tag}"))


def _check(block: Block, cluster: FreshKubeflow, capsys, exit_code: int) -> None:
    for command in block.commands:
        code, output = cluster.run(command.argv, capsys)
        assert code == exit_code, f"$ {command.line}\n{output}"
        assert matches(command.expected, output), (
            f"$ {command.line}\nthe page shows:\n{command.expected}\nit printed:\n{output}")


def test_the_walk_through_runs_as_written(kubeflow, capsys):
    """Each step block in order, every command succeeding with the output the page shows; one
    run, and the pipeline private to the profile's namespace."""
    steps = [b for b in _page_for(kubeflow.tag) if b.kind == "step"]
    assert len(steps) >= 6
    for block in steps:
        _check(block, kubeflow, capsys, exit_code=0)
    [pipeline] = kubeflow.kfp.pipelines.values()
    assert pipeline.get("namespace") == NAMESPACE
    assert len(kubeflow.kfp.runs) == 1  # its outcome, SUCCEEDED, is in the output shown
    assert all(call["authorization"] == "Bearer token-of-default-editor"
               for call in kubeflow.kfp.calls if call["path"].startswith("/apis/v2beta1"))


def test_without_the_restart_preflight_says_so_as_the_page_shows(kubeflow, capsys):
    """The page's stale-Katib example: every step but the katib-controller restart, then the
    preflight it shows, exiting 1."""
    for block in _page_for(kubeflow.tag):
        if block.kind == "step":
            for command in block.commands:
                if "rollout restart" in command.line:
                    continue
                if command.argv[0] == "fmnist-kfp" and command.argv[1] != "preflight":
                    break  # only the setup before the check
                kubeflow.run(command.argv, capsys)
    [stale] = [b for b in _page_for(kubeflow.tag) if b.kind == "stale-katib"]
    _check(stale, kubeflow, capsys, exit_code=1)


# -- what the steps print ------------------------------------------------------------------
# The run of the page's step 4 (`run --namespace team-a --epochs 12`, the run run-1): its
# training jobs train 12 epochs in team-a, and its deploy step serves the selected model from
# KFP's object store (the model artifact's URI, minio:// read as s3://) in team-a.
EPOCHS = 12
MODEL_URI = ("s3://mlpipeline/v2/artifacts/fashion-mnist-training/run-1/select-best-model/7/"
             "best_model")


def _train_log(tmp_path: Path, cluster) -> str:
    """The training step's TFJob launcher on the real Training Operator (tests/cluster.py) in
    the page's namespace, as the Role's ServiceAccount, its two workers of the image
    ``scripted-pod`` (tests/scripted_pod.py): worker 0, the master, prints the trainer's line
    for each of the run's epochs."""
    from kubeflow.training import TrainingClient

    from fmnist_kfp.launcher.tfjob_launcher import TFJobLauncher
    from fmnist_kfp.settings.jobs import KubernetesSettings
    from fmnist_kfp.settings.training import TrainingConfig
    from fmnist_kfp.training.training_job import TrainingJobSpec
    from tests.cluster import SCRIPTED_IMAGE, leave_scripted_result

    leave_scripted_result(tmp_path / "model")
    log = "".join(
        f"2026-01-05T11:{20 + epoch // 2:02d}:{epoch % 2 * 30 + 1:02d}.000000Z epoch={epoch} "
        f"epochs={EPOCHS} loss={0.52 - 0.02 * epoch:.4f} accuracy={0.81 + 0.006 * epoch:.4f} "
        f"val_loss={0.39 - 0.005 * epoch:.4f} val_accuracy={0.86 + 0.004 * epoch:.4f}\n"
        for epoch in range(1, EPOCHS + 1))
    cluster.install("TRAINING_OPERATOR_V1")
    cluster.grant_pipeline_runner(NAMESPACE)
    cluster.add_claim(NAMESPACE)
    cluster.script_pods(NAMESPACE, {
        "fmnist-basic-3f2a9c-worker-0": {"before": 5, "log": log, "seconds": 3},
        "*": {"seconds": 8}})
    out = io.StringIO()
    try:
        TFJobLauncher(KubernetesSettings(image=SCRIPTED_IMAGE, namespace=NAMESPACE,
                                         pvc_name="fmnist-data", cpu="100m", memory="256Mi"),
                      training_client=TrainingClient(
                          client_configuration=cluster.configuration_as(NAMESPACE,
                                                                        "pipeline-runner"),
                          namespace=NAMESPACE, job_kind="TFJob"),
                      poll_seconds=0.5, timeout_seconds=120, out=out).run(TrainingJobSpec(
                          name="fmnist-basic-3f2a9c",
                          config=TrainingConfig(model_type="basic", epochs=EPOCHS),
                          data_dir="/mnt/fmnist/datasets/0c1d", work_dir=str(tmp_path / "model"),
                          export_dir=str(tmp_path / "model" / "1"), num_workers=2))
    finally:
        cluster.delete_namespace(NAMESPACE)
    return out.getvalue()


def _tune_log(tmp_path: Path) -> str:
    """The tuning step's Katib launcher against the Katib stand-in's scripted Experiment."""
    from tests.katib import test_katib_launcher as katib

    out = io.StringIO()
    with katib.KatibStandIn(katib.PROGRESS, [katib.FIRST, katib.BEST, katib.STOPPED,
                                             katib.BROKEN]) as standin:
        katib._launcher(standin, out=out).run(katib._settings(tmp_path), katib._space(),
                                               katib.DATA_DIR)
    return out.getvalue()


def _deploy_log(tmp_path: Path) -> str:
    """The deploy step of the first run: the model from KFP's object store served in team-a
    (Serverless, Kubeflow's default), with the ServiceAccount and S3 Secret of step 2's
    ``manifests/serving-credentials``, verified, then all traffic."""
    from fmnist_kfp.serving.deploy.kserve_deployer import deploy_with_kserve
    from fmnist_kfp.serving.deploy.rollout_base import Acceptance, Candidate
    from fmnist_kfp.settings.serving import KServeSettings
    from tests.serving.deploy.test_kserve_rollout import Verifier

    lines: list[str] = []
    with KServeStandIn() as standin:
        for obj in build("serving-credentials", namespace=NAMESPACE):
            standin.put(obj)
        settings = KServeSettings(name="fashion-mnist", namespace=NAMESPACE,  # model_name
                                  image="ghcr.io/fmnist-kfp/fmnist-kfp:0.2.0",
                                  service_account="fmnist-serving", ready_timeout_seconds=5)
        result = deploy_with_kserve(
            settings, Candidate(MODEL_URI, 0.9087, needs_credentials=True),
            Acceptance(0.005, Verifier(standin, default=0.9087)),
            client=standin.kserve_client(NAMESPACE), poll_seconds=0.005, log=lines.append)
    assert result.action == "created", result
    return "\n".join(lines)


PRINTED_BY = {"tune": _tune_log, "deploy": _deploy_log}


def test_the_steps_print_for_the_run_the_page_starts():
    """The step logs above are the page's run's: its epochs, its namespace, its run (the
    stand-in KFP's first run id, which the page's ``run`` output shows)."""
    [run] = [command for block in blocks() if block.kind == "step"
             for command in block.commands if command.argv[:2] == ["fmnist-kfp", "run"]]
    argv = run.argv
    assert argv[argv.index("--epochs") + 1] == str(EPOCHS)
    assert argv[argv.index("--namespace") + 1] == NAMESPACE
    assert '"run_id": "run-1"' in run.expected and "/run-1/" in MODEL_URI


@pytest.mark.parametrize("step", list(PRINTED_BY))
def test_what_each_step_prints_is_what_the_page_shows(step, tmp_path):
    [block] = [b for b in blocks() if b.kind == f"printed-by {step}"]
    printed = PRINTED_BY[step](tmp_path)
    assert contains_in_order(block.body, printed), (
        f"the page shows for {step}:\n{block.body}\nit printed:\n{printed}")


def test_what_the_train_step_prints_on_the_real_operator_is_what_the_page_shows(
        real_cluster, tmp_path):
    real_cluster.require_node()
    [block] = [b for b in blocks() if b.kind == "printed-by train"]
    printed = _train_log(tmp_path, real_cluster)
    assert contains_in_order(block.body, printed), (
        f"the page shows for train:\n{block.body}\nit printed:\n{printed}")


def test_every_block_of_the_page_is_run_by_a_test():
    kinds = {b.kind for b in blocks()}
    # "trainjob": the TrainJob path, run by tests/fmnist_kfp/preflight/test_training_operator.py
    assert kinds == {"step", "stale-katib", "trainjob", "printed-by train"} | {
        f"printed-by {s}" for s in PRINTED_BY}
    text = ROOT.joinpath("docs", "first-run.md").read_text()
    # Every fenced block is marked, so none escapes these tests.
    fences = re.findall(r"^```[a-z]+$", text, re.M)
    assert len(fences) == len(blocks())
