"""A batch prediction job: what to score, with which model, in how many shards, and the worker
command every shard runs (a local process or an Indexed Job pod alike); and the merge of the
shards' counts once they are done."""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import dataclass
from typing import Any

from fmnist_kfp.errors import FmnistError, UserInputError
from fmnist_kfp.settings.batch import WORKERS_RULE
from fmnist_kfp.settings.names import is_dns_1035_label

WORKER_MODULE = "fmnist_kfp.scoring.worker"
SUMMARY_FILE = "summary.json"
# On Kubernetes the job's name is an Indexed Job's, whose pods' hostnames are <name>-<index>:
# a 63-character DNS label leaves the name 56.
MAX_NAME_LENGTH = 56


class BatchPredictionError(FmnistError, RuntimeError):
    """A shard's worker failed (not a bad input: those are error rows)."""


@dataclass(frozen=True)
class ScoringJobSpec:
    """What one batch prediction scores, with which model, in how many shards.

    Validated once, at construction (:meth:`problems`): a spec that exists is a job that can
    run, locally or as an Indexed Job, so the scorers and the Job's builder only build. Frozen,
    so it stays what was checked."""

    name: str
    model_dir: str
    data_dir: str
    output_dir: str
    source: str = ""
    num_shards: int = 1
    batch_size: int = 256
    # Pods a Kubernetes Job may lose (killed, evicted) before it fails; locally none.
    retries: int = 2

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise UserInputError("; ".join(problems))

    def problems(self) -> list[str]:
        """What is wrong with the job, each problem naming its fix."""
        problems = []
        if not is_dns_1035_label(self.name, MAX_NAME_LENGTH):
            problems.append(f"job name {self.name!r} must be a DNS-1035 label of at most "
                            f"{MAX_NAME_LENGTH} characters (on Kubernetes its pods are "
                            "<name>-<index>)")
        workers = WORKERS_RULE("batch_prediction_workers", self.num_shards)
        if workers:
            problems.append(workers)
        if self.retries < 0:
            problems.append(f"retries must be 0 or more, got {self.retries}")
        if self.batch_size < 1:
            problems.append(f"batch size must be at least 1, got {self.batch_size}")
        return problems

    def moved(self, *, model_dir: str, data_dir: str, output_dir: str) -> ScoringJobSpec:
        """The same job reading and writing at other paths (an Indexed Job's, on the shared
        volume). No rule is about the paths, so the copy is not checked again (a
        ``dataclasses.replace`` would be)."""
        moved = copy.copy(self)
        for name, value in (("model_dir", model_dir), ("data_dir", data_dir),
                            ("output_dir", output_dir)):
            object.__setattr__(moved, name, value)
        return moved

    def worker_command(self, python: str = sys.executable, shard: int | None = None) -> list[str]:
        """The worker's command; without ``shard`` it reads ``JOB_COMPLETION_INDEX``."""
        command = [python, "-m", WORKER_MODULE, "--model-dir", self.model_dir,
                   "--output-dir", self.output_dir, "--num-shards", str(self.num_shards),
                   "--data-dir", self.data_dir, "--source", self.source,
                   "--batch-size", str(self.batch_size)]
        return command + (["--shard-index", str(shard)] if shard is not None else [])


def merge_shards(output_dir: str, num_shards: int) -> dict[str, Any]:
    """The whole job's counts from its shards' summaries (each must be there), written to
    ``summary.json``: rows, predictions, error rows, labelled rows, and the accuracy over the
    labelled predictions (error rows are counted apart, never as right or wrong)."""
    import tensorflow as tf

    from fmnist_kfp.scoring.worker import shard_summary_name

    shards = []
    for shard in range(num_shards):
        path = f"{output_dir}/{shard_summary_name(shard, num_shards)}"
        if not tf.io.gfile.exists(path):
            raise BatchPredictionError(f"shard {shard} of {num_shards} wrote no summary "
                                       f"({path}): its worker did not finish")
        with tf.io.gfile.GFile(path) as handle:
            shards.append(json.load(handle))
    totals = {key: sum(s[key] for s in shards)
              for key in ("rows", "predicted", "errors", "labelled", "correct")}
    slowest = max((s["load_seconds"] + s["score_seconds"] for s in shards), default=0.0)
    scoring = max((s["score_seconds"] for s in shards), default=0.0)
    summary = {
        **totals,
        "accuracy": round(totals["correct"] / totals["labelled"], 6) if totals["labelled"]
        else None,
        "shards": num_shards,
        "slowest_shard_seconds": round(slowest, 3),
        # Scoring alone (listing, loading TensorFlow and the model aside), shards in parallel.
        "scoring_images_per_second": round(totals["rows"] / scoring, 1) if scoring else 0.0,
        "files": [s_name for s_name in sorted(tf.io.gfile.listdir(output_dir))
                  if s_name.endswith(".jsonl")],
    }
    with tf.io.gfile.GFile(f"{output_dir}/{SUMMARY_FILE}", "w") as handle:
        json.dump(summary, handle, indent=2)
    return summary
