"""Every command of ``fmnist-kfp``, and the local pipeline, with each kind of failure it can meet
without a cluster, ends with ``error: <what is wrong>`` on stderr and the exit code of
:mod:`fmnist_kfp.errors` (2 when the input or the data must change, 1 when the work or a remote
side failed), and never with a traceback.

The commands are read from the CLI's parser, so a new command without its failure cases fails
:func:`test_every_command_has_failure_cases`. Each case runs ``python -m fmnist_kfp.cli`` in a
process of its own, as a user types it, with nothing of the developer's (no data directory, no
kubeconfig, no token). Nothing reaches a network: the host is a loopback port bound without
listening, where a connection is refused.

A failure inside the pipeline is made by crashing one kind of process the run starts (a
training worker, the local model server): a ``sitecustomize`` on ``$PYTHONPATH``, inherited by
every step and what it starts, ends the process whose command line names
``$FMNIST_TEST_CRASH`` with a Python traceback, as a crash would."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fmnist_kfp.cli import build_parser
from fmnist_kfp.errors import (
    DataSourceError,
    RemoteError,
    TrainingJobError,
    UserInputError,
)
from fmnist_kfp.settings.platform import TENSORFLOW_ENV
from tests import ROOT

ARGPARSE = 2  # argparse's exit code for arguments it cannot parse
BAD_INPUT = UserInputError.exit_code
UNREACHABLE = RemoteError.exit_code
BACKEND = ("--kfp-backend-version", "2.15.0")  # skips the version check, not the host
CRASH_ENV = "FMNIST_TEST_CRASH"
TRAINER = "fmnist_kfp.training.trainer"
MODEL_SERVER = "fmnist_kfp.serving.model_server.server"
_CRASH = f"""
import os, sys, traceback
target = os.environ.get({CRASH_ENV!r}, "").encode()
with open("/proc/self/cmdline", "rb") as handle:
    command = handle.read().split(b"\\0")
if target and target in command:
    try:
        raise RuntimeError("injected crash of " + target.decode())
    except RuntimeError:
        traceback.print_exc()
    sys.stderr.flush()
    os._exit(1)
"""


def leaf_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[str]:
    """Every command ``parser`` runs, a command with subcommands as each of them
    (``schedule create``)."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups:
        return [" ".join(prefix)]
    return [command for group in groups for name, sub in group.choices.items()
            for command in leaf_commands(sub, (*prefix, name))]


COMMANDS = leaf_commands(build_parser())


@dataclass(frozen=True)
class Case:
    """A failure of one command: its arguments after the command (``{placeholders}``, see
    :func:`world`), the exit code, the words its ``error:`` line holds, and the environment it
    runs with."""

    kind: str
    argv: tuple[str, ...]
    code: int
    words: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    marks: tuple = ()


def case(kind: str, *argv: str, code: int = BAD_INPUT, words: tuple[str, ...] = (),
         env: dict[str, str] | None = None, marks=()) -> Case:
    return Case(kind, argv, code, words, env or {}, marks)


# What each command meets without a cluster, by kind of failure; the command's own words first.
CASES: dict[str, list[Case]] = {
    "run": [
        case("bad parameter value", "--local", "--epochs", "0", words=("epochs",)),
        case("bad enum value", "--local", "--strategy", "sideways",
             words=("unknown strategy 'sideways'",)),
        case("bad JSON parameter", "--local", "--serving", "[1]",
             words=("--serving must be a JSON object",)),
        case("missing data directory", "--local", "--data-source", "{missing}",
             words=("does not exist",)),
        case("unreachable KFP host", "--host", "{refused}", code=UNREACHABLE,
             words=("cannot reach Kubeflow Pipelines", "refused", "--host")),
        case("nonexistent pipeline YAML", "--host", "{refused}", "--package", "{missing}.yaml",
             *BACKEND, words=("not found", "--package")),
        case("nonexistent token file", "--host", "{refused}", "--token-file", "{missing}",
             words=("token file", "does not exist")),
    ],
    "compile": [
        case("bad image", "--output-dir", "{out}", "--gpu-image", "r.example/f",
             words=("'r.example/f' has no tag",)),
        case("output directory under a file", "--output-dir", "{file}/compiled",
             words=("cannot be made a directory",)),
    ],
    "upload": [
        case("unreachable KFP host", "--host", "{refused}", code=UNREACHABLE,
             words=("cannot reach Kubeflow Pipelines",)),
        case("bad host URL", "--host", "not a url", words=("is not a URL",)),
        case("nonexistent pipeline YAML", "--host", "{refused}", "--package", "{missing}.yaml",
             *BACKEND, words=("not found", "fmnist-kfp compile")),
        case("YAML that is not a pipeline", "--host", "{refused}", "--package", "{not_pipeline}",
             *BACKEND, words=("is not a compiled pipeline",)),
    ],
    "schedule create": [
        case("bad cron", "--host", "{refused}", "--cron", "every day",
             words=("cron 'every day' is malformed",)),
        case("bad parameter value", "--host", "{refused}", "--cron", "0 3 * * *", "--epochs",
             "0", words=("invalid pipeline parameters", "epochs")),
        case("unreachable KFP host", "--host", "{refused}", "--cron", "0 3 * * *",
             code=UNREACHABLE, words=("cannot reach Kubeflow Pipelines",)),
    ],
    "schedule list": [
        case("unreachable KFP host", "--host", "{refused}", code=UNREACHABLE,
             words=("cannot reach Kubeflow Pipelines",)),
        case("bad host URL", "--host", "ftp://x", words=("is not a URL",)),
    ],
    "schedule disable": [
        case("unreachable KFP host", "--host", "{refused}", "--id", "run-1", code=UNREACHABLE,
             words=("cannot reach Kubeflow Pipelines",)),
        case("missing required argument", "--host", "{refused}", code=ARGPARSE,
             words=("required: --id",)),
    ],
    "preflight": [
        case("KUBECONFIG names a nonexistent file", "--host", "{refused}",
             env={"KUBECONFIG": "{missing}"}, words=("cannot load the kubeconfig",)),
        case("KUBECONFIG names an empty file", "--host", "{refused}",
             env={"KUBECONFIG": "{empty}"}, words=("cannot load the kubeconfig", "empty")),
        case("--kubeconfig names a nonexistent file", "--host", "{refused}", "--kubeconfig",
             "{missing}", words=("cannot load the kubeconfig",)),
        case("bad enum value", "--host", "{refused}", "--operator", "sideways", code=ARGPARSE,
             words=("invalid choice: 'sideways'",)),
        case("unreachable KFP host and cluster", "--host", "{refused}", "--kubeconfig",
             "{kubeconfig_refused}", code=1, words=("not ready", "cannot reach")),
    ],
    "serve": [
        case("nonexistent model directory", "--model-dir", "{missing}",
             words=("does not exist", "--model-dir")),
        case("directory without a model", "--model-dir", "{dir}", "--port", "0",
             words=("no SavedModel in",)),
        case("corrupted model file", "--model-dir", "{corrupted_model}", "--port", "0",
             words=("saved_model.pb",)),
        case("missing run summary", "--summary", "{missing}",
             words=("no selected model", "--model-dir")),
        case("bad port", "--model-dir", "{dir}", "--port", "70000",
             words=("is not a TCP port",)),
    ],
    "deployment": [
        case("bad name", "status", "--name", "../../etc", words=("DNS-1035 label",)),
        case("bad action", "restart", code=ARGPARSE, words=("invalid choice: 'restart'",)),
    ],
    "tensorboard": [
        case("nonexistent log directory", "--logdir", "{missing}",
             words=("--logdir", "does not exist")),
        case("summary that is not JSON", "--summary", "{not_pipeline}",
             words=("no TensorBoard logs",)),
        case("bad port", "--logdir", "{dir}", "--port", "-1", words=("is not a TCP port",)),
    ],
    "lineage": [
        case("nonexistent path", "{missing}", words=("does not exist",)),
        case("file outside any run", "{file}", words=("not inside a local pipeline run",)),
    ],
    "ingest": [
        case("missing data directory", "--output", "{out}", "--data-source", "{missing}",
             words=("does not exist",)),
        case("data directory without the files", "--output", "{out}", "--data-source",
             "{dir}", words=("lacks",)),
        case("corrupted data file", "--output", "{out}", "--data-source", "{corrupted_data}",
             code=DataSourceError.exit_code, words=("sha256", "does not match")),
        case("unreachable data source", "--output", "{out}", "--data-source", "{refused}",
             code=DataSourceError.exit_code, words=("could not download",)),
        case("bad parameter value", "--output", "{out}", "--data-source", "{idx}",
             "--validation-examples", "-5", words=("validation_examples must be at least 1",)),
    ],
}


def test_every_command_has_failure_cases():
    """A command the parser gained needs its cases here; a case of a command it lost goes."""
    assert "schedule create" in COMMANDS and "ingest" in COMMANDS
    assert sorted(CASES) == sorted(COMMANDS)


def _parameters() -> list:
    """Each command the parser has with each of its cases; a command without any, once, to
    fail."""
    missing = [case("no failure case: add them to CASES", "--help")]
    return [pytest.param(command, each, id=f"{command}: {each.kind}", marks=each.marks)
            for command in COMMANDS for each in CASES.get(command) or missing]


@pytest.fixture(scope="module")
def corrupted_data(tmp_path_factory, real_data_dir) -> str:
    """The four official files with one byte of one changed: its sha256 no longer matches."""
    data = tmp_path_factory.mktemp("corrupted-data")
    for path in real_data_dir.glob("*.gz"):
        shutil.copyfile(path, data / path.name)
    labels = data / "t10k-labels-idx1-ubyte.gz"
    content = bytearray(labels.read_bytes())
    content[100] ^= 0xFF
    labels.write_bytes(bytes(content))
    return str(data)


@pytest.fixture(scope="module")
def world(tmp_path_factory, synthetic_idx):
    """What the placeholders stand for (``{corrupted_data}``: :func:`corrupted_data`, asked
    for by the cases that use it); the refused port stays bound while the module runs."""
    root = tmp_path_factory.mktemp("world")
    refused = socket.socket()  # bound, never listening: a connection to it is refused
    refused.bind(("127.0.0.1", 0))
    refused_url = f"http://127.0.0.1:{refused.getsockname()[1]}"
    (root / "file").write_text("not a directory")
    (root / "not-pipeline.yaml").write_text("not: [a pipeline")
    (root / "empty").write_text("")
    (root / "dir").mkdir()
    model = root / "corrupted-model" / "1"
    model.mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"not a SavedModel")
    kubeconfig = root / "kubeconfig-refused"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": refused_url.replace("http", "https")}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c", "users": [{"name": "u", "user": {"token": "t"}}]}))
    crash = root / "crash"
    crash.mkdir()
    (crash / "sitecustomize.py").write_text(_CRASH)
    yield {"refused": refused_url, "missing": str(root / "missing"), "file": str(root / "file"),
           "not_pipeline": str(root / "not-pipeline.yaml"), "empty": str(root / "empty"),
           "dir": str(root / "dir"), "corrupted_model": str(model.parent),
           "kubeconfig_refused": str(kubeconfig), "crash": str(crash),
           "idx": str(synthetic_idx[0]), "idx_sha256": json.dumps(synthetic_idx[1])}
    refused.close()


def _filled(text: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m[1], m[0]), text)


def _values(world: dict, request, arguments) -> dict[str, str]:
    """The placeholders' values, the corrupted data made only for a case that uses it."""
    values = dict(world)
    if any("{corrupted_data}" in arg for arg in arguments):
        values["corrupted_data"] = request.getfixturevalue("corrupted_data")
    return values


def run_cli(argv: list[str], tmp_path: Path, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m fmnist_kfp.cli`` in ``tmp_path``, with nothing of the developer's: no data
    directory, no kubeconfig, no token, no local deployments; ``env`` over that."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    base = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), "HOME": str(home),
            "TMPDIR": str(tmp_path), "TFDS_DATA_DIR": str(tmp_path / "tfds"),
            "KUBECONFIG": str(tmp_path / "no-kubeconfig"),
            "FMNIST_SERVING_STATE_DIR": str(tmp_path / "serving"), **TENSORFLOW_ENV}
    return subprocess.run([sys.executable, "-m", "fmnist_kfp.cli", *argv], cwd=tmp_path,
                          env={**base, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)


def check_no_traceback(done: subprocess.CompletedProcess, code: int,
                       words: tuple[str, ...]) -> str:
    """No traceback in anything it printed, the exit code, and an ``error:`` line (argparse
    writes ``fmnist-kfp <command>: error: ...``) holding ``words``; returns the error on."""
    output = done.stdout + "\n" + done.stderr
    assert "Traceback" not in output, output[-6000:]
    assert done.returncode == code, output[-6000:]
    match = re.search(r"^(fmnist-kfp[\w ]*: )?error: ", done.stderr, re.MULTILINE)
    assert match, done.stderr[-6000:]
    error = done.stderr[match.start():]
    for word in words:
        assert word in error, error
    return error


@pytest.mark.parametrize(("command", "expected"), _parameters())
def test_each_command_fails_with_one_error_line(command, expected, world, request, tmp_path):
    values = {**_values(world, request, expected.argv), "out": str(tmp_path / "out")}
    argv = [*command.split(), *(_filled(arg, values) for arg in expected.argv)]
    env = {name: _filled(value, values) for name, value in expected.env.items()}
    assert expected.argv != ("--help",), f"{command}: no failure case; add them to CASES"
    check_no_traceback(run_cli(argv, tmp_path, env), expected.code, expected.words)


# --- the local pipeline -------------------------------------------------------------------------

@dataclass(frozen=True)
class RunCase:
    """A local run that fails: its flags, the step that fails (None: before any step runs),
    the process that crashes (a module the run starts), the exit code and the words."""

    flags: tuple[str, ...]
    step: str | None
    code: int
    words: tuple[str, ...]
    crash: str = ""


# A small run on the synthetic IDX files (tests/conftest.py): one model, one epoch.
SMALL = ("--data-source", "{idx}", "--expected-sha256", "{idx_sha256}", "--validation-examples",
         "200", "--train-examples", "200", "--epochs", "1", "--batch-size", "32",
         "--model-types", "basic", "--verification-images", "20", "--prediction-images", "20",
         "--batch-prediction-workers", "1")

RUNS = [
    pytest.param(RunCase(("--epochs", "0"), None, BAD_INPUT, ("epochs",)),
                 id="bad parameter value"),
    pytest.param(RunCase(("--model-types", "vgg"), None, BAD_INPUT,
                         ("unknown model type 'vgg'",)), id="bad enum value"),
    pytest.param(RunCase(("--data-source", "{missing}"), None, BAD_INPUT, ("does not exist",)),
                 id="missing data directory"),
    pytest.param(RunCase(("--data-source", "{corrupted_data}", "--model-types", "basic"),
                         "ingest-fashion-mnist", DataSourceError.exit_code,
                         ("sha256", "does not match")), id="corrupted data file",
                 marks=pytest.mark.slow),
    pytest.param(RunCase(SMALL, "train-model", TrainingJobError.exit_code,
                         ("worker-0 failed", f"injected crash of {TRAINER}"), crash=TRAINER),
                 id="a training worker crashes", marks=pytest.mark.slow),
    pytest.param(RunCase(SMALL, "deploy-model", 1, ("the model server did not start",),
                         crash=MODEL_SERVER),
                 id="the model server does not start", marks=[pytest.mark.slow]),
]


@pytest.mark.parametrize("expected", RUNS)
def test_a_failed_local_run_ends_with_one_error_naming_the_step(expected, world, request,
                                                                 tmp_path, monkeypatch):
    """``fmnist-kfp run --local`` as a user types it (output to a pipe, no --verbose): a bad
    parameter fails before any step runs and writes nothing; a step that fails ends the run
    with one ``error: the <step> step failed: ...`` and the step's error's exit code."""
    values = _values(world, request, expected.flags)
    root = tmp_path / "runs"
    argv = ["run", "--local", "--pipeline-root", str(root), "--no-cache",
            *(_filled(arg, values) for arg in expected.flags)]
    env = {}
    if expected.crash:
        env = {"PYTHONPATH": f"{world['crash']}{os.pathsep}{ROOT}", CRASH_ENV: expected.crash}
    try:
        done = run_cli(argv, tmp_path, env)
    finally:  # a run that got as far as serving leaves no model server behind
        from fmnist_kfp.serving.deploy.local_deployer import STATE_DIR_ENV, stop_server

        monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "serving"))  # run_cli's
        stop_server("fashion-mnist")
    error = check_no_traceback(done, expected.code, expected.words)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr
    if expected.step is None:
        assert not root.exists(), "a run with a bad parameter started"
        assert "started" not in done.stdout
    else:
        assert error.startswith(f"error: the {expected.step} step failed: "), error
        assert re.search(rf"^  {expected.step}\s+FAILURE after", done.stdout, re.MULTILINE), \
            done.stdout


# --- what the terminal shows of a traceback -----------------------------------------------------

WORKER_CRASH = """\
    [fmnist-basic-06b30c6eac] starting 1 process(es): 1 Worker
    [fmnist-basic-06b30c6eac/worker-0] Traceback (most recent call last):
    [fmnist-basic-06b30c6eac/worker-0]   File "/x/trainer.py", line 6, in <module>
    [fmnist-basic-06b30c6eac/worker-0]     fit(model)
    [fmnist-basic-06b30c6eac/worker-0]     ^^^^^^^^^^
    [fmnist-basic-06b30c6eac/worker-0] RuntimeError: out of memory
    error: training job fmnist-basic-06b30c6eac: worker-0 failed with exit code 1. Its last \
log lines:
    Traceback (most recent call last):
      File "/x/trainer.py", line 3, in load
        open(path)
    FileNotFoundError: /data

    During handling of the above exception, another exception occurred:

    Traceback (most recent call last):
      File "/x/trainer.py", line 6, in <module>
    RuntimeError: out of memory"""


def test_a_traceback_on_the_terminal_is_cut_to_its_exception():
    from fmnist_kfp.run_console import without_tracebacks

    assert without_tracebacks(WORKER_CRASH).split("\n") == [
        "    [fmnist-basic-06b30c6eac] starting 1 process(es): 1 Worker",
        "    [fmnist-basic-06b30c6eac/worker-0] RuntimeError: out of memory",
        "    error: training job fmnist-basic-06b30c6eac: worker-0 failed with exit code 1. Its "
        "last log lines:",
        "    FileNotFoundError: /data",
        "    RuntimeError: out of memory"]
    plain = "error: no traceback here\n  File-like indented line\nend"
    assert without_tracebacks(plain) == plain


def test_a_failed_steps_last_lines_show_no_traceback_and_the_log_keeps_it(tmp_path):
    from tests.fmnist_kfp.test_run_console import _run

    shown, log, _ = _run(tmp_path, {"train-model": WORKER_CRASH.split("\n")},
                         fail="train-model")
    assert "Traceback" not in shown and "File " not in shown
    assert "[fmnist-basic-06b30c6eac/worker-0] RuntimeError: out of memory" in shown
    assert "FileNotFoundError: /data" in shown
    assert WORKER_CRASH in log


def test_the_run_ends_with_the_workers_exception_and_where_its_frames_are(tmp_path):
    from fmnist_kfp.errors import StepFailed
    from fmnist_kfp.local_run import _step_failure

    class Console:
        steps = [{"step": "train-model", "status": "FAILURE"}]
        log_path = str(tmp_path / "run.log")

    message = WORKER_CRASH.split("error: ", 1)[1]
    record = tmp_path / "errors.jsonl"
    record.write_text(json.dumps({"error": "TrainingJobError", "message": message,
                                  "exit_code": 2}) + "\n")
    error = _step_failure(RuntimeError("Task train-model failed"), str(record), Console())
    assert isinstance(error, StepFailed) and error.exit_code == 2
    assert "Traceback" not in str(error) and "File " not in str(error)
    assert str(error).startswith("the train-model step failed: training job fmnist-basic")
    assert str(error).endswith("RuntimeError: out of memory\n(its frames are in the run's "
                               f"log: {Console.log_path})")
