"""Side-car evaluation: an evaluator replica scores each epoch's checkpoint on the validation split.

TensorFlow's pattern for training that cannot evaluate inline (asynchronous parameter servers
above all): "an optional evaluator can be run on the side that periodically reads the
checkpoints saved by the coordinator and runs evaluations against each checkpoint"
(``ParameterServerStrategy``'s docstring; upstream: docs/upstream.md#tensorflow). The TFJob gives it
the replica type ``Evaluator`` and ``TF_CONFIG`` task type ``evaluator``; the strategy's cluster
leaves it out (:meth:`fmnist_kfp.training.distributed.ClusterRole.training_cluster`).

The files, all under the job's work directory:

* ``checkpoints/epoch-NNN`` — the model's weights after epoch NNN, written by the chief
  (:func:`checkpoint_callback`); ``checkpoints/index.jsonl`` lists each one once it is whole,
  so the evaluator never reads a half-written checkpoint and sees every epoch in order (TF's
  ``checkpoints_iterator`` yields only the latest and would skip epochs);
* ``checkpoints/DONE`` — written by the chief when training is over: the evaluator finishes
  once it has scored every listed checkpoint, so the job completes;
* ``evaluation.jsonl`` — one line per epoch: ``{"epoch", "val_loss", "val_accuracy", ...}``,
  which the chief copies into ``result.json`` (``evaluation``) and the selection report plots.
"""

from __future__ import annotations

import json
import time
from typing import Any

CHECKPOINT_DIR = "checkpoints"
INDEX_FILE = "index.jsonl"
DONE_FILE = "DONE"
EVALUATION_FILE = "evaluation.jsonl"


def checkpoint_prefix(work_dir: str, epoch: int) -> str:
    return f"{work_dir}/{CHECKPOINT_DIR}/epoch-{epoch:03d}"


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _append_jsonl(path: str, entry: dict[str, Any]) -> None:
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "a") as handle:
        handle.write(json.dumps(entry) + "\n")


def read_evaluation(work_dir: str) -> list[dict[str, Any]]:
    """The evaluator's per-epoch metrics, one entry per epoch (a re-scored epoch replaces the
    earlier one), in epoch order."""
    by_epoch = {e["epoch"]: e for e in _read_jsonl(f"{work_dir}/{EVALUATION_FILE}")}
    return [by_epoch[k] for k in sorted(by_epoch)]


def checkpoint_callback(model, work_dir: str, *, is_chief: bool, task_id: int):
    """An epoch-end callback writing the weights for the evaluator.

    Every training replica runs it: under ``MultiWorkerMirroredStrategy`` reading batch-norm
    statistics is an all-reduce, so a non-chief writes its (identical) copy to a scratch
    directory and deletes it; under ``ParameterServerStrategy`` only the chief runs callbacks.
    """
    import tensorflow as tf
    import tf_keras as keras

    directory = f"{work_dir}/{CHECKPOINT_DIR}"

    class EvaluatorCheckpoint(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            checkpoint = tf.train.Checkpoint(model=model)
            if not is_chief:
                scratch = f"{directory}/workertemp_{task_id}"
                checkpoint.write(f"{scratch}/epoch")
                tf.io.gfile.rmtree(scratch)
                return
            tf.io.gfile.makedirs(directory)
            prefix = checkpoint_prefix(work_dir, epoch + 1)
            checkpoint.write(prefix)
            _append_jsonl(f"{directory}/{INDEX_FILE}",
                          {"epoch": epoch + 1, "path": prefix, "written_at": time.time()})

    return EvaluatorCheckpoint()


def mark_training_done(work_dir: str, epochs: int) -> None:
    import tensorflow as tf

    directory = f"{work_dir}/{CHECKPOINT_DIR}"
    tf.io.gfile.makedirs(directory)
    with tf.io.gfile.GFile(f"{directory}/{DONE_FILE}", "w") as handle:
        json.dump({"epochs": epochs, "finished_at": time.time()}, handle)


def reset(work_dir: str) -> None:
    """A fresh job (not a resumed one) starts without an earlier job's checkpoints or marker."""
    import tensorflow as tf

    for path in (f"{work_dir}/{CHECKPOINT_DIR}", f"{work_dir}/{EVALUATION_FILE}"):
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        elif tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)


def wait_for_evaluation(work_dir: str, epochs: int, timeout: float) -> list[dict[str, Any]]:
    """The chief's last act with an evaluator: wait (at most ``timeout`` s) until the final
    epoch is scored, so the metrics land in ``result.json`` and the evaluator is not deleted
    (``cleanPodPolicy: Running``) before it has finished; returns what was scored."""
    deadline = time.monotonic() + timeout
    while True:
        scored = read_evaluation(work_dir)
        if (scored and scored[-1]["epoch"] >= epochs) or time.monotonic() >= deadline:
            return scored
        time.sleep(0.5)


def run_evaluator(config, data_dir: str, work_dir: str, *, poll_seconds: float = 1.0) -> int:
    """Scores every checkpoint the chief lists, in epoch order, until the chief has marked
    training done and nothing is left; returns the number of checkpoints scored."""
    import tensorflow as tf
    import tf_keras as keras

    from fmnist_kfp.dataset.pipeline import validation_dataset, validation_size
    from fmnist_kfp.training.models import build_model
    from fmnist_kfp.training.recipe import make_loss

    keras.mixed_precision.set_global_policy("float32")
    model = build_model(config)
    # The trainer's own loss, so its val_loss and the evaluator's measure the same thing.
    model.compile(loss=make_loss(config),
                  metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    data = validation_dataset(data_dir, config.batch_size)
    directory = f"{work_dir}/{CHECKPOINT_DIR}"
    done_path = f"{directory}/{DONE_FILE}"
    scored = {e["epoch"] for e in read_evaluation(work_dir)}
    print(f"evaluator: scoring checkpoints of {directory} on {validation_size(data_dir):,} "
          "validation images", flush=True)
    count = 0
    while True:
        finished = tf.io.gfile.exists(done_path)  # read before the index: nothing is missed
        pending = [e for e in _read_jsonl(f"{directory}/{INDEX_FILE}")
                   if e["epoch"] not in scored]
        for entry in sorted(pending, key=lambda e: e["epoch"]):
            started = time.perf_counter()
            tf.train.Checkpoint(model=model).read(entry["path"]).expect_partial()
            loss, accuracy = model.evaluate(data, verbose=0)
            result = {"epoch": entry["epoch"], "val_loss": float(loss),
                      "val_accuracy": float(accuracy),
                      "seconds": round(time.perf_counter() - started, 3),
                      "finished_at": round(time.time(), 3)}
            _append_jsonl(f"{work_dir}/{EVALUATION_FILE}", result)
            print(f"evaluator: epoch={result['epoch']} epochs={config.epochs} "
                  f"val_loss={result['val_loss']:.4f} "
                  f"val_accuracy={result['val_accuracy']:.4f}", flush=True)
            scored.add(entry["epoch"])
            count += 1
        if finished and not pending:
            print(f"evaluator: training is done; scored {count} checkpoint(s)", flush=True)
            return count
        if not pending:
            time.sleep(poll_seconds)
