"""The real local run (tests/pipelines/conftest.py: the real Fashion-MNIST, a few thousand
training images) and what it must show: batch prediction of the 10,000 test images with the
selection's test accuracy exactly, the lineage chain from the served model back to the
dataset, and TensorBoard serving the training logs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fmnist_kfp.cli import main as cli_main
from fmnist_kfp.lineage import content_digest
from tests.fmnist_kfp.kubernetes.test_tensorboard import served_scalar_tags


@pytest.mark.slow
def test_batch_prediction_of_the_test_split_matches_the_selection_exactly(real_run):
    summary = real_run.summary
    batch = summary["batch_prediction"]
    assert batch["rows"] == batch["predicted"] == batch["labelled"] == 10_000
    assert batch["errors"] == 0 and batch["workers"] == 2
    assert batch["accuracy"] == summary["best_test_accuracy"]
    rows = [json.loads(line) for part in sorted(Path(batch["path"]).glob("*.jsonl"))
            for line in part.read_text().splitlines()]
    assert len({row["id"] for row in rows}) == 10_000
    correct = sum(row["class"] == row["label"] for row in rows)
    assert correct / 10_000 == pytest.approx(summary["best_test_accuracy"], abs=1e-9)


@pytest.mark.slow
def test_the_lineage_names_the_dataset_the_training_the_selection_and_the_served_model(
        real_run, capsys):
    root, summary = real_run.root, real_run.summary
    nodes = summary["lineage"]
    tasks = [node.get("task") for node in nodes]
    assert tasks[:4] == ["deploy-model", "select-best-model", "ingest-fashion-mnist",
                         "train-model"]
    deploy, select, dataset, train = nodes[:4]
    best = Path(summary["best_model_path"])
    assert deploy["served"]["version"] == content_digest(str(best)) == select["digest"]
    assert deploy["served"]["url"] == summary["deployment"]["url"]
    assert select["parameters"]["model_type"] == summary["best_model_type"]
    assert select["parameters"]["test_accuracy"] == summary["best_test_accuracy"]
    assert train["parameters"]["model_type"] == summary["best_model_type"]
    assert train["parameters"]["hyperparameters"]["batch_size"] == 64
    assert train["producer"]["step"] == "train" and train["digest"] == select["digest"]
    assert dataset["digest"] == content_digest(dataset["uri"])
    assert len(dataset["parameters"]["idx_sha256"]) == 4
    # The same chain from the command line, and from the selected model.
    assert cli_main(["lineage", str(root), "--verify"]) == 0
    text = capsys.readouterr().out
    for expected in (dataset["digest"][:19], select["digest"][:19], "hyperparameters:",
                     "served:", "train-model", "select-best-model"):
        assert expected in text
    assert cli_main(["lineage", str(best)]) == 0
    assert capsys.readouterr().out.startswith("best_model " + select["digest"][:19])
    report = Path(summary["report_markdown_path"]).read_text()
    assert "## Lineage" in report and dataset["digest"][:19] in report


@pytest.mark.slow
def test_fmnist_kfp_tensorboard_serves_the_runs_training_logs(real_run):
    summary, summary_path = real_run.summary, real_run.summary_path
    assert set(summary["tensorboard"]) == {"basic", "dropout", "batchnorm"}
    assert json.loads(summary_path.read_text())["tensorboard"] == summary["tensorboard"]
    tags = served_scalar_tags(["--summary", str(summary_path)])
    assert "epoch_loss" in tags["basic/train"] and "epoch_accuracy" in tags["dropout/train"]


# A cold `make run` prints at most this many lines without --verbose (issue 31): a line as each
# step starts and ends, the summary; everything else is in the run's log file.
TERMINAL_LINES = 60


@pytest.mark.slow
def test_the_terminal_shows_each_step_and_the_log_file_holds_everything_else(real_run):
    """What `fmnist-kfp run --local` printed (output not a terminal: no live progress) against
    the log file it names, and where the time went in the summary and the local report."""
    terminal = real_run.terminal
    lines = terminal.splitlines()
    assert len(lines) <= TERMINAL_LINES, terminal
    summary = real_run.summary
    log_path = Path(summary["log_path"])
    assert f"Log: {log_path} " in terminal and f"Log:     {log_path}" in terminal
    # One line as each step starts and one as it ends, with its seconds; the training steps
    # name their model and its last epoch's validation accuracy.
    for step in summary["steps"]:
        assert sum(line.split()[:2] == [step["step"], "started"] for line in lines) >= 1
    trained = [line for line in lines if line.lstrip().startswith("train-model (")]
    assert sorted(line.split()[1] for line in trained) == ["(basic)", "(batchnorm)", "(dropout)"]
    assert all(re.search(r" \d+\.\d s  last epoch's validation accuracy 0\.\d{4}$", line)
               for line in trained), trained
    # None of kfp.local's executor input/output, TensorFlow's start-up or a trainer's epochs.
    for noise in ("executor_input", "Executor", "cuda", "oneDNN", "epoch=", "Streamed logs"):
        assert noise not in terminal, noise
    log = log_path.read_text()
    assert "Got executor_input" in log and "Wrote executor output file" in log
    assert log.count(" epoch=1 epochs=1 ") >= 3  # each model's epoch line
    # Where the time went: every step's seconds and share, in the summary and the report.
    shares = [step["share"] for step in summary["steps"]]
    assert all(0 <= share <= 1 for share in shares) and 0.5 < sum(shares) <= 1.0
    report = Path(summary["report_markdown_path"]).read_text()
    section = report.split("## Where the time went")[1]
    assert sorted(re.findall(r"\| train-model \((\w+)\) \|", section)) == [
        "basic", "batchnorm", "dropout"]
    assert "| step | outcome | seconds | share of the run |" in section
    assert f"| the run |  | {summary['total_seconds']:.1f} | 100.0% |" in section
    assert "Where the time went" in Path(summary["report_path"]).read_text()
