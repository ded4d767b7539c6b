"""Parameter-server training: the strategy on the chief, the servers on the workers and PS.

TensorFlow's asynchronous parameter-server training (tensorflow v2.21.0
python/distribute/parameter_server_strategy_v2.py, class docstring): the chief is the
*coordinator*, which creates the variables on the ``ps`` tasks and dispatches training steps to
the ``worker`` tasks through a ``ClusterCoordinator`` (Keras' ``Model.fit`` makes one); the
workers and parameter servers only run a ``tf.distribute.Server`` and wait. "Failures of some
workers do not prevent the cluster from continuing the work": the coordinator reschedules a lost
worker's steps on the others, while the coordinator and the parameter servers must stay up.

Workers and parameter servers never exit on their own: the local launcher stops them when the
chief finishes, and on Kubernetes the TFJob's ``cleanPodPolicy: Running`` deletes their pods
(:mod:`fmnist.kubernetes.tfjob`).
"""

from __future__ import annotations

import sys
from typing import NoReturn

from fmnist.training.distributed import ClusterRole, enough_inter_op_threads


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


def per_worker_dataset(make_dataset, seed: int):
    """A ``DatasetCreator`` whose ``make_dataset(seed)`` runs on each worker: every worker
    shuffles its copy of the split with a seed of its own, so two workers do not feed the
    asynchronous updates the same batches in the same order."""
    import tf_keras as keras

    def dataset_fn(input_context):
        return make_dataset(seed + input_context.input_pipeline_id)

    return keras.utils.experimental.DatasetCreator(dataset_fn)
