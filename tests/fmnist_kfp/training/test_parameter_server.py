"""Parameter-server training's pieces (fmnist_kfp.training.parameter_server), each on its own in
this process: the chief's inline validation scores the validation split exactly as the trainer's
loss and accuracy would, with the model's current weights; each worker's dataset gets a seed of
its own; a worker or PS task serves its place in the cluster. A whole parameter-server job of
processes (a chief, workers, a PS, a worker killed): tests/fmnist_kfp/launcher/
test_parameter_server.py (slow)."""

from __future__ import annotations

import numpy as np
import pytest

from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training import parameter_server
from fmnist_kfp.training.distributed import ClusterRole
from fmnist_kfp.training.models import build_model
from fmnist_kfp.training.parameter_server import (
    inline_validation,
    per_worker_dataset,
    run_server,
)

CONFIG = TrainingConfig(model_type="basic", filters=8, stem_filters=0, dense_units=16)


def _validation(model, count: int = 20, batch: int = 8):
    """``count`` random images in batches of ``batch`` (the last one short), half of them
    labelled as ``model`` now classifies them."""
    import tensorflow as tf

    rng = np.random.default_rng(3)
    images = rng.uniform(0, 255, (count, 28, 28, 1)).astype("float32")
    labels = rng.integers(0, 10, count).astype("int64")
    predicted = model(images, training=False).numpy().argmax(axis=-1)
    labels[: count // 2] = predicted[: count // 2]
    return images, labels, tf.data.Dataset.from_tensor_slices((images, labels)).batch(batch)


def _expected(model, images, labels, config: TrainingConfig) -> tuple[float, float]:
    """The whole split's mean loss and accuracy, as Keras' own evaluation would give them."""
    import tf_keras as keras

    probabilities = model(images, training=False).numpy()
    if config.label_smoothing:
        targets = np.eye(10)[labels]
        loss = keras.losses.categorical_crossentropy(
            targets, probabilities, label_smoothing=config.label_smoothing).numpy().mean()
    else:
        loss = keras.losses.SparseCategoricalCrossentropy()(labels, probabilities).numpy()
    return float(loss), float((probabilities.argmax(axis=-1) == labels).mean())


@pytest.mark.parametrize("config", [CONFIG, TrainingConfig(
    model_type="basic", filters=8, stem_filters=0, dense_units=16, label_smoothing=0.1)],
    ids=["loss-object", "smoothed-loss-function"])
def test_inline_validation_scores_the_whole_split_with_the_models_current_weights(config):
    """Batches of 8, 8 and 4: the mean is over images, not batches, whether the loss answers
    the batch's mean (a Loss object) or one value per image (the smoothed loss function)."""
    model = build_model(config)
    images, labels, validation = _validation(model)
    callback = inline_validation(model, config, validation)
    logs = {"loss": 2.0}
    callback.on_epoch_end(0, logs)
    loss, accuracy = _expected(model, images, labels, config)
    assert logs["loss"] == 2.0
    assert logs["val_loss"] == pytest.approx(loss, rel=1e-4)
    assert logs["val_accuracy"] == pytest.approx(accuracy)
    # The next epoch scores the weights training has reached since, not the first copy's.
    model.set_weights([-weights for weights in model.get_weights()])
    callback.on_epoch_end(1, logs)
    new_loss, new_accuracy = _expected(model, images, labels, config)
    assert (new_loss, new_accuracy) != pytest.approx((loss, accuracy), rel=1e-2)
    assert logs["val_loss"] == pytest.approx(new_loss, rel=1e-4)
    assert logs["val_accuracy"] == pytest.approx(new_accuracy)
    callback.on_epoch_end(2, None)  # Keras may pass no logs: nothing to add to


def test_each_worker_shuffles_with_a_seed_of_its_own():
    import tensorflow as tf

    seeds = []

    def make_dataset(seed):
        seeds.append(seed)
        return tf.data.Dataset.from_tensors(seed)

    creator = per_worker_dataset(make_dataset, seed=7)
    for pipeline in range(3):
        creator(tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=pipeline,
                                           num_replicas_in_sync=3))
    assert seeds == [7, 8, 9]


def test_a_task_serves_its_place_in_the_cluster_without_the_evaluator_then_exits(monkeypatch):
    import tensorflow as tf

    started = {}

    class Server:
        def __init__(self, cluster, **options):
            started.update(cluster=cluster.as_dict(), **options)

        def join(self):
            started["joined"] = True

    monkeypatch.setattr(tf.distribute, "Server", Server)
    monkeypatch.setattr(parameter_server, "enough_inter_op_threads", lambda: 4)
    role = ClusterRole("ps", 0, num_workers=3, has_chief=True, cluster=(
        ("chief", ("chief-0:2222",)), ("worker", ("worker-0:2222", "worker-1:2222")),
        ("ps", ("ps-0:2222",)), ("evaluator", ("evaluator-0:2222",))))
    with pytest.raises(SystemExit) as exited:
        run_server(role)
    assert exited.value.code == 0 and started["joined"]
    assert started["cluster"] == {"chief": ["chief-0:2222"], "ps": ["ps-0:2222"],
                                  "worker": ["worker-0:2222", "worker-1:2222"]}
    assert (started["job_name"], started["task_index"], started["protocol"]) == ("ps", 0, "grpc")
    assert started["config"].inter_op_parallelism_threads == 4
