"""The batch prediction settings: the source (empty: the ingested test split) and between 1
and MAX_BATCH_WORKERS workers."""

from __future__ import annotations

import pytest

from fmnist_kfp.settings.batch import MAX_BATCH_WORKERS, BatchPredictionSettings


def test_the_defaults_score_the_test_split_on_two_workers():
    settings = BatchPredictionSettings()
    assert settings.batch_prediction_source == "" and settings.batch_prediction_workers == 2
    assert settings.problems() == []


@pytest.mark.parametrize("workers", [0, MAX_BATCH_WORKERS + 1])
def test_workers_outside_the_range_are_a_problem(workers):
    [problem] = BatchPredictionSettings(batch_prediction_workers=workers).problems()
    assert "batch_prediction_workers" in problem
    assert BatchPredictionSettings(batch_prediction_workers=MAX_BATCH_WORKERS).problems() == []
