"""TensorBoard overhead benchmark: training images/s with and without the chief's TensorBoard
callback (per-epoch scalars and the graph, as every training job writes them).

Writes ``bench/results/tensorboard.json``. Needs the real Fashion-MNIST (``$FASHION_MNIST_DIR``
or ``--data-source``). One process, one replica, the real input pipeline: two copies of the
batch-norm CNN are fitted alternately for ``--epochs`` epochs on ``--examples`` training images
each round, one with the callback the trainer adds on the chief, one without, and the wall
time of each ``fit`` (callbacks included) gives images/s; the ratio of the medians is the
overhead. Other work on a shared machine moves the absolute numbers from minute to minute, so
the ratio is taken within each round (measurements seconds apart) and its median reported; and
since another process taking a core halves a round's wall-clock speed, the same ratio is also
computed from this process's CPU time (images per CPU second), which such interference barely
moves: the callback's cost is CPU work in this process.
The profiled variant (``profile_steps``) is measured too, for information: it is off
unless asked for.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

from bench.common import add_data_source, data_source_missing, ingested_dataset, write_results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_source(parser)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--examples", type=int, default=20_000)
    args = parser.parse_args(argv)
    if data_source_missing(args):
        return 2
    import tf_keras as keras

    from fmnist_kfp.dataset.pipeline import training_dataset
    from fmnist_kfp.settings.training import TrainingConfig
    from fmnist_kfp.training.distributed import choose_precision
    from fmnist_kfp.training.models import build_model
    from fmnist_kfp.training.tensorboard import tensorboard_callbacks

    data_dir = ingested_dataset(args.data_source)
    config = TrainingConfig(model_type="batchnorm")
    precision = choose_precision(config.precision)
    keras.mixed_precision.set_global_policy(precision)
    batch = config.batch_size
    steps = -(-args.examples // batch)
    work = tempfile.mkdtemp(prefix="fmnist-tb-bench-")
    variants = {"without": lambda: [],
                "with_tensorboard": lambda: tensorboard_callbacks(f"{work}/a", is_chief=True),
                "with_profile_5_steps": lambda: tensorboard_callbacks(
                    f"{work}/b", is_chief=True, profile_steps=5)}
    models, data = {}, {}
    for name in variants:
        model = build_model(config)
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(), metrics=["accuracy"])
        data[name] = iter(training_dataset(data_dir, "train", batch, shuffle=True, seed=1,
                                           take=args.examples, augment=True, repeat=True))
        model.fit(data[name], steps_per_epoch=5, epochs=1, verbose=0)  # trace, fill the cache
        models[name] = model
    samples: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    for round_index in range(args.rounds):
        for name, callbacks in variants.items():
            started, cpu_started = time.perf_counter(), time.process_time()
            models[name].fit(data[name], steps_per_epoch=steps, epochs=args.epochs, verbose=0,
                             callbacks=callbacks())
            images = steps * batch * args.epochs
            samples[name].append(images / (time.perf_counter() - started))
            cpu[name].append(images / (time.process_time() - cpu_started))
        print(f"round {round_index + 1}: " + json.dumps(
            {k: round(v[-1], 1) for k, v in samples.items()}), flush=True)
    medians = {name: round(statistics.median(values), 1) for name, values in samples.items()}
    result = {
        "machine": {"cpus": len(os.sched_getaffinity(0)), "platform": platform.platform(),
                    "python": sys.version.split()[0]},
        "model_type": config.model_type, "precision": precision, "batch_size": batch,
        "epochs_per_fit": args.epochs, "examples_per_epoch": steps * batch,
        "rounds": args.rounds,
        "images_per_second": medians,
        # Round by round, then the median: both sides of a ratio measured seconds apart.
        "with_tensorboard_vs_without": round(statistics.median(
            a / b for a, b in zip(samples["with_tensorboard"], samples["without"],
                                  strict=True)), 3),
        "with_profile_vs_without": round(statistics.median(
            a / b for a, b in zip(samples["with_profile_5_steps"], samples["without"],
                                  strict=True)), 3),
        "images_per_cpu_second": {name: round(statistics.median(v), 1)
                                  for name, v in cpu.items()},
        "cpu_with_tensorboard_vs_without": round(statistics.median(
            a / b for a, b in zip(cpu["with_tensorboard"], cpu["without"], strict=True)), 3),
        "cpu_with_profile_vs_without": round(statistics.median(
            a / b for a, b in zip(cpu["with_profile_5_steps"], cpu["without"], strict=True)), 3),
        "samples": {k: [round(v, 1) for v in values] for k, values in samples.items()},
        "cpu_samples": {k: [round(v, 1) for v in values] for k, values in cpu.items()},
    }
    write_results("tensorboard", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
