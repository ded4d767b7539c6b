"""Parameter-server training: the strategy on the chief, the servers on the workers and PS.

TensorFlow's asynchronous parameter-server training (``ParameterServerStrategy``'s docstring;
upstream: docs/upstream.md#tensorflow): the chief is the
*coordinator*, which creates the variables on the ``ps`` tasks and dispatches training steps to
the ``worker`` tasks through a ``ClusterCoordinator`` (Keras' ``Model.fit`` makes one); the
workers and parameter servers only run a ``tf.distribute.Server`` and wait. "Failures of some
workers do not prevent the cluster from continuing the work": the coordinator reschedules a lost
worker's steps on the others, while the coordinator and the parameter servers must stay up.

Workers and parameter servers never exit on their own: the local launcher stops them when the
chief finishes, and on Kubernetes the TFJob's ``cleanPodPolicy: Running`` deletes their pods
(:mod:`fmnist_kfp.kubernetes.tfjob`).
"""

from __future__ import annotations

import sys
from typing import NoReturn

from fmnist_kfp.training.distributed import ClusterRole, enough_inter_op_threads


def run_server(role: ClusterRole) -> NoReturn:
    """Serves this worker or PS task of a parameter-server job until the process is stopped."""
    import tensorflow as tf

    threads = enough_inter_op_threads()

    print(f"{role.name}: serving the parameter-server job's {role.task_type} task; the "
          "chief drives training", flush=True)
    server = tf.distribute.Server(
        tf.train.ClusterSpec(role.training_cluster()), job_name=role.task_type,
        task_index=role.task_index, protocol="grpc", start=True,
        # The server's sessions take their thread pools from this config, not the context's.
        config=tf.compat.v1.ConfigProto(inter_op_parallelism_threads=threads))
    server.join()
    sys.exit(0)  # join() returns only if the server is shut down


def inline_validation(model, config, validation_data):
    """An epoch-end callback in which the chief scores ``validation_data`` itself with a local
    copy of the weights, adding ``val_loss``/``val_accuracy`` to the epoch's logs (so the epoch
    line a Katib trial is scored from carries them). Keras' own validation under
    ``ParameterServerStrategy`` sends a finite dataset to every worker and fails at its end
    ("End of sequence") unless it is sharded for exact evaluation; one local pass on the
    coordinator, which otherwise idles, is exact. Not ``Model.evaluate``: inside ``fit`` it
    would find the strategy's scope and dispatch to the workers again. Build it outside the
    strategy's scope: the copy's variables must live here, not on the parameter servers."""
    import tensorflow as tf
    import tf_keras as keras

    from fmnist_kfp.training.models import build_model
    from fmnist_kfp.training.recipe import make_loss

    local = build_model(config)
    loss_fn = make_loss(config)  # the loss the trainer compiles: the same val_loss

    @tf.function
    def score(images, labels):
        probabilities = tf.cast(local(images, training=False), tf.float32)
        count = tf.cast(tf.shape(labels)[0], tf.float32)
        # A Loss object answers the batch mean, a loss function one value per image.
        loss = tf.reduce_mean(loss_fn(labels, probabilities)) * count
        predicted = tf.argmax(probabilities, axis=-1, output_type=labels.dtype)
        return loss, tf.reduce_sum(tf.cast(predicted == labels, tf.float32))

    class InlineValidation(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            local.set_weights(model.get_weights())
            loss = correct = count = 0.0
            for images, labels in validation_data:
                batch_loss, batch_correct = score(images, labels)
                loss += float(batch_loss)
                correct += float(batch_correct)
                count += int(labels.shape[0])
            if logs is not None and count:
                logs.update(val_loss=loss / count, val_accuracy=correct / count)

    return InlineValidation()


def per_worker_dataset(make_dataset, seed: int):
    """A ``DatasetCreator`` whose ``make_dataset(seed)`` runs on each worker: every worker
    shuffles its copy of the split with a seed of its own, so two workers do not feed the
    asynchronous updates the same batches in the same order."""
    import tf_keras as keras

    def dataset_fn(input_context):
        return make_dataset(seed + input_context.input_pipeline_id)

    return keras.utils.experimental.DatasetCreator(dataset_fn)
