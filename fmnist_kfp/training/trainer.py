"""Trains one CNN on an ingested dataset; one process per worker of a multi-worker job.

Run as ``python -m fmnist_kfp.training.trainer --data-dir D --work-dir W --export-dir E
[hyperparams]`` in each worker with the ``TF_CONFIG`` the Kubeflow training operator (or the local
launcher) injects, or on Kubeflow Trainer v2, which sets none, with the one
:mod:`fmnist_kfp.training.jobset_cluster` builds from the JobSet pod's environment. Every
worker trains; the chief alone exports the SavedModel, writes ``result.json`` and the per-epoch
history, and keeps the checkpoint that a restarted job resumes from.

Each epoch prints one line, a UTC timestamp then ``key=value`` pairs
(``2025-01-01T12:00:03.123456Z epoch=3 epochs=10 loss=... accuracy=... val_accuracy=...``):
readable in logs and parsed as-is by Katib's StdOut metrics collector, which takes a first token
that parses as RFC 3339 as the report's time and otherwise stores 0001-01-01 (see
:mod:`fmnist_kfp.tuning.experiment_settings`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from datetime import datetime, timezone
from typing import Any

from fmnist_kfp.errors import UserInputError
from fmnist_kfp.settings.platform import use_tensorflow_env
from fmnist_kfp.settings.schema import add_flags, given_values
from fmnist_kfp.settings.training import TrainingConfig
from fmnist_kfp.training.training_job import (
    KATIB_EARLY_STOPPING_ENV,
    MAX_PARAMETERS_FLAG,
    OVER_BUDGET_VERDICT_SECONDS,
)

log = logging.getLogger("fmnist.trainer")

RESULT_FILE = "result.json"
HISTORY_FILE = "history.jsonl"
# Exit code of a worker whose peer was lost (peer_lost): 128 or more is what the TFJob's ExitCode
# policy retries (kubeflow/training-operator v1.9.2 pkg/util/train/train_util.go 24-26) and what
# our ClusterTrainingRuntime's podFailurePolicy leaves to the JobSet's restart (1-127 fail it).
PEER_LOST_EXIT_CODE = 138
BACKUP_DIR = "backup"
# How long the chief waits for the evaluator to score the last epoch before it finishes.
EVALUATOR_WAIT_SECONDS = 600
# Steps per call of the compiled train function: Keras' Python work between steps is
# amortized over 16 (+6-10% images/s on 2 cores, bench/README.md; 64 gains 1% more).
STEPS_PER_EXECUTION = 16


def read_result(work_dir: str) -> dict[str, Any]:
    """What the chief reported: ``result.json`` in a job's work directory (a local path, a
    mount, or a bucket URI)."""
    path = f"{work_dir}/{RESULT_FILE}"
    missing = UserInputError(f"{work_dir} is not a trained model directory (no {RESULT_FILE})")
    if "://" not in work_dir:  # a file: no TensorFlow import (seconds of a step's time) for it
        try:
            with open(path) as handle:
                return json.load(handle)
        except FileNotFoundError:
            raise missing from None
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        raise missing
    with tf.io.gfile.GFile(path) as handle:
        return json.load(handle)


def epoch_line(entry: dict[str, Any], epochs: int, when: float) -> str:
    """The line an epoch prints: ``<RFC 3339 UTC time, microseconds> epoch=E epochs=N k=v ...``
    (``entry`` as the history holds it; ``when`` a POSIX time)."""
    stamp = datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return " ".join(
        [stamp, f"epoch={entry['epoch']}", f"epochs={epochs}"]
        + [f"{k}={v:.4f}" for k, v in entry.items() if k not in ("epoch", "finished_at")]
    )


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, TrainingConfig]:
    parser = argparse.ArgumentParser(
        prog="python -m fmnist_kfp.training.trainer", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--data-dir", required=True, help="ingested dataset directory")
    parser.add_argument("--work-dir", required=True, help="checkpoints, history, result.json")
    parser.add_argument("--export-dir", required=True, help="where the chief writes the model")
    parser.add_argument(
        "--evaluate-test-split", action="store_true",
        help="score the test split after every epoch instead of the validation split, as "
             "test_loss/test_accuracy (time-to-accuracy benchmarks only: tuning and selection "
             "choose on the validation split and never see these)",
    )
    parser.add_argument(
        MAX_PARAMETERS_FLAG, type=int, default=0, metavar="N",
        help="a search's parameter budget (0: none): a configuration whose model has more "
             "parameters is not trained; it reports val_accuracy=0 and exits 0, so that the "
             "search learns from it (Katib's suggestions read only succeeded trials)")
    add_flags(parser, TrainingConfig, title="training configuration")
    args = parser.parse_args(argv)
    try:
        config = TrainingConfig(**given_values(args, TrainingConfig)).validate()
    except UserInputError as error:
        parser.error(str(error))
    return args, config


def steps_per_execution(config: TrainingConfig) -> int:
    """Steps each call of the train function runs: one while profiling, whose trace counts
    batch hooks (which then run once per call), otherwise :data:`STEPS_PER_EXECUTION`. Either
    way the same steps run in the same order, and the epochs end and checkpoint where they
    did (a call stops at the epoch's end)."""
    return 1 if config.profile_steps else STEPS_PER_EXECUTION


def read_history(path: str) -> list[dict[str, Any]]:
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        return []
    by_epoch: dict[int, dict[str, Any]] = {}
    with tf.io.gfile.GFile(path) as handle:
        for line in handle:
            if line.strip():
                entry = json.loads(line)
                by_epoch[entry["epoch"]] = entry  # a re-run epoch replaces the lost one
    return [by_epoch[k] for k in sorted(by_epoch)]


def train(
    config: TrainingConfig,
    data_dir: str,
    work_dir: str,
    export_dir: str,
    evaluate_test_split: bool = False,
) -> dict[str, Any] | None:
    """Trains and (on the chief) exports; returns the result on the chief, None elsewhere."""
    from fmnist_kfp.training.distributed import (
        PARAMETER_SERVER,
        ClusterRole,
        choose_precision,
        gpus_available,
        make_strategy,
    )

    role = ClusterRole.from_env()
    if role.serves_only:  # a PS, or a worker of a parameter-server job: serve until stopped
        from fmnist_kfp.training.parameter_server import run_server

        run_server(role)
    if role.is_evaluator:  # scores the chief's checkpoints; no part of the training cluster
        from fmnist_kfp.training.evaluator import run_evaluator

        run_evaluator(config, data_dir, work_dir)
        return None
    parameter_server = role.strategy == PARAMETER_SERVER
    # The strategy must exist before any other TensorFlow op runs in this process.
    strategy = make_strategy(role)

    import tensorflow as tf
    import tf_keras as keras

    from fmnist_kfp.dataset.pipeline import training_dataset
    from fmnist_kfp.dataset.records import read_metadata
    from fmnist_kfp.training.distributed import make_backup_callback
    from fmnist_kfp.training.export import export_saved_model
    from fmnist_kfp.training.models import build_model
    from fmnist_kfp.training.recipe import learning_rate_schedule, make_loss

    precision = choose_precision(config.precision)
    keras.mixed_precision.set_global_policy(precision)
    keras.utils.set_random_seed(config.seed)

    splits = read_metadata(data_dir)["splits"]
    if "validation" not in splits:
        raise UserInputError(
            f"the dataset in {data_dir} has no validation split (it was ingested before "
            "ingestion carved one): ingest it again (a run with caching off, or `fmnist-kfp "
            "ingest`)")
    available = splits["train"]["num_examples"]
    num_validation = splits["validation"]["num_examples"]
    num_train = config.train_examples or available
    if num_train > available:
        raise UserInputError(
            f"train_examples={config.train_examples} exceeds the {available} examples of the "
            "training split (the validation split is set aside at ingestion)")
    replicas = strategy.num_replicas_in_sync
    global_batch = config.batch_size * replicas

    def make_train_data(seed: int):
        return training_dataset(
            data_dir, "train", global_batch, shuffle=True, take=config.train_examples,
            seed=seed, augment=config.augment, repeat=True,
        )

    if parameter_server:
        # Each worker builds its own copy (Model.fit under ParameterServerStrategy takes a
        # DatasetCreator); an epoch is steps_per_epoch steps, whichever workers run them.
        from fmnist_kfp.training.parameter_server import per_worker_dataset

        train_data = per_worker_dataset(make_train_data, config.seed)
    else:
        train_data = make_train_data(config.seed)
    steps_per_epoch = -(-num_train // global_batch)
    # Every epoch is scored on the validation split ingestion set aside: what tuning and
    # selection compare. Benchmarks of time to test accuracy score the test split instead,
    # reported under test_* names, never val_*.
    scored_split = "test" if evaluate_test_split else "validation"
    validation_data = training_dataset(data_dir, scored_split, global_batch, shuffle=False)
    # Keras needs the count to run several steps per call; sharded by DATA, every worker runs
    # as many global batches as one worker would.
    validation_steps = -(-splits[scored_split]["num_examples"] // global_batch)
    if role.has_evaluator:
        validation_data = None  # the evaluator replica scores each epoch's checkpoint
    with strategy.scope():
        model = build_model(config)
        model.compile(
            optimizer=keras.optimizers.Adam(learning_rate_schedule(config, steps_per_epoch)),
            loss=make_loss(config),
            metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
            steps_per_execution=steps_per_execution(config),
        )
    tf.io.gfile.makedirs(work_dir)
    history_path = f"{work_dir}/{HISTORY_FILE}"
    if parameter_server:
        cluster = role.training_cluster()
        print(f"{role.name}: ParameterServerStrategy coordinating {len(cluster['worker'])} "
              f"worker(s) and {len(cluster['ps'])} parameter server(s)", flush=True)
    elif role.num_workers > 1:
        print(f"{role.name}: MultiWorkerMirroredStrategy over {role.num_workers} workers "
              f"({'NCCL' if gpus_available() else 'ring'} all-reduce)", flush=True)
    print(
        f"{role.name}: training {config.model_type} ({model.count_params():,} parameters) on "
        f"{num_train:,} images, {replicas} replica(s), global batch {global_batch}, {precision}",
        flush=True,
    )

    class EpochReport(keras.callbacks.Callback):
        """One ``key=value`` line per epoch; the chief appends it to the history file."""

        resumed = False

        def on_epoch_begin(self, epoch, logs=None):
            if epoch > 0 and not self.resumed:  # BackupAndRestore skipped finished epochs
                print(f"resumed_from_epoch={epoch}", flush=True)
            self.resumed = True
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            seconds = time.perf_counter() - self.started
            entry = {"epoch": epoch + 1, **{
                (f"test_{k[4:]}" if evaluate_test_split and k.startswith("val_") else k): float(v)
                for k, v in (logs or {}).items()}}
            entry["seconds"] = round(seconds, 3)
            entry["finished_at"] = round(time.time(), 3)
            entry["images_per_second"] = round(num_train / seconds, 1)
            print(epoch_line(entry, config.epochs, time.time()), flush=True)
            if role.is_chief:
                with tf.io.gfile.GFile(history_path, "a") as handle:
                    handle.write(json.dumps(entry) + "\n")

    if not role.is_chief:
        # A non-chief writes its copy of each checkpoint to a scratch directory of its own
        # (tf_keras' workertemp_<task>); one left half-written by a killed predecessor would
        # break this worker's restart, and it holds nothing the chief's checkpoint lacks.
        scratch = f"{work_dir}/{BACKUP_DIR}/workertemp_{strategy.cluster_resolver.task_id}"
        if tf.io.gfile.exists(scratch):
            tf.io.gfile.rmtree(scratch)
    started = time.time()
    # EpochReport runs before the backup so a logged epoch is never ahead of the checkpoint.
    callbacks = [EpochReport(), make_backup_callback(f"{work_dir}/{BACKUP_DIR}")]
    if parameter_server and validation_data is not None:
        from fmnist_kfp.training.parameter_server import inline_validation

        # Before EpochReport, which prints the validation metrics it adds.
        callbacks.insert(0, inline_validation(model, config, validation_data))
        validation_data = None
    # TensorBoard logs under <work_dir>/tensorboard, written by the chief alone.
    from fmnist_kfp.training.tensorboard import tensorboard_callbacks

    # Keras' profiler is a batch hook, which ParameterServerStrategy refuses: no profile there.
    callbacks += tensorboard_callbacks(work_dir, is_chief=role.is_chief,
                                       profile_steps=0 if parameter_server
                                       else config.profile_steps)
    if role.has_evaluator:
        from fmnist_kfp.training.evaluator import checkpoint_callback, reset

        if role.is_chief and not tf.io.gfile.exists(f"{work_dir}/{BACKUP_DIR}/chief"):
            reset(work_dir)  # a fresh job: no earlier job's checkpoints or DONE marker
        callbacks.append(checkpoint_callback(model, work_dir, is_chief=role.is_chief,
                                             task_id=role.task_index))
    model.fit(train_data, epochs=config.epochs, steps_per_epoch=steps_per_epoch,
              validation_data=validation_data, validation_steps=validation_steps,
              verbose=0, callbacks=callbacks)
    train_seconds = time.time() - started
    # Every worker reads the weights: batch-norm statistics are sync-on-read variables whose
    # read is an all-reduce, so a chief reading alone would wait for workers that have left.
    weights = model.get_weights()
    if not role.is_chief:
        return None
    # Finished: no checkpoint may linger for a later job in this directory to "resume" from.
    # Only the chief's own: other workers may still be finishing their last (scratch) save.
    chief_checkpoint = f"{work_dir}/{BACKUP_DIR}/chief"
    if tf.io.gfile.exists(chief_checkpoint):
        tf.io.gfile.rmtree(chief_checkpoint)

    # Export a float32 copy: servers without bf16 hardware run it at full speed.
    keras.mixed_precision.set_global_policy("float32")
    serving_model = build_model(config)
    serving_model.set_weights(weights)  # variables are float32 under mixed precision too
    export_saved_model(serving_model, export_dir, flip_averaging=config.flip_averaging)
    history = read_history(history_path)
    evaluation = []
    if role.has_evaluator:
        from fmnist_kfp.training.evaluator import mark_training_done, wait_for_evaluation

        mark_training_done(work_dir, config.epochs)
        evaluation = wait_for_evaluation(work_dir, config.epochs, EVALUATOR_WAIT_SECONDS)
    final = (
        {k: v for k, v in history[-1].items() if k not in ("epoch", "finished_at")}
        if history else {}
    )
    result = {
        "model_type": config.model_type,
        "hyperparameters": json.loads(config.to_json()),
        "parameters": int(model.count_params()),
        "epochs": config.epochs,
        "replicas": replicas,
        "global_batch_size": global_batch,
        "precision": precision,
        "train_examples": num_train,
        "validation_examples": num_validation,
        "scored_split": scored_split,
        "train_seconds": round(train_seconds, 2),
        "final_metrics": final,
        "history": history,
        "strategy": role.strategy,
        "evaluation": evaluation,
    }
    with tf.io.gfile.GFile(f"{work_dir}/{RESULT_FILE}", "w") as handle:
        json.dump(result, handle, indent=2)
    print(f"{role.name}: exported the model ({train_seconds:.1f} s of training)", flush=True)
    return result


def over_parameter_budget(config: TrainingConfig, budget: int) -> bool:
    """Whether ``config``'s model has more parameters than ``budget``; if so, says so, and
    reports the objective 0 as an epoch line for Katib's collector, before TensorFlow starts."""
    from fmnist_kfp.training.models import parameter_count

    count = parameter_count(config)
    if count <= budget:
        return False
    print(f"not training: {config.model_type} with these hyperparameters has {count:,} "
          f"parameters, over the search's budget of {budget:,} (tuning.max_parameters)",
          flush=True)
    print(epoch_line({"epoch": 0, "val_accuracy": 0.0}, config.epochs, time.time()), flush=True)
    if os.environ.get(KATIB_EARLY_STOPPING_ENV):
        # Katib's collector may stop this trial on that objective: it is given the time to
        # read it and decide (a SIGTERM then ends this process), rather than find the trial
        # ended first (fmnist_kfp.katib.trial_process).
        time.sleep(OVER_BUDGET_VERDICT_SECONDS)
    return True


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    use_tensorflow_env()
    logging.getLogger("tensorflow").setLevel(logging.WARNING)  # per-step collective chatter
    args, config = parse_args(argv)
    if args.max_parameters and over_parameter_budget(config, args.max_parameters):
        return 0
    from fmnist_kfp.training.distributed import export_tf_config

    # On Trainer v2 no one sets TF_CONFIG: built here from the JobSet pod's environment, before
    # TensorFlow starts, so that everything from here on sees what a TFJob pod would.
    built = export_tf_config(os.environ)
    if built is not None:
        task = built["task"]
        print(f"TF_CONFIG from the JobSet environment: {task['type']} {task['index']} of "
              f"{', '.join(built['cluster']['worker'])}", flush=True)
    try:
        train(config, args.data_dir, args.work_dir, args.export_dir, args.evaluate_test_split)
    except Exception as error:
        if not peer_lost(error):
            raise
        # One line, not TensorFlow's page of gRPC detail: the operator restarts this worker.
        print(f"a peer worker was lost ({type(error).__name__}: "
              f"{str(error).strip().splitlines()[-1][:200]}); exiting with code "
              f"{PEER_LOST_EXIT_CODE} so that the operator restarts this worker, which resumes "
              "from the last epoch checkpoint", flush=True)
        return PEER_LOST_EXIT_CODE
    return 0


def peer_lost(error: BaseException) -> bool:
    """Whether ``error`` is a collective op aborted because another worker went away (killed,
    preempted) or came back: TensorFlow's ``UnavailableError`` (the peer cannot be reached) or
    ``AbortedError`` (its restarted incarnation reconnected to the coordination service before
    this worker saw it go). That is the peer's failure, not this worker's, and a restart of
    this worker resumes from the checkpoint; exiting with it as a traceback (code 1) made the
    TFJob's ExitCode policy fail the whole job for one killed peer, as the real Training
    Operator showed (tests/fmnist_kfp/launcher/test_tfjob_on_the_cluster.py), both ways."""
    import tensorflow as tf

    return isinstance(error, (tf.errors.UnavailableError, tf.errors.AbortedError))


if __name__ == "__main__":
    sys.exit(main())
