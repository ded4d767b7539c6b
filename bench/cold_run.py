"""The first run a newcomer sees: a cold ``make run`` of this tree beside an earlier commit's.

Writes ``bench/results/cold_run.json``. Each round runs both trees cold (a new pipeline root
and a new model-server state directory: nothing cached, nothing served), in alternating order
(ABBA: this tree first in even rounds), with the same virtual environment and the real
Fashion-MNIST; then this tree once more on the pipeline root of its first run, with that run's
model server still serving, as a user's second ``make run`` finds them: the cached re-run. For each
run: wall seconds, each step's seconds, the seconds the trainers report fitting
(``train_seconds``), what is left outside fitting, the selected model and its test accuracy,
and the load average before and after. The VM drifts by tens of percent from minute to minute,
so the result is the ratio within a round, and their median.

The earlier commit runs from a ``git worktree`` of it (its CLI module is found by name),
beside this tree's virtual environment. ``--run-args`` passes the same extra flags to both
(``--epochs 1 --train-examples 5000`` for a quick look; the figure the issue asks for is the
default run).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import RESULTS, add_data_source, data_source_missing, write_results

BASELINE = "727c15d"  # the commit of issue 31's measurement
CLI_MODULES = ("fmnist_kfp.cli", "fmnist.app.cli")


def _cli_module(tree: Path) -> str:
    for module in CLI_MODULES:
        if (tree / (module.replace(".", "/") + ".py")).exists():
            return module
    raise SystemExit(f"error: no CLI module ({', '.join(CLI_MODULES)}) in {tree}")


def _stop_servers(state_dir: Path) -> None:
    """Stops the model servers a run left (the local deployer's ``<name>.json`` records, each
    with its server's pid, in the run's state directory)."""
    import signal

    for state in state_dir.glob("*.json"):
        try:
            pid = json.loads(state.read_text()).get("pid")
            if pid:
                os.kill(int(pid), signal.SIGTERM)
        except (ValueError, OSError, AttributeError):
            pass


def run_once(tree: Path, work: Path, label: str, data_source: str, run_args: list[str],
             again: str = "") -> dict:
    """One ``run --local`` of ``tree`` with its output in ``work/label.log``; ``again``: the
    label of an earlier run whose pipeline root and running model server this one finds (a
    re-run), else both are new (a cold run). The model server is left running."""
    work.mkdir(parents=True, exist_ok=True)
    root = work / f"{again or label}-root"
    state = work / f"{again or label}-serving"
    summary = work / f"{label}-summary.json"
    env = {**os.environ, "FASHION_MNIST_DIR": data_source, "PYTHONPATH": str(tree),
           "FMNIST_SERVING_STATE_DIR": str(state)}
    command = [sys.executable, "-m", _cli_module(tree), "run", "--local",
               "--pipeline-root", str(root), "--summary", str(summary), *run_args]
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with open(work / f"{label}.log", "w") as log:
        finished = subprocess.run(command, cwd=tree, env=env, stdout=log,
                                  stderr=subprocess.STDOUT, check=False)
    seconds = time.perf_counter() - started
    if finished.returncode:
        raise SystemExit(f"error: {label} failed (exit {finished.returncode}); see "
                         f"{work / (label + '.log')}")
    result = json.loads(summary.read_text())
    steps = result.get("steps") or []
    trained = not any(s.get("cache_hit") for s in steps if s.get("step") == "train-model")
    fitting = sum(float(m.get("train_seconds") or 0)
                  for m in result.get("models", {}).values()) if trained else 0.0
    return {
        "label": label, "seconds": round(seconds, 1),
        "fitting_seconds": round(fitting, 1),
        "outside_fitting_seconds": round(seconds - fitting, 1),
        "steps": [{k: s.get(k) for k in ("step", "seconds", "cache_hit")} for s in steps],
        "cached_steps": sum(1 for s in steps if s.get("cache_hit")),
        "best_model_type": result.get("best_model_type"),
        "best_test_accuracy": result.get("best_test_accuracy"),
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def _vector_flags() -> list[str]:
    """The CPU's vector extensions that decide TensorFlow's speed here (AVX-512 and its BF16,
    AMX): the same code trains several times faster with them than with AVX2 alone."""
    try:
        with open("/proc/cpuinfo") as handle:
            flags = next((line.split(":", 1)[1].split() for line in handle
                          if line.startswith("flags")), [])
    except OSError:
        return []
    return sorted(f for f in set(flags) if f.startswith(("avx", "amx", "fma")))


def _worktree(baseline: str, where: Path) -> Path:
    tree = where / f"baseline-{baseline}"
    if not tree.exists():
        subprocess.run(["git", "worktree", "add", "--detach", "-f", str(tree), baseline],
                       check=True, capture_output=True)
    return tree


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_source(parser)
    parser.add_argument("--baseline", default=BASELINE, help="the commit to compare with")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds of one cold run each (alternating order)")
    parser.add_argument("--run-args", default="", help="extra flags for both runs")
    parser.add_argument("--output", default=str(RESULTS / "cold_run.json"))
    args = parser.parse_args(argv)
    if data_source_missing(args):
        return 2
    run_args = shlex.split(args.run_args)
    here = Path.cwd()
    work = Path(tempfile.mkdtemp(prefix="cold-run-"))
    baseline = _worktree(args.baseline, work)
    print(f"comparing this tree with {args.baseline}: {args.rounds} round(s); each run's "
          f"output in {work}", flush=True)
    rounds = []
    try:
        for number in range(args.rounds):
            order = [("this", here), ("baseline", baseline)]
            if number % 2:
                order.reverse()
            runs = {}
            for name, tree in order:
                runs[name] = run_once(tree, work, f"{name}-{number}", args.data_source,
                                      run_args)
                print(f"round {number + 1}: {name} {runs[name]['seconds']} s "
                      f"({runs[name]['outside_fitting_seconds']} s outside fitting), "
                      f"{runs[name]['best_model_type']} at {runs[name]['best_test_accuracy']}",
                      flush=True)
            rounds.append({"runs": runs, "ratio": round(
                runs["this"]["seconds"] / runs["baseline"]["seconds"], 3),
                "outside_fitting_ratio": round(
                    runs["this"]["outside_fitting_seconds"]
                    / runs["baseline"]["outside_fitting_seconds"], 3)})
        cached = run_once(here, work, "this-cached", args.data_source, run_args,
                          again="this-0")
        print(f"cached re-run: {cached['seconds']} s, {cached['cached_steps']} steps cached",
              flush=True)
    finally:
        for state in work.glob("*-serving"):
            _stop_servers(state)
        subprocess.run(["git", "worktree", "remove", "--force", str(baseline)],
                       check=False, capture_output=True)
    cold = rounds[0]["runs"]["this"]["seconds"]
    result = {
        "baseline": args.baseline, "run_args": run_args, "rounds": rounds,
        "median_ratio": statistics.median(r["ratio"] for r in rounds),
        "median_outside_fitting_ratio": statistics.median(
            r["outside_fitting_ratio"] for r in rounds),
        "cached": cached, "cached_share_of_cold": round(cached["seconds"] / cold, 4),
        "cpus": os.cpu_count(), "cpu_flags": _vector_flags(),
    }
    write_results("cold_run", result, Path(args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
