"""The CNNs' size, known before TensorFlow builds them."""

from __future__ import annotations

import pytest

from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.models import build_model, parameter_count


@pytest.mark.parametrize("model_type", ["basic", "dropout", "batchnorm"])
@pytest.mark.parametrize(("filters", "stem_filters", "dense_units"),
                         [(32, 16, 64), (16, 16, 64), (64, 16, 64), (8, 0, 32), (48, 32, 128)])
def test_the_parameter_count_is_what_keras_counts(model_type, filters, stem_filters,
                                                  dense_units):
    config = TrainingConfig(model_type=model_type, filters=filters, stem_filters=stem_filters,
                            dense_units=dense_units)
    assert parameter_count(config) == build_model(config).count_params()


def test_the_default_models_are_under_100k_and_64_filters_is_three_times_that():
    """The figures issue 31 names: the default models keep under 100k parameters; a tuned
    run's batch-norm CNN with filters=64 had 306,522."""
    counts = {t: parameter_count(TrainingConfig(model_type=t))
              for t in ("basic", "dropout", "batchnorm")}
    assert counts == {"basic": 97_802, "dropout": 97_802, "batchnorm": 98_522}
    assert parameter_count(TrainingConfig(model_type="batchnorm", filters=64)) == 306_522
