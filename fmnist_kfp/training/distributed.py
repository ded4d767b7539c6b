"""Multi-worker plumbing: ``TF_CONFIG``, the strategy, precision and fault-tolerant checkpoints."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


# The replica types of TF_CONFIG (lowercase, as the training operator writes them).
TRAINING_TYPES = ("chief", "worker")
SERVER_TYPES = ("ps",)
EVALUATOR = "evaluator"
PARAMETER_SERVER = "parameter_server"
MULTI_WORKER_MIRRORED = "multi_worker_mirrored"


@dataclass(frozen=True)
class ClusterRole:
    """This process's place in the job, read from ``TF_CONFIG`` as the training operator sets it
    (or as :func:`tf_config_from_env` builds it on Trainer v2: every node a worker).

    The operator's cluster spec lists *every* replica type of the TFJob, the evaluator included
    (kubeflow/trainer v1.9.2 pkg/controller.v1/tensorflow/tensorflow.go ``genClusterSpec``,
    lines 157-184), and a ``ps`` entry exactly when the TFJob has PS replicas: so the
    strategy follows from the cluster (``ps`` present: parameter servers), and the evaluator is
    dropped from the cluster the strategy connects to (:meth:`training_cluster`), as TensorFlow
    keeps it out of training."""

    task_type: str
    task_index: int
    num_workers: int  # every process that trains: chief + workers
    has_chief: bool = False
    cluster: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def strategy(self) -> str:
        return PARAMETER_SERVER if self.cluster_dict().get("ps") else MULTI_WORKER_MIRRORED

    @property
    def has_evaluator(self) -> bool:
        return bool(self.cluster_dict().get(EVALUATOR))

    @property
    def is_evaluator(self) -> bool:
        return self.task_type == EVALUATOR

    @property
    def serves_only(self) -> bool:
        """A PS, or a worker of a parameter-server job: it runs a server and never returns."""
        return self.task_type in SERVER_TYPES or (
            self.strategy == PARAMETER_SERVER and self.task_type == "worker")

    def cluster_dict(self) -> dict[str, list[str]]:
        return {name: list(hosts) for name, hosts in self.cluster}

    def training_cluster(self) -> dict[str, list[str]]:
        """The cluster without the evaluator: what the strategy's servers connect to."""
        return {k: v for k, v in self.cluster_dict().items() if k != EVALUATOR}

    @property
    def is_chief(self) -> bool:
        # With an explicit Chief replica the chief is it; otherwise worker 0 plays chief.
        if self.has_chief:
            return self.task_type == "chief"
        return self.task_type == "worker" and self.task_index == 0

    @property
    def name(self) -> str:
        return f"{self.task_type}-{self.task_index}"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ClusterRole:
        """The role ``TF_CONFIG`` gives (:func:`tf_config_from_env`); a lone worker without."""
        config = tf_config_from_env(os.environ if env is None else env)
        if config is None:
            return cls("worker", 0, 1)
        cluster = config.get("cluster", {})
        task = config.get("task", {})
        num = len(cluster.get("chief", [])) + len(cluster.get("worker", []))
        task_type = task.get("type", "worker")
        if task_type not in (*TRAINING_TYPES, *SERVER_TYPES, EVALUATOR):
            raise ValueError(f"TF_CONFIG task type {task_type!r} is none of chief, worker, ps, "
                             "evaluator")
        frozen = tuple(sorted((k, tuple(v)) for k, v in cluster.items()))
        return cls(task_type, int(task.get("index", 0)), max(num, 1), bool(cluster.get("chief")),
                   frozen)


def tf_config_from_env(env: Mapping[str, str]) -> dict[str, Any] | None:
    """This process's cluster: ``TF_CONFIG`` when set (the training operator's, or the local
    launcher's), else the one built from a Trainer v2 JobSet pod's environment
    (:func:`fmnist_kfp.training.jobset_cluster.tf_config_from_jobset`), else None (one worker,
    no cluster)."""
    raw = env.get("TF_CONFIG", "").strip()
    if raw:
        return json.loads(raw)
    from fmnist_kfp.training.jobset_cluster import tf_config_from_jobset

    return tf_config_from_jobset(env)


def export_tf_config(env: MutableMapping[str, str]) -> dict[str, Any] | None:
    """Sets ``TF_CONFIG`` in ``env`` (a process's ``os.environ``) from a Trainer v2 JobSet pod's
    environment when the pod has none, so that TensorFlow, and everything below it that reads
    ``TF_CONFIG``, sees the cluster a TFJob pod would; returns the config so built (None when
    ``TF_CONFIG`` was set or there is no cluster)."""
    if env.get("TF_CONFIG", "").strip():
        return None
    config = tf_config_from_env(env)
    if config is not None:
        env["TF_CONFIG"] = json.dumps(config)
    return config


def gpus_available() -> bool:
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def cpu_has_bf16() -> bool:
    """AMX or AVX-512 BF16 make bfloat16 math faster than float32 on the CPU."""
    try:
        with open("/proc/cpuinfo") as handle:
            flags = handle.read()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def choose_precision(requested: str) -> str:
    if requested != "auto":
        return requested
    if gpus_available():
        return "mixed_float16"
    return "mixed_bfloat16" if cpu_has_bf16() else "float32"


# Inter-op threads every task of a parameter-server job needs at least (see
# :func:`enough_inter_op_threads`).
MIN_INTER_OP_THREADS = 4


def enough_inter_op_threads() -> int:
    """A parameter-server task runs remote steps, variable reads and updates concurrently: with
    one inter-op thread (what a launcher sharing few cores might set through
    ``TF_NUM_INTEROP_THREADS``) the job deadlocks before the first epoch — seen here with a
    chief, 2 workers and a PS on loopback. Raises this process's eager context to
    :data:`MIN_INTER_OP_THREADS` when fewer were asked for (before TensorFlow's context starts)
    and returns the count a ``tf.distribute.Server``'s config must carry (0: the default)."""
    import tensorflow as tf

    # The API's value, else the environment's (which TensorFlow reads when its context starts);
    # 0 means TensorFlow's default, one per core.
    current = (tf.config.threading.get_inter_op_parallelism_threads()
               or int(os.environ.get("TF_NUM_INTEROP_THREADS", "0") or 0))
    if 0 < current < MIN_INTER_OP_THREADS:
        tf.config.threading.set_inter_op_parallelism_threads(MIN_INTER_OP_THREADS)
        return MIN_INTER_OP_THREADS
    return current


def cluster_resolver(role: ClusterRole):
    """The resolver of ``role``'s training cluster (no evaluator), or None without one."""
    import tensorflow as tf

    cluster = role.training_cluster()
    if sum(len(hosts) for hosts in cluster.values()) < 2:
        return None
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type=role.task_type, task_id=role.task_index,
        rpc_layer="grpc")


def make_strategy(role: ClusterRole | None = None):
    """The job's strategy: ``ParameterServerStrategy`` when the cluster has parameter servers
    (the chief coordinates; see :mod:`fmnist_kfp.training.parameter_server`), else
    ``MultiWorkerMirroredStrategy`` over the chief and workers (TensorFlow's default strategy
    for one replica on at most one device), with NCCL all-reduce when GPUs are present and
    ring all-reduce over gRPC otherwise."""
    import tensorflow as tf

    role = role or ClusterRole.from_env()
    resolver = cluster_resolver(role)
    if role.strategy == PARAMETER_SERVER:
        enough_inter_op_threads()
        # The coordinator connects to every task of the cluster it is given, and the evaluator
        # runs no server: the resolver leaves it out.
        return tf.distribute.ParameterServerStrategy(resolver)
    if resolver is None and len(tf.config.list_physical_devices("GPU")) < 2:
        # One training replica (beside an evaluator) on at most one device: TensorFlow's
        # default strategy. Keras then feeds fit from the dataset as it is, with no
        # distributed iterator (whose own autotuned input root stalls the end of fit), and
        # no MultiWorkerMirroredStrategy health-check thread.
        return tf.distribute.get_strategy()
    if resolver is None:
        # One replica over several local GPUs: mirrored across them, with no cluster (the
        # operator gives a one-replica job no TF_CONFIG).
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec({}), task_type=None, task_id=None)

    implementation = (
        tf.distribute.experimental.CommunicationImplementation.NCCL
        if gpus_available()
        else tf.distribute.experimental.CommunicationImplementation.RING
    )
    return tf.distribute.MultiWorkerMirroredStrategy(
        cluster_resolver=resolver,
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=implementation
        )
    )


def make_backup_callback(backup_dir: str):
    """Keras' ``BackupAndRestore``: an epoch checkpoint that a restarted job resumes from.

    Under ``MultiWorkerMirroredStrategy`` the chief writes ``backup_dir`` and every worker
    restores from it, so all workers of a restarted job resume after the same epoch.
    """
    import tf_keras as keras

    return keras.callbacks.BackupAndRestore(backup_dir, save_freq="epoch", delete_checkpoint=True)
