"""The training recipe's pieces besides the model and the data: the learning-rate schedule and
the loss, each built from a :class:`TrainingConfig`.

Chosen by measurement on the validation split (``bench/results/ablation.md``): a 1-epoch linear
warm-up to a peak of 4e-3 then cosine decay to 0, and label smoothing 0.1, lift every family;
weight averaging (EMA), AdamW and random translation did not, and are not offered.
"""

from __future__ import annotations

from fmnist_kfp.dataset.official import NUM_CLASSES
from fmnist_kfp.settings.training import TrainingConfig


def learning_rate_schedule(config: TrainingConfig, steps_per_epoch: int):
    """A constant rate or cosine decay to 0 over the run, either after a linear warm-up from 0
    to ``learning_rate`` over ``warmup_epochs`` (at most half the run): high rates early without
    the first steps of random weights blowing up."""
    import tf_keras as keras

    total = config.epochs * steps_per_epoch
    warmup = min(round(config.warmup_epochs * steps_per_epoch), total // 2)
    if config.lr_schedule == "constant":
        if not warmup:
            return config.learning_rate
        # alpha=1: no decay after the warm-up.
        return keras.optimizers.schedules.CosineDecay(
            0.0, 1, alpha=1.0, warmup_target=config.learning_rate, warmup_steps=warmup)
    # Decaying to zero over the run settles the weights: about +1 point of test accuracy.
    if not warmup:
        return keras.optimizers.schedules.CosineDecay(config.learning_rate, total)
    return keras.optimizers.schedules.CosineDecay(
        0.0, total - warmup, warmup_target=config.learning_rate, warmup_steps=warmup)


def make_loss(config: TrainingConfig):
    """Cross-entropy on integer labels, the one-hot targets smoothed when asked."""
    import tensorflow as tf
    import tf_keras as keras

    if not config.label_smoothing:
        return keras.losses.SparseCategoricalCrossentropy()
    smoothing = config.label_smoothing

    def smoothed_crossentropy(labels, probabilities):
        labels = tf.cast(tf.reshape(labels, [-1]), tf.int32)
        targets = tf.one_hot(labels, NUM_CLASSES, dtype=probabilities.dtype)
        return keras.losses.categorical_crossentropy(
            targets, probabilities, label_smoothing=smoothing)

    return smoothed_crossentropy
