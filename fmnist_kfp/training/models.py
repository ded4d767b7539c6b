"""The three CNNs: basic, with dropout, with batch normalization.

All share the book's architecture — three 3×3 convolutions (f, 2f, 2f filters) with max-pooling
after the first two, then a dense layer of 64 units and the 10-way softmax; about 93k parameters
at f=32 — behind a stem: one more 3×3 convolution of 16 filters at full resolution ('same'
padding), about 98k parameters in all. The stem lifted validation accuracy by 0.5–0.9 points in
every family; trained 10 epochs, it takes 24–36% longer than the book's model did in 12
(``bench/results/ablation.md``). Inputs are float pixel intensities 0–255 of shape [28, 28, 1];
the model rescales.

Built with ``tf_keras`` (Keras 2), whose ``fit`` works under ``MultiWorkerMirroredStrategy``;
Keras 3's does not yet (keras-team/keras#20585).
"""

from __future__ import annotations

from fmnist_kfp.dataset.official import IMAGE_SIZE, NUM_CLASSES
from fmnist_kfp.settings.training import TrainingConfig

# Keras' 0.99 needs thousands of steps before the inference statistics are usable; 0.9 (the
# PyTorch default) is ready after a few hundred, so short and small-data runs evaluate well.
_BN_MOMENTUM = 0.9


def _convolutions(config: TrainingConfig) -> list[tuple[int, str, bool]]:
    """``(filters, padding, max-pooled after)`` of each 3×3 convolution, in order."""
    convolutions = [(config.filters, "valid", True), (2 * config.filters, "valid", True),
                    (2 * config.filters, "valid", False)]
    if config.stem_filters:
        convolutions.insert(0, (config.stem_filters, "same", False))
    return convolutions


def parameter_count(config: TrainingConfig) -> int:
    """What ``build_model(config).count_params()`` says (batch norm's moving statistics
    included), from the architecture alone: no TensorFlow, so a search can refuse a
    configuration over its budget before any trainer starts."""
    batchnorm = config.model_type == "batchnorm"
    size, channels, count = IMAGE_SIZE, 1, 0

    def layer(inputs: int, units: int) -> int:
        # Without batch norm a bias per unit; with it, beta and gamma and the two statistics.
        return inputs * units + (4 * units if batchnorm else units)

    for filters, padding, pool in _convolutions(config):
        count += layer(3 * 3 * channels, filters)
        channels, size = filters, size - (2 if padding == "valid" else 0)
        size //= 2 if pool else 1
    count += layer(size * size * channels, config.dense_units)
    return count + config.dense_units * NUM_CLASSES + NUM_CLASSES


def build_model(config: TrainingConfig):
    import tf_keras as keras
    from tf_keras import layers

    batchnorm = config.model_type == "batchnorm"
    dropout = config.model_type == "dropout"
    stack: list = [
        keras.Input((IMAGE_SIZE, IMAGE_SIZE, 1), name="pixels"),
        layers.Rescaling(1.0 / 255),
    ]
    for filters, padding, pool in _convolutions(config):
        # A bias before batch norm is redundant: BN's beta does its job.
        stack.append(layers.Conv2D(filters, 3, padding=padding, use_bias=not batchnorm))
        if batchnorm:
            stack.append(layers.BatchNormalization(momentum=_BN_MOMENTUM))
        stack.append(layers.Activation("relu"))
        if pool:
            stack.append(layers.MaxPooling2D())
    stack.append(layers.Flatten())
    stack.append(layers.Dense(config.dense_units, use_bias=not batchnorm))
    if batchnorm:
        stack.append(layers.BatchNormalization(momentum=_BN_MOMENTUM))
    stack.append(layers.Activation("relu"))
    if dropout:
        stack.append(layers.Dropout(config.dropout_rate))
    stack.append(layers.Dense(NUM_CLASSES))
    # Softmax in float32 keeps probabilities well-formed under mixed precision.
    stack.append(layers.Activation("softmax", dtype="float32", name="probabilities"))
    return keras.Sequential(stack, name=f"{config.model_type}_cnn")
