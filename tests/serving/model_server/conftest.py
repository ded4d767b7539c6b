"""Fixtures of the model server's tests that need a trained model on the real data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="session")
def real_test_set(real_data_dir):
    from fmnist_kfp.dataset.sources import load

    split = load(str(real_data_dir)).splits["test"]
    return split.images[:1000], split.labels[:1000]


@pytest.fixture(scope="session")
def trained_model(real_data_dir, tmp_path_factory) -> Path:
    """The batch-norm CNN, 1 epoch on the real training set (about 70 s on 2 cores, 90.5% on
    the first 1,000 test images), exported as training exports it. The tests that use it
    compare what is served with what the model itself answers; an absolute bar only says that
    it learned."""
    import tf_keras as keras

    from fmnist_kfp.dataset.sources import load
    from fmnist_kfp.settings.training import TrainingConfig
    from fmnist_kfp.training.export import export_saved_model
    from fmnist_kfp.training.models import build_model

    train = load(str(real_data_dir)).splits["train"]
    keras.utils.set_random_seed(0)
    model = build_model(TrainingConfig(model_type="batchnorm"))
    epochs, batch_size = 1, 256
    steps = epochs * -(-len(train.images) // batch_size)
    model.compile(optimizer=keras.optimizers.Adam(
        keras.optimizers.schedules.CosineDecay(3e-3, steps)),
        loss="sparse_categorical_crossentropy")
    model.fit(train.images.astype(np.float32)[..., None], train.labels, batch_size=batch_size,
              epochs=epochs, verbose=0)
    directory = tmp_path_factory.mktemp("trained")
    export_saved_model(model, str(directory / "1"))
    return directory
