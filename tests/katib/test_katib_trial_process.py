"""A Katib trial's primary pod, for real: the trial command from the built Experiment, wrapped as
Katib's pod webhook wraps it (tests/standins/katib.py ``katib_wrap``, from kubeflow/katib v0.19.0
pkg/webhook/v1beta1/pod/utils.go), run by /bin/sh as the container would run it. What the
training operator then does with the container's exit code is its ExitCode rule (kubeflow/trainer
v1.9.2 pkg/util/train/train_util.go lines 24-26: >= 128 retryable, 1-127 permanent)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.kubernetes.experiment import build_experiment
from fmnist_kfp.kubernetes.manifest import to_manifest
from fmnist_kfp.settings.jobs import KubernetesSettings
from fmnist_kfp.tuning.experiment_settings import EarlyStopping, ExperimentSettings
from fmnist_kfp.tuning.search_space import SearchSpace
from tests import ROOT
from tests.standins.katib import katib_wrap, kubernetes_expand

REPO = ROOT
WAIT = 60  # seconds: the most any step here waits


def retryable(code: int) -> bool:
    """kubeflow/trainer v1.9.2 pkg/util/train/train_util.go IsRetryableExitCode."""
    return code >= 128


def _trial_command(tmp_path: Path, early_stopping: bool, data_dir: str = "",
                   **values: str) -> list[str]:
    """The primary container's command of a trial, as Katib renders it from our Experiment
    (on ``data_dir``; by default one that does not exist)."""
    settings = ExperimentSettings(
        name="fmnist-tune", model_type="dropout", max_trial_count=4, parallel_trial_count=2,
        kubernetes=KubernetesSettings(image="registry.example/fmnist:1.0", namespace="team-a",
                                      pvc_name="fmnist-pvc", mount_path=str(tmp_path)),
        early_stopping=EarlyStopping() if early_stopping else None)
    manifest = to_manifest(build_experiment(settings, SearchSpace.default("tpe", "dropout"),
                                            data_dir or str(tmp_path / "no-dataset")))
    text = json.dumps(manifest["spec"]["trialTemplate"]["trialSpec"])
    defaults = {"learning_rate": "0.001", "batch_size": "64", "filters": "16",
                "dropout_rate": "0.3", "trialName": "fmnist-tune-a1b2c3d4", **values}
    for name, value in defaults.items():
        text = text.replace("${trialParameters." + name + "}", value)
    worker = json.loads(text)["spec"]["tfReplicaSpecs"]["Worker"]
    return worker["template"]["spec"]["containers"][0]["command"]


class Container:
    """The wrapped command run by sh in a session of its own, as the container's process."""

    def __init__(self, command: list[str], tmp_path: Path, early_stopping: bool):
        self.dir = tmp_path / "katib"  # stands for the /var/log/katib emptyDir
        self.dir.mkdir()
        wrapped = katib_wrap(command, str(self.dir / "metrics.log"), early_stopping)
        env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3"}
        self.shell = subprocess.Popen(wrapped, env=env, cwd=tmp_path, start_new_session=True)

    def trainer(self) -> psutil.Process:
        """The trainer process, once it exists."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            for child in psutil.Process(self.shell.pid).children(recursive=True):
                try:
                    if "fmnist_kfp.training.trainer" in " ".join(child.cmdline()) and \
                            "fmnist_kfp.katib.trial_process" not in " ".join(child.cmdline()):
                        return child
                except psutil.NoSuchProcess:
                    continue
            assert self.shell.poll() is None, "the container ended before the trainer started"
            time.sleep(0.05)  # polling for a process to appear; bounded by WAIT
        raise AssertionError("the trainer never started")

    def exit_code(self) -> int:
        code = self.shell.wait(timeout=WAIT)
        return 128 - code if code < 0 else code

    def marker(self) -> str:
        path = self.dir / f"{self.shell.pid}.pid"
        return path.read_text().strip() if path.exists() else ""

    def close(self) -> None:
        try:
            os.killpg(self.shell.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def container_factory(tmp_path, synthetic_dataset):
    """Trial containers on a real dataset: their trainer lives for seconds, so a signal sent
    to it arrives while it runs (on a missing dataset it could end on its own first, exit 1,
    before a loaded machine's test signals it)."""
    made = []

    def make(early_stopping: bool, **values) -> Container:
        container = Container(_trial_command(tmp_path, early_stopping,
                                             str(synthetic_dataset), **values), tmp_path,
                              early_stopping)
        made.append(container)
        return container

    yield make
    for container in made:
        container.close()


def test_the_wrapper_is_katibs():
    """katib_wrap reproduces the strings of Katib's own test (pkg/webhook/v1beta1/pod/
    inject_webhook_test.go v0.19.0 lines 112 and 210-214) before the kubelet's expansion."""
    metrics = "/var/log/katib/metrics.log"
    [_, _, plain] = katib_wrap(["python", "main.py"], metrics, False)
    assert plain == kubernetes_expand(
        f"python main.py 1>{metrics} 2>&1 && echo completed > /var/log/katib/$$$$.pid")
    [_, _, early] = katib_wrap(["python", "main.py"], metrics, True)
    assert early == kubernetes_expand(
        f"python main.py 1>{metrics} 2>&1 || if test -f /var/log/katib/$$$$.pid && "
        "[ $(head -n 1 /var/log/katib/$$.pid) = early-stopped ]; then echo Training Container "
        "was Early Stopped; else echo Training Container was Failed; exit 1; fi && echo "
        "completed > /var/log/katib/$$$$.pid")
    # The kubelet: $$ -> $, an undefined $(...) kept as written.
    assert "test -f /var/log/katib/$$.pid && [ $(head -n 1 /var/log/katib/$$.pid)" in early


def test_the_trial_command_is_one_shell_safe_simple_command(tmp_path):
    command = _trial_command(tmp_path, True)
    assert command[:4] == ["python", "-m", "fmnist_kfp.katib.trial_process", "--"]
    assert command[4:7] == ["python", "-m", "fmnist_kfp.training.trainer"]
    spaced = ExperimentSettings(  # a path Katib's unquoted sh -c string would split
        name="fmnist-tune", model_type="dropout", max_trial_count=4, parallel_trial_count=2,
        kubernetes=KubernetesSettings(image="r/f:1", namespace="team-a", pvc_name="p",
                                      mount_path="/mnt/my data"))
    with pytest.raises(UserInputError, match="spaces or shell characters"):
        build_experiment(spaced, SearchSpace.default("tpe", "dropout"), "/mnt/my data/d")


@pytest.mark.parametrize("early_stopping", [True, False])
def test_a_trainer_killed_by_the_kernel_stays_retryable(container_factory, early_stopping):
    """The out-of-memory killer (or a crash) ends the trainer with SIGKILL. With early stopping
    Katib's wrapper would turn that into exit 1, a permanent failure (at 1cd2394 the trial
    failed); fmnist_kfp.katib.trial_process ends the wrapper itself, so the container exits >=
    128."""
    container = container_factory(early_stopping)
    container.trainer().kill()
    code = container.exit_code()
    assert retryable(code), f"exit code {code}: the operator would fail the trial"
    assert container.marker() != "completed"  # the collector reports nothing for it


def test_early_stopping_still_stops_the_trial_cleanly(container_factory):
    """Katib's collector writes early-stopped to <wrapper pid>.pid and terminates the wrapper's
    only child, refusing more than one (cmd/metricscollector/v1beta1/file-metricscollector/
    main.go v0.19.0 lines 268-293); the wrapper then exits 0 and marks the run completed."""
    container = container_factory(True)
    container.trainer()
    (container.dir / f"{container.shell.pid}.pid").write_text("early-stopped")
    children = psutil.Process(container.shell.pid).children()
    assert len(children) == 1, [c.cmdline() for c in children]
    trainer = container.trainer()
    children[0].terminate()
    trainer.wait(timeout=WAIT)
    # Held: the wrapper outlives the trainer until the pod is deleted (trial_process's
    # docstring), so that the collector's report of the stop is not cut short.
    with pytest.raises(subprocess.TimeoutExpired):
        container.shell.wait(timeout=3)
    assert container.marker() == "early-stopped"
    children[0].terminate()  # the pod's deletion, once Katib has marked the trial
    assert container.exit_code() == 0
    assert container.marker() == "completed"


def test_an_over_budget_trial_waits_for_the_collectors_verdict(container_factory):
    """A trial over the parameter budget prints the objective 0 and, under early stopping,
    waits for the collector: stopped on it, it is held as any early-stopped trial."""
    container = container_factory(True, filters="512")
    deadline = time.monotonic() + WAIT
    log = container.dir / "metrics.log"
    while "val_accuracy=0.0000" not in (log.read_text() if log.exists() else ""):
        assert container.shell.poll() is None, "ended before the collector could decide"
        assert time.monotonic() < deadline
        time.sleep(0.1)
    (container.dir / f"{container.shell.pid}.pid").write_text("early-stopped")
    [process] = psutil.Process(container.shell.pid).children()
    process.terminate()
    with pytest.raises(subprocess.TimeoutExpired):
        container.shell.wait(timeout=3)
    process.terminate()
    assert container.exit_code() == 0


def test_a_deleted_pod_stays_retryable(container_factory):
    """Pod deletion or preemption: the kubelet sends SIGTERM to the container's process, the
    wrapper shell, which dies before it evaluates || (upstream-training-katib.md §9)."""
    container = container_factory(True)
    container.trainer()
    container.shell.send_signal(signal.SIGTERM)
    assert container.exit_code() == 128 + signal.SIGTERM


@pytest.mark.parametrize("early_stopping", [True, False])
def test_a_bug_stays_permanent(container_factory, early_stopping):
    """A bad flag value: the trainer exits 2; the operator must not retry it."""
    container = container_factory(early_stopping, batch_size="not-a-number")
    code = container.exit_code()
    assert 1 <= code < 128 and not retryable(code)
    assert "batch" in (container.dir / "metrics.log").read_text()  # argparse said why
