"""The local batch backend: worker processes, one per shard; a shard's failure fails the job
and names the shard."""

from __future__ import annotations

import pytest

from fmnist_kfp.batch.local_scorer import LocalBatchScorer
from fmnist_kfp.scoring.scoring_job import BatchPredictionError, ScoringJobSpec


@pytest.mark.slow
def test_a_worker_that_fails_fails_the_job_naming_its_shard(synthetic_dataset, tmp_path):
    spec = ScoringJobSpec(name="fmnist-batch-test", model_dir=str(tmp_path / "no-model"),
                          data_dir=str(synthetic_dataset), output_dir=str(tmp_path / "out"),
                          num_shards=1)
    with pytest.raises(BatchPredictionError, match="shard 0 failed with exit code 1") as caught:
        LocalBatchScorer(timeout_seconds=300).run(spec)
    assert "no SavedModel" in str(caught.value)
