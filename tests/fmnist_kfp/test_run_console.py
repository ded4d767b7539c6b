"""The local run's terminal and log file (fmnist_kfp.run_console), fed what kfp.local and the
steps print: their lines are copied from a real run's log."""

from __future__ import annotations

import io
import logging
import sys

from fmnist_kfp.run_console import FAILURE_TAIL_LINES, RunConsole

STEP_LINES = [
    "    [KFP Executor 2026-11-27 10:36:48,260 INFO]: Got executor_input:",
    '        "parameterValues": {',
    "    [fmnist-basic-f0e5018d5c] starting 2 process(es): 2 Worker",
    "    [fmnist-basic-f0e5018d5c/worker-0] worker-0: training basic (97,802 parameters) on "
    "3,000 images, 2 replica(s), global batch 64, float32",
    "    [fmnist-basic-f0e5018d5c/worker-0] 2026-11-27T10:36:57.922241Z epoch=1 epochs=2 "
    "loss=1.6336 accuracy=0.4934 val_loss=1.1644 val_accuracy=0.7036 seconds=4.7550 "
    "images_per_second=630.9000",
    "    [fmnist-basic-f0e5018d5c/worker-1] 2026-11-27T10:36:57.922241Z epoch=1 epochs=2 "
    "loss=1.6336 accuracy=0.4934 val_loss=1.1644 val_accuracy=0.7036 seconds=4.7550 "
    "images_per_second=630.9000",
    "    [fmnist-basic-f0e5018d5c/worker-0] 2026-11-27T10:37:02.001Z epoch=2 epochs=2 "
    "loss=0.9 accuracy=0.7012 val_loss=0.8 val_accuracy=0.7710 seconds=4.1 "
    "images_per_second=700.0",
    "    I0000 00:00:1795775821.733968    7079 cudart_stub.cc:31] Could not find cuda drivers",
    "    [KFP Executor 2026-11-27 10:37:05,921 INFO]: Wrote executor output file to /x.json.",
]


def _run(tmp_path, steps, verbose=False, fail=None):
    """Feeds ``steps`` (name → its printed lines) through a console as kfp.local would: its
    log records through the root logger, the output through ``sys.stdout``."""
    terminal = io.StringIO()
    log = logging.getLogger()  # kfp.local logs through the root logger (logging.info)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    try:
        with RunConsole(str(tmp_path / "logs" / "run.log"), verbose=verbose,
                        terminal=terminal) as console:
            for name, lines in steps.items():
                if lines is None:
                    log.info("Task \x1b[96m'%s'\x1b[0m cache hit (key=abc); skipping execution.",
                             name)
                    continue
                log.info("Executing task \x1b[96m'%s'\x1b[0m", name)
                sys.stderr.write("    W0000 some TensorFlow warning\n")
                for line in lines:
                    print(line)
                status = "FAILURE" if name == fail else "SUCCESS"
                log.info("Task \x1b[96m'%s'\x1b[0m finished with status \x1b[92m%s\x1b[0m",
                         name, status)
    finally:
        root.setLevel(level)
    return terminal.getvalue(), (tmp_path / "logs" / "run.log").read_text(), console


def test_a_line_per_step_and_everything_else_in_the_log(tmp_path):
    shown, log, console = _run(tmp_path, {"ingest-fashion-mnist": None,
                                          "train-model": STEP_LINES})
    lines = shown.splitlines()
    assert lines[0] == f"Log: {tmp_path / 'logs' / 'run.log'} (every step's output; " \
                       "--verbose shows it here)"
    assert lines[1].split() == ["ingest-fashion-mnist", "cached"]
    assert lines[2].split() == ["train-model", "started"]
    # The model, its seconds, the last epoch's validation accuracy (the chief's, once).
    assert lines[3].split()[:2] == ["train-model", "(basic)"]
    assert lines[3].endswith("last epoch's validation accuracy 0.7710")  # not selection's
    assert len(lines) == 4
    for line in STEP_LINES:
        assert line in log
    assert "W0000 some TensorFlow warning" in log and "W0000" not in shown
    assert [s["step"] for s in console.steps] == ["ingest-fashion-mnist", "train-model"]
    assert console.steps[0]["cache_hit"] and not console.steps[1]["cache_hit"]
    assert console.steps[1]["status"] == "SUCCESS" and console.steps[1]["seconds"] >= 0
    assert [s["share"] for s in console.steps_with_shares(0)] == [0.0, 0.0]


def test_verbose_shows_the_log_too(tmp_path):
    shown, log, _ = _run(tmp_path, {"train-model": STEP_LINES}, verbose=True)
    for line in STEP_LINES:
        assert line in shown and line in log


def test_a_failed_step_shows_its_last_lines_and_where_the_rest_is(tmp_path):
    many = [f"    line {i}" for i in range(100)]
    shown, _, console = _run(tmp_path, {"ingest-fashion-mnist": many},
                             fail="ingest-fashion-mnist")
    assert "ingest-fashion-mnist         FAILURE after" in shown
    assert "line 99" in shown and f"line {99 - FAILURE_TAIL_LINES + 1}" in shown
    assert f"line {99 - FAILURE_TAIL_LINES}\n" not in shown
    assert f"(all of its output: {console.log_path})" in shown


def test_our_warnings_reach_the_terminal(tmp_path):
    shown, _, _ = _run(tmp_path, {"deploy-model": [
        "    warning: the served model's GPU image is not published; pass --gpu-image"]})
    assert "warning: the served model's GPU image is not published; pass --gpu-image" in shown


def test_streams_and_handlers_are_given_back(tmp_path):
    before = sys.stdout, sys.stderr
    handler = logging.StreamHandler(sys.stderr)
    logging.getLogger().addHandler(handler)
    try:
        _run(tmp_path, {"ingest-fashion-mnist": ["    x"]})
        assert (sys.stdout, sys.stderr) == before and handler.stream is sys.stderr
    finally:
        logging.getLogger().removeHandler(handler)


def test_a_search_shows_trials_done_and_the_best(tmp_path):
    shown, _, _ = _run(tmp_path, {"tune-hyperparameters": [
        "    [fmnist-tune-basic] random search of ['learning_rate']: 4 trials, 2 at a time, "
        "objective maximize val_accuracy",
        "    [fmnist-basic-t1/worker-0] 2026-11-27T10:36:57Z epoch=1 epochs=1 accuracy=0.5 "
        "val_accuracy=0.61",
        "    [fmnist-tune-basic] trial t1: Succeeded val_accuracy=0.6100 after 1 epochs, lr "
        "0.001 | 1/4 done (1 Succeeded), 1 running | best 0.6100 (t1)",
        "    [fmnist-tune-basic] trial t2: OverParameterBudget after 0 epochs, filters 64 | "
        "2/4 done (1 Succeeded, 1 OverParameterBudget), 0 running | best 0.6100 (t1)",
    ]})
    [line] = [line for line in shown.splitlines() if "tune-hyperparameters" in line
              and "started" not in line]
    assert line.endswith("2/4 trials, best 0.6100") and "validation accuracy" not in line


def test_code_that_asks_the_streams_encoding_gets_one(tmp_path):
    seen = []
    terminal = io.StringIO()
    with RunConsole(str(tmp_path / "run.log"), terminal=terminal):
        seen.append(sys.stdout.encoding)
        print("é".encode(sys.stdout.encoding).decode(sys.stdout.encoding))
    assert seen == ["utf-8"] and "é" in (tmp_path / "run.log").read_text(encoding="utf-8")


def test_a_failed_steps_last_lines_are_its_own_not_kfps_executor_input(tmp_path):
    """A step that fails at once: its last lines are its output and the error, not the ~20
    lines of executor input JSON kfp logs first (kfp/dsl/executor_main.py); the log file keeps
    them."""
    lines = ["    [KFP Executor 2026-11-27 10:36:48,260 INFO]: Got executor_input:",
             "    {",
             '        "inputs": {',
             '            "parameterValues": {',
             '                "kubernetes": "{\\"namespace\\": \\"team-a\\"}"',
             "            }",
             "        },",
             '        "outputs": {}',
             "    }",
             "    staging the dataset",
             "    error: the claim is not mounted"]
    shown, logged, _ = _run(tmp_path, {"train-model": lines}, fail="train-model")
    tail = shown[shown.index("its last lines:"):]
    assert "staging the dataset" in tail and "error: the claim is not mounted" in tail
    assert "executor_input" not in tail and "parameterValues" not in tail and "{" not in tail
    assert "parameterValues" in logged


def test_tune_steps_with_tuning_off_are_not_listed(tmp_path):
    """With tune off the three tune steps still run (they hand the given values on in a
    moment): none gets the line a step gets when it ends (a terminal without a progress bar
    still says each started); the log, the summary's steps (and so "where the time went") keep
    them, each with its model."""
    shown, logged, console = _run(tmp_path, {"tune-hyperparameters": [
        "    tuning off for dropout: the given hyperparameters go on unchanged"]})
    assert not [line for line in shown.splitlines() if "tune-hyperparameters (" in line], shown
    assert "tuning off for dropout" in logged
    assert (console.steps[0]["step"], console.steps[0]["model"]) == ("tune-hyperparameters",
                                                                      "dropout")
