"""Tuning benchmark: the local search on the real Fashion-MNIST with a reduced budget.

In one run, on the same validation split and trial budget (epochs, training examples):

* the default configuration, trained once as a trial would be (the bar to beat);
* random search and TPE search, the same number of trials each, no early stopping;
* the same random search (same seed: the same configurations in the same order) with Katib's
  median stopping, against which the trial epochs it saved and the best accuracy it kept are
  compared.

Writes ``bench/results/tuning.json`` (each search's trials, best configuration and epochs) and
the searches' HTML reports beside it.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from bench.common import RESULTS, add_data_source, data_source_missing, ingested_dataset


def _search(name: str, algorithm: str, args, data_dir: str, work: Path, stopping: bool):
    from fmnist_kfp.katib.optuna_search import LocalTuner
    from fmnist_kfp.katib.report import render_html
    from fmnist_kfp.kfp_components.tune.step import experiment_settings
    from fmnist_kfp.settings.training import TrainingConfig

    base = TrainingConfig(model_type=args.model_type)
    tuning = {"algorithm": algorithm, "max_trials": args.trials,
              "parallel_trials": args.parallel, "epochs": args.epochs,
              "train_examples": args.train_examples, "early_stopping": stopping,
              "min_trials_required": args.min_trials_required, "start_step": args.start_step,
              "random_state": args.seed, "max_failed_trials": 0}
    settings, space = experiment_settings(name, args.model_type, base, tuning)
    started = time.time()
    result = LocalTuner(str(work / name)).run(settings, space, data_dir)
    (RESULTS / f"tuning-{name}.html").write_text(render_html(result))
    summary = {
        "algorithm": algorithm,
        "early_stopping": stopping,
        "trials": len(result.trials),
        "best_objective": result.best_objective,
        "best_parameters": result.best_parameters,
        "total_epochs": result.total_epochs,
        "trial_counts": result.as_dict()["trial_counts"],
        "seconds": round(time.time() - started, 1),
        "objectives_in_order": [t.objective for t in result.trials],
        "trial_details": [asdict(t) for t in result.trials],
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "trial_details"}), flush=True)
    return summary


def _default_trial(args, data_dir: str, work: Path) -> dict:
    """The default configuration under the trials' budget, through the same launcher."""
    from fmnist_kfp.launcher.local_processes import LocalProcessLauncher
    from fmnist_kfp.settings.training import TrainingConfig
    from fmnist_kfp.training.trainer import read_result
    from fmnist_kfp.training.training_job import TrainingJobSpec

    config = replace(TrainingConfig(model_type=args.model_type), epochs=args.epochs,
                     train_examples=args.train_examples)
    job_dir = work / "default"
    spec = TrainingJobSpec(name="bench-default", config=config, data_dir=data_dir,
                           export_dir=str(job_dir / "1"), work_dir=str(job_dir))
    LocalProcessLauncher(out=io.StringIO()).run(spec)
    final = read_result(str(job_dir))["final_metrics"]
    entry = {"configuration": {"learning_rate": config.learning_rate,
                               "batch_size": config.batch_size, "filters": config.filters},
             "val_accuracy": final["val_accuracy"]}
    print(json.dumps({"default": entry}), flush=True)
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_source(parser)
    parser.add_argument("--model-type", default="batchnorm")
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=4, help="per trial")
    parser.add_argument("--train-examples", type=int, default=12_000, help="per trial")
    parser.add_argument("--min-trials-required", type=int, default=3)
    parser.add_argument("--start-step", type=int, default=1)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--output", default=str(RESULTS / "tuning.json"))
    args = parser.parse_args(argv)
    if data_source_missing(args):
        return 2
    work = RESULTS / "work" / "tuning"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    data = str(ingested_dataset(args.data_source))
    default = _default_trial(args, data, work)
    searches = {
        "random": _search("bench-random", "random", args, data, work, stopping=False),
        "tpe": _search("bench-tpe", "tpe", args, data, work, stopping=False),
        "random_median_stop": _search("bench-random-stop", "random", args, data, work,
                                      stopping=True),
    }
    full, stopped = searches["random"], searches["random_median_stop"]
    # TPE's first trials are random (the same as random search's, same seed); after them the
    # model chooses. The mean objective from there on shows where each spends its trials.
    startup = max(args.parallel, min(10, args.trials // 3))

    def mean_after_startup(search: dict) -> float:
        later = [v for v in search["objectives_in_order"][startup:] if v is not None]
        return round(sum(later) / len(later), 4) if later else 0.0

    results = {
        "budget": {"model_type": args.model_type, "trials": args.trials,
                   "parallel_trials": args.parallel, "epochs_per_trial": args.epochs,
                   "train_examples": args.train_examples,
                   "validation": "the ingested validation split", "seed": args.seed,
                   "median_stop": {"min_trials_required": args.min_trials_required,
                                   "start_step": args.start_step}},
        "default_configuration": default,
        "searches": searches,
        "tpe_vs_random": {
            "tpe_best": searches["tpe"]["best_objective"],
            "random_best": full["best_objective"],
            "default": default["val_accuracy"],
            "tpe_at_least_default": searches["tpe"]["best_objective"] >= default["val_accuracy"],
            "tpe_at_least_random": searches["tpe"]["best_objective"] >= full["best_objective"],
            "random_start_trials": startup,
            "mean_objective_after_random_start": {"tpe": mean_after_startup(searches["tpe"]),
                                                  "random": mean_after_startup(full)},
        },
        "median_stop_vs_none": {
            "total_epochs": [stopped["total_epochs"], full["total_epochs"]],
            "epochs_saved_fraction": round(1 - stopped["total_epochs"] / full["total_epochs"],
                                           3),
            "best_objective": [stopped["best_objective"], full["best_objective"]],
            "best_objective_difference": round(stopped["best_objective"]
                                               - full["best_objective"], 4),
            "seconds": [stopped["seconds"], full["seconds"]],
        },
    }
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2))
    print(json.dumps({k: results[k] for k in ("tpe_vs_random", "median_stop_vs_none")},
                     indent=2))
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
