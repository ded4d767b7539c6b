"""A scoring job's parts: refused as it is made when it cannot run, each worker's command,
and the shards' summaries merged into the job's (error rows counted apart, never as right or
wrong); a shard that wrote none fails the job naming it."""

from __future__ import annotations

import json

import pytest

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.scoring.scoring_job import (
    SUMMARY_FILE,
    BatchPredictionError,
    ScoringJobSpec,
    merge_shards,
)
from fmnist_kfp.scoring.worker import shard_summary_name

SPEC = ScoringJobSpec(name="fmnist-batch-x", model_dir="/m", data_dir="/d", output_dir="/o",
                      num_shards=3, batch_size=64)


def test_a_worker_runs_its_shard_or_the_one_kubernetes_gives_it():
    command = SPEC.worker_command(python="python3", shard=1)
    assert command[:3] == ["python3", "-m", "fmnist_kfp.scoring.worker"]
    assert command[-2:] == ["--shard-index", "1"]
    assert "--shard-index" not in SPEC.worker_command(python="python3")  # JOB_COMPLETION_INDEX
    assert command[command.index("--num-shards") + 1] == "3"


def _shard(tmp_path, shard, **counts):
    path = tmp_path / shard_summary_name(shard, 2)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"load_seconds": 1.0, "score_seconds": 2.0, **counts}))


def test_the_shards_counts_add_up_and_errors_are_neither_right_nor_wrong(tmp_path):
    _shard(tmp_path, 0, rows=10, predicted=9, errors=1, labelled=8, correct=6)
    _shard(tmp_path, 1, rows=10, predicted=10, errors=0, labelled=0, correct=0)
    (tmp_path / "predictions-00000-of-00002.jsonl").write_text("")
    summary = merge_shards(str(tmp_path), 2)
    assert (summary["rows"], summary["predicted"], summary["errors"]) == (20, 19, 1)
    assert summary["accuracy"] == 0.75  # 6 of the 8 labelled
    assert summary["files"] == ["predictions-00000-of-00002.jsonl"]
    assert json.loads((tmp_path / SUMMARY_FILE).read_text()) == summary


def test_a_shard_without_a_summary_fails_the_job_naming_it(tmp_path):
    _shard(tmp_path, 0, rows=1, predicted=1, errors=0, labelled=0, correct=0)
    with pytest.raises(BatchPredictionError, match="shard 1 of 2 wrote no summary"):
        merge_shards(str(tmp_path), 2)


@pytest.mark.parametrize(("values", "words"), [
    ({"name": "fmnist-batch-" + "a" * 50}, "DNS-1035 label of at most 56 characters"),
    ({"name": "Batch_1"}, "DNS-1035 label"),
    ({"num_shards": 0}, r"batch_prediction_workers must be in \[1, 100\], got 0"),
    ({"retries": -1}, "retries must be 0 or more"),
    ({"batch_size": 0}, "batch size must be at least 1"),
])
def test_a_job_that_cannot_run_is_refused_as_it_is_made(values, words):
    fields = dict(name="fmnist-batch-x", model_dir="/m", data_dir="/d", output_dir="/o")
    with pytest.raises(UserInputError, match=words):
        ScoringJobSpec(**{**fields, **values})


def test_a_moved_job_is_the_same_job_at_other_paths():
    moved = SPEC.moved(model_dir="/v/m", data_dir="/v/d", output_dir="/v/o")
    assert (moved.model_dir, moved.data_dir, moved.output_dir) == ("/v/m", "/v/d", "/v/o")
    assert (moved.name, moved.num_shards, moved.batch_size) == (SPEC.name, 3, 64)
    assert SPEC.model_dir == "/m"  # the original is untouched
