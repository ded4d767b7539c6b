"""Multi-worker plumbing: ``TF_CONFIG``, the strategy, precision and fault-tolerant checkpoints."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterRole:
    """This process's place in the job, read from ``TF_CONFIG`` as the training operator sets it."""

    task_type: str
    task_index: int
    num_workers: int  # every process that trains: chief + workers
    has_chief: bool = False

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
    def from_env(cls) -> ClusterRole:
        raw = os.environ.get("TF_CONFIG", "").strip()
        if not raw:
            return cls("worker", 0, 1)
        config = json.loads(raw)
        cluster = config.get("cluster", {})
        task = config.get("task", {})
        num = len(cluster.get("chief", [])) + len(cluster.get("worker", []))
        task_type = task.get("type", "worker")
        if task_type not in ("chief", "worker"):
            # Evaluator/PS replicas are not part of MultiWorkerMirroredStrategy.
            raise ValueError(f"TF_CONFIG task type {task_type!r} is not a training replica")
        return cls(task_type, int(task.get("index", 0)), max(num, 1), bool(cluster.get("chief")))


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


def make_strategy():
    """``MultiWorkerMirroredStrategy`` over the ``TF_CONFIG`` cluster (one worker when unset),
    with NCCL all-reduce when GPUs are present and ring all-reduce over gRPC otherwise."""
    import tensorflow as tf

    implementation = (
        tf.distribute.experimental.CommunicationImplementation.NCCL
        if gpus_available()
        else tf.distribute.experimental.CommunicationImplementation.RING
    )
    return tf.distribute.MultiWorkerMirroredStrategy(
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
