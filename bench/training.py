"""Training benchmark: throughput through the real input pipeline vs in-memory tensors, and
DAWNBench-style time-to-accuracy of the default configuration.

Writes ``bench/results/training.json``. Needs the real Fashion-MNIST: ``$FASHION_MNIST_DIR``
or ``--data-source``. Throughput is measured in this process (one replica, the default precision,
global batch = the default per-replica batch × the default workers), each model fed both ways in
the same run, so the ratio — not the absolute number — is the result.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

from bench.common import RESULTS, add_data_source, data_source_missing, ingested_dataset

TARGET_ACCURACY = 0.91  # the time-to-accuracy definition: seconds from launch to 91% test
MORE_TARGETS = (0.92, 0.93)


def _StepClock(keras):  # noqa: N802 - a class factory: tf_keras is imported lazily
    class StepClock(keras.callbacks.Callback):
        """Seconds from the end of the first step (warm) to the end of the last."""

        def on_train_batch_end(self, batch, logs=None):
            now = time.perf_counter()
            if batch == 0:
                self.first = now
            self.seconds = now - self.first

    return StepClock()


def measure_throughput(model_type: str, data_dir: str, global_batch: int, steps: int,
                       warmup: int, rounds: int = 3) -> dict:
    import tensorflow as tf
    import tf_keras as keras

    from fmnist_kfp.dataset.pipeline import (
        load_arrays,
        random_flip,
        to_model_inputs,
        training_dataset,
    )
    from fmnist_kfp.settings.training import TrainingConfig
    from fmnist_kfp.training.distributed import choose_precision
    from fmnist_kfp.training.models import build_model

    config = TrainingConfig(model_type=model_type)
    precision = choose_precision(config.precision)
    keras.mixed_precision.set_global_policy(precision)
    images, labels = load_arrays(data_dir, "train")
    feeds = {
        "input_pipeline": lambda: training_dataset(
            data_dir, "train", global_batch, shuffle=True, seed=1, augment=config.augment
        ).repeat(),
        # The same uint8 images already in memory, batched, cast and flipped the same way: no
        # file reading, parsing, caching or shuffling.
        "in_memory": lambda: tf.data.Dataset.from_tensor_slices((images, labels))
        .repeat().batch(global_batch).map(to_model_inputs).map(random_flip)
        .prefetch(tf.data.AUTOTUNE),
    }
    result = {"model_type": model_type, "precision": precision, "global_batch": global_batch}
    models, iterators = {}, {}
    for feed, make in feeds.items():
        model = build_model(config)
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(), metrics=["accuracy"])
        models[feed], iterators[feed] = model, make()
        model.fit(iterators[feed], steps_per_epoch=warmup, epochs=1, verbose=0)  # trace, cache
    # Interleaved rounds, median of each: a slow moment of the machine hits both feeds alike.
    samples: dict[str, list[float]] = {feed: [] for feed in feeds}
    for _ in range(rounds):
        for feed in feeds:
            # Timed from the first step to the last inside fit: fit's own start and teardown
            # (seconds, in steps of the iterator's shutdown) are not training throughput.
            clock = _StepClock(keras)
            models[feed].fit(iterators[feed], steps_per_epoch=steps + 1, epochs=1, verbose=0,
                             callbacks=[clock])
            samples[feed].append(steps * global_batch / clock.seconds)
    for feed, values in samples.items():
        result[f"{feed}_images_per_second"] = round(statistics.median(values), 1)
        result[f"{feed}_samples"] = [round(v, 1) for v in values]
    result["input_pipeline_to_in_memory_ratio"] = round(
        result["input_pipeline_images_per_second"] / result["in_memory_images_per_second"], 3
    )
    return result


def time_to_accuracy(data_dir: str, work_dir: Path, model_type: str,
                     precision: str = "") -> dict:
    """Runs the default configuration through the local launcher, evaluating on the test split
    after every epoch (``--evaluate-test-split``, benchmarks only); reports when test accuracy
    first reaches 91% (the definition), 92% and 93%, in seconds from launch."""
    from dataclasses import replace

    from fmnist_kfp.launcher.local_processes import LocalProcessLauncher
    from fmnist_kfp.settings.pipeline import PipelineParameters
    from fmnist_kfp.training.training_job import TrainingJobSpec

    defaults = PipelineParameters()
    config = defaults.training_config(model_type)
    if precision:
        config = replace(config, precision=precision)
    spec = TrainingJobSpec(
        name=f"bench-{model_type}", config=config, data_dir=data_dir,
        export_dir=str(work_dir / "1"), work_dir=str(work_dir),
        num_workers=defaults.num_workers, trainer_args=["--evaluate-test-split"],
    )
    log = io.StringIO()
    load_before = os.getloadavg()
    started = time.time()
    outcome = LocalProcessLauncher(out=log).run(spec)
    history = outcome.result["history"]

    def reached(target: float) -> dict | None:
        return next((e for e in history if e["test_accuracy"] >= target), None)

    first = reached(TARGET_ACCURACY)
    return {
        "model_type": model_type,
        "num_workers": defaults.num_workers,
        "per_replica_batch": config.batch_size,
        "epochs_budget": config.epochs,
        "precision": outcome.result["precision"],
        "target_test_accuracy": TARGET_ACCURACY,
        "reached": first is not None,
        "epoch_reached": first["epoch"] if first else None,
        "seconds_to_target": round(first["finished_at"] - started, 1) if first else None,
        **{f"seconds_to_{round(t * 100)}": (round(e["finished_at"] - started, 1)
                                            if (e := reached(t)) else None)
           for t in MORE_TARGETS},
        **{f"epoch_reached_{round(t * 100)}": (e["epoch"] if (e := reached(t)) else None)
           for t in MORE_TARGETS},
        "job_seconds": outcome.wall_seconds,
        "test_accuracy_per_epoch": [round(e["test_accuracy"], 4) for e in history],
        "seconds_from_launch_per_epoch": [round(e["finished_at"] - started, 1) for e in history],
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def worker_scaling(data_dir: str, work_dir: Path, model_type: str, epochs: int = 2) -> dict:
    """The same global batch on 1 and 2 local worker processes (MultiWorkerMirroredStrategy
    over loopback): what a second worker buys, or costs, on this machine."""
    from fmnist_kfp.launcher.local_processes import LocalProcessLauncher
    from fmnist_kfp.settings.pipeline import PipelineParameters
    from fmnist_kfp.settings.training import TrainingConfig
    from fmnist_kfp.training.training_job import TrainingJobSpec

    global_batch = PipelineParameters().batch_size
    result: dict = {"model_type": model_type, "global_batch": global_batch}
    for workers in (1, 2):
        spec = TrainingJobSpec(
            name=f"bench-scaling-{workers}",
            config=TrainingConfig(model_type=model_type, epochs=epochs,
                                  batch_size=global_batch // workers),
            data_dir=data_dir, export_dir=str(work_dir / f"w{workers}" / "1"),
            work_dir=str(work_dir / f"w{workers}"), num_workers=workers,
        )
        history = LocalProcessLauncher(out=io.StringIO()).run(spec).result["history"]
        # The last epoch: the first one also traces the graph and fills the cache.
        result[f"workers_{workers}_images_per_second"] = history[-1]["images_per_second"]
    result["two_to_one_worker_ratio"] = round(
        result["workers_2_images_per_second"] / result["workers_1_images_per_second"], 3
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_source(parser)
    parser.add_argument("--model-types", default="basic,dropout,batchnorm",
                        help="throughput models ('' to skip)")
    parser.add_argument("--steps", type=int, default=200, help="timed steps per measurement")
    parser.add_argument("--tta-model", default="batchnorm",
                        help="model for time-to-accuracy ('' to skip)")
    parser.add_argument("--scaling-model", default="basic",
                        help="model for the 1-vs-2-worker comparison ('' to skip)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per feed")
    parser.add_argument("--tta-precision", default="",
                        help="precision of the time-to-accuracy run (default: the pipeline's; "
                             "e.g. mixed_float16 on a GPU)")
    parser.add_argument("--output", default=str(RESULTS / "training.json"))
    args = parser.parse_args(argv)
    if data_source_missing(args):
        return 2
    from fmnist_kfp.settings.pipeline import PipelineParameters

    work = RESULTS / "work"
    for stale in ("tta", "scaling"):  # a killed earlier run must not be resumed from
        shutil.rmtree(work / stale, ignore_errors=True)
    data_dir = ingested_dataset(args.data_source)
    defaults = PipelineParameters()
    global_batch = defaults.batch_size * defaults.num_workers
    output = Path(args.output)
    # Sections not measured this time keep their last values.
    results = json.loads(output.read_text()) if output.exists() else {}
    results["machine"] = {"cpus": os.cpu_count(), "arch": platform.machine()}
    models = [m for m in args.model_types.split(",") if m]
    if models:
        results["throughput"] = []
    for model_type in models:
        entry = measure_throughput(model_type, str(data_dir), global_batch, args.steps, 30,
                                   args.rounds)
        print(json.dumps(entry), flush=True)
        results["throughput"].append(entry)
    if args.scaling_model:
        results["worker_scaling"] = worker_scaling(str(data_dir), work / "scaling",
                                                   args.scaling_model)
        print(json.dumps(results["worker_scaling"]), flush=True)
    if args.tta_model:
        results["time_to_accuracy"] = time_to_accuracy(str(data_dir), work / "tta", args.tta_model,
                                                       args.tta_precision)
        print(json.dumps(results["time_to_accuracy"]), flush=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
