"""Selection and tuning never read the test split, except to report the chosen model.

A real (small) local search, training and selection run with the split-read audit trail on
(``FMNIST_SPLIT_READ_LOG``, inherited by every trial and training process): every read of a
split is recorded with the function that asked for it.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from fmnist_kfp.dataset.pipeline import SPLIT_READ_LOG_ENV


def _reads(log) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.slow
def test_tuning_training_and_selection_read_the_test_split_once_for_the_chosen_model(
        synthetic_dataset, tmp_path, monkeypatch):
    from fmnist_kfp.kfp_components.select.step import select_step
    from fmnist_kfp.kfp_components.train.step import train_step
    from fmnist_kfp.kfp_components.tune.step import tune_step
    from fmnist_kfp.settings.training import TrainingConfig

    log = tmp_path / "reads.jsonl"
    monkeypatch.setenv(SPLIT_READ_LOG_ENV, str(log))
    data_dir = str(synthetic_dataset)
    base = TrainingConfig(model_type="basic", epochs=1, batch_size=64, filters=8,
                          train_examples=512, precision="float32")
    tuning = {"algorithm": "random", "max_trials": 2, "parallel_trials": 1, "epochs": 1,
              "train_examples": 256, "early_stopping": False, "random_state": 1}
    result = tune_step(model_type="basic", base=base, tuning=tuning, data_dir=data_dir,
                       output_dir=str(tmp_path / "search"), backend="local")
    after_tuning = _reads(log)
    assert {r["split"] for r in after_tuning} == {"train", "validation"}  # trials score on it

    candidates = []
    for model_type in ("basic", "batchnorm"):
        config = replace(base.with_hyperparameters(result.best_parameters),
                         model_type=model_type)
        model_dir = str(tmp_path / model_type)
        train_step(config=config, data_dir=data_dir, model_dir=model_dir)
        candidates.append((model_dir, {}))
    assert {r["split"] for r in _reads(log)} == {"train", "validation"}

    outputs = select_step(data_dir, candidates, str(tmp_path / "best"))
    reads = _reads(log)
    test_reads = [r for r in reads if r["split"] == "test"]
    assert [r["reader"] for r in test_reads] == ["fmnist_kfp.selection.select.select_best"]
    # ... and only after every candidate was scored on the validation split.
    selection_reads = [r["split"] for r in reads if r["reader"].startswith("fmnist_kfp.selection")]
    assert selection_reads == ["validation", "test"]
    assert outputs.metadata["selected_by"] == "validation_accuracy"
    assert "test_accuracy" in outputs.metadata
    assert all("test_accuracy" not in row for row in outputs.metadata["leaderboard"]
               if row["model_type"] != outputs.best_model_type)

    # Deploy and predict hold the server to the chosen model's answers, which selection
    # stored beside it: the model's own, for the test images.
    from fmnist_kfp.selection.held_out_scores import stored_probabilities
    from fmnist_kfp.serving.deploy.verification import in_process_probabilities, test_sample

    images, _ = test_sample(data_dir, 50)
    best = str(tmp_path / "best")
    np.testing.assert_allclose(stored_probabilities(best, images),
                               in_process_probabilities(best, images), atol=1e-5)
