"""The evaluator replica's record, as the chief reads it: one entry per epoch (a re-scored
epoch replaces the earlier one), the chief's wait for the last epoch bounded by its timeout,
and a fresh job starting without an earlier job's checkpoints and scores."""

from __future__ import annotations

import json

from fmnist_kfp.training.evaluator import (
    CHECKPOINT_DIR,
    EVALUATION_FILE,
    checkpoint_prefix,
    mark_training_done,
    read_evaluation,
    reset,
    wait_for_evaluation,
)


def _score(work_dir, *entries):
    with open(work_dir / EVALUATION_FILE, "a") as handle:
        handle.writelines(json.dumps(entry) + "\n" for entry in entries)


def test_each_epoch_is_read_once_in_order_the_last_score_winning(tmp_path):
    assert read_evaluation(str(tmp_path)) == []
    _score(tmp_path, {"epoch": 2, "val_accuracy": 0.5}, {"epoch": 1, "val_accuracy": 0.4},
           {"epoch": 2, "val_accuracy": 0.6})
    assert read_evaluation(str(tmp_path)) == [{"epoch": 1, "val_accuracy": 0.4},
                                              {"epoch": 2, "val_accuracy": 0.6}]


def test_the_chief_waits_for_the_last_epoch_or_its_timeout(tmp_path):
    _score(tmp_path, {"epoch": 1}, {"epoch": 2})
    assert [e["epoch"] for e in wait_for_evaluation(str(tmp_path), 2, timeout=5)] == [1, 2]
    assert [e["epoch"] for e in wait_for_evaluation(str(tmp_path), 3, timeout=0)] == [1, 2]


def test_a_fresh_job_starts_without_the_earlier_jobs_checkpoints_and_scores(tmp_path):
    mark_training_done(str(tmp_path), epochs=2)
    _score(tmp_path, {"epoch": 1})
    assert checkpoint_prefix(str(tmp_path), 3) == f"{tmp_path}/{CHECKPOINT_DIR}/epoch-003"
    assert (tmp_path / CHECKPOINT_DIR).is_dir()
    reset(str(tmp_path))
    assert read_evaluation(str(tmp_path)) == [] and list(tmp_path.iterdir()) == []
