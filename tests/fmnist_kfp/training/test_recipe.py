"""The training recipe's parts: the learning-rate schedule, label smoothing, their settings, and
flip averaging inside the exported graph (``bench/results/ablation.md`` says why each is kept)."""

from __future__ import annotations

import numpy as np
import pytest

from fmnist_kfp.settings.training import TrainingConfig


def test_warmup_then_cosine_schedule():
    from fmnist_kfp.training.recipe import learning_rate_schedule

    config = TrainingConfig(epochs=10, learning_rate=0.004, warmup_epochs=2)
    schedule = learning_rate_schedule(config, steps_per_epoch=100)
    assert float(schedule(0)) == 0.0
    assert float(schedule(100)) == pytest.approx(0.002)
    assert float(schedule(200)) == pytest.approx(0.004)
    assert float(schedule(600)) == pytest.approx(0.002, rel=1e-3)  # half-way through decay
    assert float(schedule(1000)) == pytest.approx(0.0, abs=1e-9)
    constant = learning_rate_schedule(
        TrainingConfig(epochs=10, learning_rate=0.004, lr_schedule="constant", warmup_epochs=1),
        steps_per_epoch=100,
    )
    assert float(constant(50)) == pytest.approx(0.002, rel=1e-6)
    assert float(constant(900)) == pytest.approx(0.004, rel=1e-6)
    short = learning_rate_schedule(  # warm-up capped at half the run: 5 of 10 steps
        TrainingConfig(epochs=1, learning_rate=0.002, warmup_epochs=1), steps_per_epoch=10)
    assert float(short(2)) == pytest.approx(0.0008, rel=1e-5)
    assert float(short(5)) == pytest.approx(0.002, rel=1e-6)
    assert float(short(10)) == pytest.approx(0.0, abs=1e-9)
    none = learning_rate_schedule(TrainingConfig(epochs=2, learning_rate=0.004,
                                                 warmup_epochs=0), steps_per_epoch=10)
    assert float(none(0)) == pytest.approx(0.004)


def test_label_smoothing_matches_its_definition():
    import tensorflow as tf

    from fmnist_kfp.training.recipe import make_loss

    probabilities = tf.nn.softmax(tf.random.stateless_normal([4, 10], seed=[1, 2]))
    labels = tf.constant([[0], [3], [9], [3]])
    loss = make_loss(TrainingConfig(label_smoothing=0.1))(labels, probabilities).numpy()
    targets = np.full((4, 10), 0.01)
    targets[np.arange(4), labels.numpy()[:, 0]] += 0.9
    expected = -(targets * np.log(probabilities.numpy())).sum(axis=1)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"warmup_epochs": -1.0}, "warmup_epochs"),
        ({"label_smoothing": 1.0}, "label_smoothing"),
        ({"stem_filters": -16}, "stem_filters"),
    ],
)
def test_recipe_settings_are_validated(changes, message):
    from fmnist_kfp.errors import UserInputError

    with pytest.raises(UserInputError, match=message):
        TrainingConfig(**changes).validate()


@pytest.mark.parametrize("model_type", ["basic", "dropout", "batchnorm"])
def test_every_family_with_its_stem_stays_within_100k_parameters(model_type):
    """Issue 14: each CNN ≤ 100k parameters. The stem is one 3×3 'same' convolution at full
    resolution before the book's three, so the rest of the model keeps its shapes; without it
    (stem_filters=0) the model is the book's."""
    from fmnist_kfp.training.models import build_model

    with_stem = build_model(TrainingConfig(model_type=model_type))
    book = build_model(TrainingConfig(model_type=model_type, stem_filters=0))
    assert with_stem.count_params() <= 100_000
    stem = with_stem.layers[1]  # after the rescaling
    assert (stem.filters, stem.kernel_size, stem.padding) == (16, (3, 3), "same")
    assert stem.output.shape[1:] == (28, 28, 16)
    # The stem adds its own weights (and BN) and widens the first convolution's input: the
    # first book convolution sees 16 channels instead of 1; nothing else changes.
    batchnorm = model_type == "batchnorm"
    stem_weights = 3 * 3 * 1 * 16 + (2 * 16 + 2 * 16 if batchnorm else 16)
    widened_first_conv = 3 * 3 * (16 - 1) * 32
    assert with_stem.count_params() - book.count_params() == stem_weights + widened_first_conv
    assert with_stem.output.shape == book.output.shape == (None, 10)


def test_exported_flip_averaging_is_mirror_invariant_with_the_same_signatures(tmp_path):
    import tensorflow as tf
    import tf_keras as keras

    from fmnist_kfp.training.export import export_saved_model, load_pixels_predictor
    from fmnist_kfp.training.models import build_model

    keras.utils.set_random_seed(3)
    model = build_model(TrainingConfig(model_type="basic"))
    export_saved_model(model, str(tmp_path / "plain"))
    export_saved_model(model, str(tmp_path / "averaged"), flip_averaging=True)
    pixels = np.random.default_rng(1).uniform(0, 255, (8, 28, 28)).astype(np.float32)
    averaged = load_pixels_predictor(str(tmp_path / "averaged"))
    plain = load_pixels_predictor(str(tmp_path / "plain"))
    both = averaged(pixels)["probabilities"].numpy()
    np.testing.assert_allclose(both, averaged(pixels[:, :, ::-1])["probabilities"].numpy(),
                               atol=1e-6)
    expected = (plain(pixels)["probabilities"].numpy()
                + plain(pixels[:, :, ::-1].copy())["probabilities"].numpy()) / 2
    np.testing.assert_allclose(both, expected, atol=1e-6)
    plain_signatures = tf.saved_model.load(str(tmp_path / "plain")).signatures
    signatures = tf.saved_model.load(str(tmp_path / "averaged")).signatures
    assert set(signatures) == set(plain_signatures) == {"serving_default", "serving_pixels"}
    for name, signature in signatures.items():
        assert signature.structured_input_signature == \
            plain_signatures[name].structured_input_signature
        assert signature.structured_outputs.keys() == \
            plain_signatures[name].structured_outputs.keys()
