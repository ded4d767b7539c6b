"""Parameter-server training and the evaluator replica on loopback.

Rules relied on, each from upstream source:

* TensorFlow v2.21.0 ``tensorflow/python/distribute/parameter_server_strategy_v2.py`` (class
  docstring): the chief is the coordinator, workers and parameter servers run a
  ``tf.distribute.Server``; "failures of some workers do not prevent the cluster from continuing
  the work"; an optional evaluator reads the coordinator's checkpoints. ``_verify_args_and_config``
  refuses a cluster without a ``ps`` or a ``worker``.
* kubeflow/trainer v1.9.2 ``pkg/controller.v1/tensorflow/tensorflow.go`` ``genClusterSpec``
  (lines 157-184): the TF_CONFIG cluster lists every replica type of the TFJob, lowercased,
  ``ps`` and ``evaluator`` included, for every replica (the PS's own TF_CONFIG too).
* kubeflow/trainer v1.9.2 ``pkg/controller.v1/tensorflow/tfjob_controller.go`` ``UpdateJobStatus``
  (lines 444-458, 485-508): with a Chief, the job succeeds when the chief does (PS, Workers
  and Evaluator do not count); a failed pod of any type fails it.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import threading
import time

import pytest

from fmnist_kfp.errors import TrainingJobError, UserInputError
from fmnist_kfp.launcher.local_processes import LocalProcessLauncher, tf_config_for
from fmnist_kfp.settings.jobs import JobSettings
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.distributed import ClusterRole
from fmnist_kfp.training.training_job import TrainingJobSpec
from tests import launcher_harness as harness

pytestmark = pytest.mark.timeout(240)


def _spec(tmp_path, dataset, **overrides) -> TrainingJobSpec:
    values = dict(name="test-ps",
                  config=TrainingConfig(model_type="batchnorm", epochs=6, batch_size=32),
                  num_workers=2, strategy="parameter_server", num_ps=1, max_restarts=0)
    return harness.job_spec(tmp_path, dataset, **{**values, **overrides})


def test_a_parameter_server_job_has_a_chief_ps_and_an_evaluator(tmp_path):
    spec = _spec(tmp_path, tmp_path, evaluator=True)
    assert spec.replica_counts() == {"Chief": 1, "Worker": 2, "PS": 1, "Evaluator": 1}
    assert spec.task_list() == [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0),
                                ("evaluator", 0)]


def test_every_task_gets_the_whole_cluster_as_the_operator_writes_it(tmp_path):
    """genClusterSpec: ps and evaluator are in every replica's cluster, the PS's included."""
    tasks = _spec(tmp_path, tmp_path, evaluator=True).task_list()
    ports = [1, 2, 3, 4, 5]
    ps_config = tf_config_for(tasks, ports, tasks.index(("ps", 0)))
    assert ps_config["cluster"] == {
        "chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"],
        "ps": ["127.0.0.1:4"], "evaluator": ["127.0.0.1:5"]}
    assert ps_config["task"] == {"type": "ps", "index": 0}
    assert ps_config["environment"] == "cloud"


def test_cluster_role_reads_the_strategy_and_leaves_the_evaluator_out(monkeypatch, tmp_path):
    tasks = _spec(tmp_path, tmp_path, evaluator=True).task_list()
    for me, (task_type, _) in enumerate(tasks):
        monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config_for(tasks, [1, 2, 3, 4, 5], me)))
        role = ClusterRole.from_env()
        assert role.strategy == "parameter_server"
        assert role.has_evaluator
        assert "evaluator" not in role.training_cluster()
        assert role.serves_only == (task_type in ("worker", "ps"))
        assert role.is_chief == (task_type == "chief")
        assert role.is_evaluator == (task_type == "evaluator")
    mirrored = [("worker", 0), ("worker", 1), ("evaluator", 0)]
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config_for(mirrored, [1, 2, 3], 0)))
    role = ClusterRole.from_env()
    assert role.strategy == "multi_worker_mirrored" and not role.serves_only and role.is_chief


@pytest.mark.parametrize("values, fix", [
    ({"strategy": "parameter_server", "num_ps": 0}, "set num_ps to 1 or more"),
    ({"strategy": "parameter_server", "num_workers": 0}, "set num_workers to 1 or more"),
    ({"strategy": "parameter_servers"}, "strategy"),
])
def test_a_parameter_server_job_without_ps_or_workers_is_refused_naming_the_fix(values, fix):
    problems = JobSettings(**values).problems()
    assert any(fix in p for p in problems), problems


def test_the_job_spec_refuses_a_parameter_server_job_without_ps(tmp_path):
    with pytest.raises(UserInputError, match="set num_ps to 1 or more"):
        _spec(tmp_path, tmp_path, num_ps=0)  # refused as it is made


def test_the_evaluator_scores_the_ingested_validation_split(synthetic_dataset):
    """The evaluator reads the split ingestion set aside, all of it, through one function."""
    from fmnist_kfp.dataset.pipeline import validation_dataset, validation_size
    from fmnist_kfp.dataset.records import read_metadata

    ingested = read_metadata(str(synthetic_dataset))["splits"]["validation"]["num_examples"]
    assert validation_size(str(synthetic_dataset)) == ingested > 0
    batches = list(validation_dataset(str(synthetic_dataset), 64))
    assert sum(len(labels) for _, labels in batches) == ingested


def test_a_failing_chief_fails_the_job_and_stops_ps_and_workers(tmp_path):
    """The chief's exit status is the job's; the servers, which never exit on their own, are
    stopped (here the chief fails at once: no dataset)."""
    (tmp_path / "empty").mkdir()
    launcher = LocalProcessLauncher(out=io.StringIO())
    with pytest.raises(TrainingJobError) as failure:
        launcher.run(_spec(tmp_path, tmp_path / "empty"))
    assert "chief-0 failed with exit code 1" in str(failure.value)
    assert "metadata.json is missing" in str(failure.value)
    assert harness.no_processes_left(launcher)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_training_goes_on_after_a_worker_is_killed_and_the_evaluator_scores_every_epoch(
    tmp_path, synthetic_dataset
):
    """Worker 1 is SIGKILLed once the first epoch is done; the coordinator finishes every
    epoch on the remaining worker (no restart), the evaluator scores every epoch's checkpoint
    and finishes, the chief exports the usual SavedModel, and no process is left."""
    log = io.StringIO()
    launcher = LocalProcessLauncher(out=log)
    spec = _spec(tmp_path, synthetic_dataset, evaluator=True)
    outcome: dict = {}
    thread = threading.Thread(target=lambda: outcome.update(result=launcher.run(spec)))
    thread.start()
    history = tmp_path / "model" / "history.jsonl"
    deadline = time.time() + 300
    while not (history.exists() and history.read_text().strip()) and time.time() < deadline:
        time.sleep(0.1)
    assert history.exists(), "no epoch finished:\n" + log.getvalue()
    victim = next(w for w in launcher.workers if w.name == "worker-1")
    os.kill(victim.process.pid, signal.SIGKILL)
    epochs_before_kill = len(history.read_text().splitlines())
    thread.join(timeout=400)
    assert not thread.is_alive(), log.getvalue()
    output = log.getvalue()
    assert "result" in outcome, output
    result = outcome["result"]
    assert result.restarts == 0
    assert "worker-1 exited (signal 9); the chief coordinates on without it" in output
    assert [e["epoch"] for e in result.result["history"]] == [1, 2, 3, 4, 5, 6]
    assert epochs_before_kill < 6  # the kill landed while epochs were left to train
    assert result.result["strategy"] == "parameter_server"
    assert result.result["final_metrics"]["accuracy"] > 0.8
    assert [e["epoch"] for e in result.result["evaluation"]] == [1, 2, 3, 4, 5, 6]
    assert result.result["evaluation"][-1]["val_accuracy"] > 0.5
    assert "evaluator: training is done; scored 6 checkpoint(s)" in output
    import tensorflow as tf

    loaded = tf.saved_model.load(str(tmp_path / "model" / "1"))
    assert set(loaded.signatures) == {"serving_default", "serving_pixels"}
    assert harness.no_processes_left(launcher)
    # The selection report shows the evaluator's per-epoch validation accuracy.
    from fmnist_kfp.selection.select import select_best

    selection = select_best(str(synthetic_dataset), [str(tmp_path / "model")],
                            str(tmp_path / "best"))
    assert "## Validation accuracy per epoch (evaluator)" in selection.markdown
    scored = {e["epoch"]: e["val_accuracy"] for e in result.result["evaluation"]}
    for epoch, accuracy in scored.items():
        assert f"| {epoch} | {accuracy:.4f} |" in selection.markdown
    assert "<h2>Validation accuracy per epoch (evaluator)</h2>" in selection.html


def test_the_report_plots_and_tabulates_the_evaluators_scores():
    from fmnist_kfp.selection.report import html_report, markdown_report

    def candidate(model_type, evaluation):
        return {"model_type": model_type, "validation_accuracy": 0.9,
                "validation_per_class_accuracy": [0.9] * 10, "test_accuracy": 0.9,
                "parameters": 10, "epochs": 2,
                "train_seconds": 1.0, "final_metrics": {"accuracy": 0.9},
                "per_class_accuracy": [0.9] * 10, "confusion_matrix": [[1] * 10] * 10,
                "history": [{"epoch": 1, "loss": 1.0, "accuracy": 0.8},
                            {"epoch": 2, "loss": 0.5, "accuracy": 0.9}],
                "evaluation": evaluation}

    scored = [{"epoch": 1, "val_loss": 0.9, "val_accuracy": 0.81},
              {"epoch": 2, "val_loss": 0.6, "val_accuracy": 0.875}]
    candidates = [candidate("batchnorm", scored), candidate("basic", [])]
    markdown = markdown_report(candidates, "batchnorm", 50, 100)
    assert "| epoch | batchnorm |\n|---|---|\n| 1 | 0.8100 |\n| 2 | 0.8750 |" in markdown
    page = html_report(candidates, "batchnorm", 50, 100)
    assert "<tr><td>2</td><td>0.8750</td></tr>" in page
    without = [candidate("basic", [])]
    assert "evaluator" not in markdown_report(without, "basic", 50, 100)
    assert "evaluator" not in html_report(without, "basic", 50, 100)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_parameter_server_job_without_an_evaluator_validates_inline(tmp_path,
                                                                     synthetic_dataset):
    """A Katib trial scores ``val_accuracy`` from the chief's epoch lines: under
    ParameterServerStrategy the chief evaluates the held-out split itself after every epoch."""
    log = io.StringIO()
    launcher = LocalProcessLauncher(out=log)
    spec = _spec(tmp_path, synthetic_dataset,
                 config=TrainingConfig(model_type="basic", epochs=2, batch_size=32))
    result = launcher.run(spec).result
    assert [sorted(e) for e in result["history"]][0] == sorted(
        ["epoch", "loss", "accuracy", "val_loss", "val_accuracy", "seconds", "finished_at",
         "images_per_second"])
    assert re.search(r"\[test-ps/chief-0\] \S+Z epoch=2 epochs=2 .*val_accuracy=", log.getvalue())
    assert result["evaluation"] == []
    assert harness.no_processes_left(launcher)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("workers", [1, 2])
def test_a_mirrored_job_with_an_evaluator_scores_every_epoch(tmp_path, synthetic_dataset,
                                                             workers):
    """The evaluator beside MultiWorkerMirroredStrategy: the workers' strategy leaves it out of
    its cluster (one worker then trains without one, as a one-replica TFJob), every worker
    takes part in writing each epoch's checkpoint (reading batch-norm statistics is an
    all-reduce), and the evaluator scores each one and finishes."""
    log = io.StringIO()
    launcher = LocalProcessLauncher(out=log)
    spec = _spec(tmp_path, synthetic_dataset, strategy="multi_worker_mirrored", num_ps=0,
                 num_workers=workers, evaluator=True,
                 config=TrainingConfig(model_type="batchnorm", epochs=2, batch_size=32))
    result = launcher.run(spec).result
    output = log.getvalue()
    assert result["strategy"] == "multi_worker_mirrored"
    assert [e["epoch"] for e in result["evaluation"]] == [1, 2], output
    assert "val_accuracy" not in result["history"][0]  # the evaluator validates, not fit
    assert result["train_examples"] == 1800  # 200 set aside at ingestion
    assert not list((tmp_path / "model" / "checkpoints").glob("workertemp_*"))
    assert harness.no_processes_left(launcher)
