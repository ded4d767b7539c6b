"""Batch prediction: what the batch prediction step scores and on how many workers."""

from __future__ import annotations

from dataclasses import dataclass

from fmnist_kfp.settings.schema import Settings, between, setting

MAX_BATCH_WORKERS = 100
# The one rule of the workers: the setting's, and the scoring job's shards (ScoringJobSpec).
WORKERS_RULE = between(1, MAX_BATCH_WORKERS)


@dataclass
class BatchPredictionSettings(Settings):
    WHAT = "batch prediction settings"

    batch_prediction_source: str = setting(
        "", help="What the batch prediction step scores: empty for the ingested test split, "
                 "else a directory or URI (`gs://`, `s3://`; on Kubernetes a path on the shared "
                 "volume) of images (PNG, JPEG, GIF, BMP) or TFRecord files.")
    batch_prediction_workers: int = setting(
        2, help="Shards scored in parallel: worker processes locally, the pods of an Indexed "
                "Job on Kubernetes.",
        rules=[WORKERS_RULE])
