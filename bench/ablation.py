"""Recipe ablation: trains configurations on the ingested dataset and records each run's
per-epoch validation accuracy, time and throughput (``bench/results/ablation.json``).

Each run is the real trainer through the local launcher (as ``make run`` starts it: one worker,
the cores shared by its threads). It trains on the ``train`` split (55,000 images) and scores the
``validation`` split ingestion set aside (the last 500 images of each class); the test split is
never read. ``val_accuracy`` is the last epoch's, of the training model; ``exported_val_accuracy``
is the exported SavedModel's on the same split (with flip averaging when the configuration has it).

    python -m bench.ablation --data-dir DATASET --name epochs18 --set epochs=18 \\
        --families batchnorm --seeds 42

``--set`` overrides the current defaults (:class:`~fmnist_kfp.settings.training.TrainingConfig`).
The machine may be shared: every run records the load average at its start and end and the CPU
seconds its processes used, next to the wall time.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

OUTPUT = Path("bench/results/ablation.json")


def _cpu_seconds_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "fmnist_kfp"], capture_output=True,
                               text=True, check=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_one(name: str, data_dir: str, values: dict, work: Path) -> dict:
    """One training job scored on the validation split; returns the run's record."""
    from fmnist_kfp.dataset.pipeline import load_arrays
    from fmnist_kfp.launcher.local_processes import LocalProcessLauncher
    from fmnist_kfp.selection.evaluate import predict_classes
    from fmnist_kfp.settings.training import TrainingConfig
    from fmnist_kfp.training.training_job import TrainingJobSpec

    config = TrainingConfig.from_dict(values).validate()
    shutil.rmtree(work, ignore_errors=True)
    spec = TrainingJobSpec(name="ablation", config=config, data_dir=data_dir,
                           export_dir=str(work / "1"), work_dir=str(work))
    load_before = os.getloadavg()
    cpu_before = _cpu_seconds_of_children()
    started = time.time()
    outcome = LocalProcessLauncher(out=io.StringIO()).run(spec)
    wall = time.time() - started
    cpu = _cpu_seconds_of_children() - cpu_before
    result = outcome.result
    history = result["history"]
    images, labels = load_arrays(data_dir, "validation")
    exported = float((predict_classes(str(work / "1"), images) == labels).mean())
    return {
        "name": name,
        "model_type": config.model_type,
        "seed": config.seed,
        "config": asdict(config),
        "split": f"validation ({len(labels)}, ingested, class-stratified)",
        "parameters": result["parameters"],
        "val_accuracy": round(history[-1]["val_accuracy"], 4),
        "exported_val_accuracy": round(exported, 4),
        "flip_averaging": config.flip_averaging,
        "val_accuracy_per_epoch": [round(e["val_accuracy"], 4) for e in history],
        "seconds_from_launch_per_epoch": [round(e["finished_at"] - started, 1) for e in history],
        "epoch_seconds": [e["seconds"] for e in history],
        "train_seconds": result["train_seconds"],
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": _commit(),
    }


def _value(text: str):
    """``--set`` values as JSON (``18``, ``0.99``, ``true``), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def append(output: Path, record: dict) -> None:
    data = json.loads(output.read_text()) if output.exists() else {"runs": []}
    data.setdefault("description", __doc__.split("\n\n")[0].replace("\n", " "))
    data["runs"].append(record)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(data, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True, help="an ingested dataset")
    parser.add_argument("--name", required=True, help="what this configuration is called")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    parser.add_argument("--families", default="basic,dropout,batchnorm")
    parser.add_argument("--seeds", default="42")
    parser.add_argument("--work", default="bench/results/work/ablation")
    parser.add_argument("--output", default=str(OUTPUT))
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    overrides = {name: _value(text) for name, text in (i.partition("=")[::2] for i in args.set)}
    for family in args.families.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            values = {**overrides, "model_type": family, "seed": seed}
            work = Path(args.work) / f"{args.name}-{family}-{seed}"
            record = run_one(args.name, args.data_dir, values, work)
            record["overrides"] = overrides
            append(Path(args.output), record)
            print(json.dumps({k: record[k] for k in (
                "name", "model_type", "seed", "parameters", "val_accuracy",
                "exported_val_accuracy", "val_accuracy_per_epoch", "train_seconds",
                "wall_seconds", "cpu_seconds", "load_average_before", "load_average_after")}),
                flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
