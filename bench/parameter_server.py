"""Parameter-server vs mirrored training: test accuracy and time of the batch-norm CNN.

Trains the same configuration twice through the local launcher, in one session and on the same
epochs: ``multi_worker_mirrored`` (``--mirrored-workers`` workers) and ``parameter_server`` (a
chief, ``--workers`` workers, ``--ps`` parameter servers; with ``--evaluator`` an evaluator
too), then scores each exported SavedModel on the 10,000 test images. Writes
``bench/results/parameter_server.json``. Needs the real Fashion-MNIST (``$FASHION_MNIST_DIR``).
Both runs see the same number of examples and steps per epoch (per-step batch
``batch_size``); the PS run's steps are shared by its workers asynchronously.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time

from bench.common import RESULTS, WORK, add_data_source, data_source_missing, ingested_dataset


def run(name: str, data_dir: str, config, **job) -> dict:
    from fmnist_kfp.dataset.pipeline import load_arrays
    from fmnist_kfp.launcher.local_processes import LocalProcessLauncher
    from fmnist_kfp.selection.evaluate import predict_classes
    from fmnist_kfp.training.training_job import TrainingJobSpec

    work = WORK / name
    shutil.rmtree(work, ignore_errors=True)
    spec = TrainingJobSpec(name=name, config=config, data_dir=data_dir,
                           export_dir=str(work / "1"), work_dir=str(work), max_restarts=0,
                           **job)
    started = time.time()
    outcome = LocalProcessLauncher().run(spec)
    images, labels = load_arrays(data_dir, "test")
    accuracy = float((predict_classes(str(work / "1"), images) == labels).mean())
    result = outcome.result
    return {
        "job": {k: v for k, v in job.items()},
        "replicas": spec.replica_counts(),
        "test_accuracy": round(accuracy, 4),
        "final_train_metrics": result["final_metrics"],
        "train_seconds": result["train_seconds"],
        "job_wall_seconds": round(time.time() - started, 1),
        "epoch_seconds": [e["seconds"] for e in result["history"]],
        "evaluation": result.get("evaluation", []),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_source(parser)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2, help="PS run's workers")
    parser.add_argument("--ps", type=int, default=1, help="PS run's parameter servers")
    parser.add_argument("--mirrored-workers", type=int, default=1)
    parser.add_argument("--evaluator", action="store_true")
    args = parser.parse_args(argv)
    if data_source_missing(args):
        return 2
    from fmnist_kfp.settings.training import TrainingConfig

    data_dir = str(ingested_dataset(args.data_source))
    config = TrainingConfig(model_type="batchnorm", epochs=args.epochs)
    report = {
        "what": "batch-norm CNN, same config and epochs: multi_worker_mirrored vs "
                "parameter_server through the local launcher; test accuracy of the export",
        "config": json.loads(config.to_json()),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "shared": "2 cores, possibly shared with other work"},
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    report["multi_worker_mirrored"] = run(
        "bench-mirrored", data_dir, config, num_workers=args.mirrored_workers)
    print(json.dumps(report["multi_worker_mirrored"], indent=1), flush=True)
    report["parameter_server"] = run(
        "bench-ps", data_dir, config, num_workers=args.workers, strategy="parameter_server",
        num_ps=args.ps, evaluator=args.evaluator)
    difference = (report["parameter_server"]["test_accuracy"]
                  - report["multi_worker_mirrored"]["test_accuracy"])
    report["accuracy_difference_points"] = round(100 * difference, 2)
    report["within_one_point"] = abs(difference) <= 0.01
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "parameter_server.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("accuracy_difference_points", "within_one_point")}))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
