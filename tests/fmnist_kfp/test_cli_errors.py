"""First contact: every subcommand, given bad input or a host it cannot reach, ends with
``error: <what is wrong and how to fix it>`` on stderr and a non-zero exit — 2 for bad input
(and a data source that cannot be read), 1 when the remote side fails — in seconds, and never
with a traceback.

Each case runs ``python -m fmnist_kfp.cli`` in a subprocess of its own, as a user would, in
its own directory and ``$HOME``. Nothing trains, and nothing reaches the internet: the hosts
are a loopback port bound without listening (connections are refused) and a name under the
reserved ``.invalid`` domain; the offline runs have no network at all (a network namespace of
their own, else every socket connection refused)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from fmnist_kfp.settings.platform import TENSORFLOW_ENV
from tests import ROOT
from tests.fixtures import offline_prefix
from tests.standins.loopback import reply_json

REPO = ROOT
# Every case ends well within this; the slowest import TensorFlow (about 15 s on 2 cores).
LIMIT_SECONDS = 90
UNRESOLVABLE = "http://nonexistent.invalid"
BACKEND = ["--kfp-backend-version", "2.15.0"]  # skips the version check, not the host


@dataclass(frozen=True)
class Case:
    """``argv`` with ``{placeholders}`` (see :func:`world`), the exit code, and the words the
    ``error:`` line must hold."""

    argv: tuple[str, ...]
    code: int
    words: tuple[str, ...]
    offline: bool = False  # run with no network at all


def case(*argv: str, code: int = 2, words: tuple[str, ...] = (), offline: bool = False):
    name = " ".join(argv)
    return pytest.param(Case(argv, code, words, offline), id=name)


BAD_INPUT = [
    # run, either way
    case("run", words=("say where to run", "--local", "--host")),
    case("run", "--local", "--epochs", "-1", words=("epochs must be a positive integer",)),
    case("run", "--local", "--batch-size", "abc", words=("--batch-size must be an integer",)),
    case("run", "--local", "--kubernetes", "{bad", words=("--kubernetes is not a JSON object",)),
    case("run", "--local", "--serving", "[1]", words=("--serving must be a JSON object",)),
    case("run", "--local", "--model-types", "vgg", words=("unknown model type 'vgg'",)),
    case("run", "--local", "--strategy", "sideways", words=("unknown strategy 'sideways'",)),
    case("run", "--local", "--freshness", "soon", words=("freshness 'soon'",)),
    case("run", "--local", "--validation-examples", "70000",
         words=("validation_examples=70000 is more than the official training files can set "
                "aside", "give at most 59990")),
    case("run", "--local", "--backend", "kubernetes", words=("--local runs use the local",)),
    case("run", "--local", "--host", "{refused}", words=("--local and --host: give one",)),
    case("run", "--host", "{refused}", "--backend", "local", *BACKEND,
         words=("--backend local: a run on Kubeflow (--host) uses the kubernetes backend",)),
    case("run", "--local", "--data-source", "{missing}", words=("does not exist",)),
    case("run", "--local", "--data-source", "not a url", words=("'not a url' does not exist",)),
    case("run", "--local", "--pipeline-root", "{file}/root",
         words=("cannot be made a directory",)),
    case("run", "--local", "--summary", "{file}/summary.json",
         words=("cannot be made a directory",)),
    case("run", "--host", "not a url", words=("'not a url' is not a URL",)),
    case("run", "--host", "ftp://x", words=("'ftp://x' is not a URL",)),
    case("run", "--host", "http://127.0.0.1:port", words=("is not a URL",)),
    case("run", "--host", "{refused}", "--kfp-backend-version", "abc",
         words=("'abc' is not a version",)),
    case("run", "--host", "{refused}", "--kfp-backend-version", "2.5.0",
         words=("needs KFP 2.14.0 or newer",)),
    case("run", "--host", "{refused}", "--token-file", "{missing}",
         words=("token file", "does not exist")),
    case("run", "--host", "{refused}", "--num-workers", "-2",
         words=("num_workers must be at least 1",)),
    case("run", "--host", "{refused}", "--tuning", '{"max_trials": "many"}',
         words=("max_trials must be an integer",)),
    case("run", "--host", "{refused}", "--package", "{missing}", *BACKEND,
         words=("not found", "fmnist-kfp compile", "leave out --package")),
    case("run", "--host", "{refused}", "--image", "registry.example/fmnist", *BACKEND,
         words=("'registry.example/fmnist' has no tag",)),
    case("run", "--host", "{refused}", "--package", "{file}", "--image", "r.example/f:1",
         words=("--image cannot change the package", "leave out --package")),
    case("run", "--local", "--image", "r.example/f:1", "--wait",
         words=("--image, --wait: only for runs on Kubeflow (--host)",)),
    case("run", "--host", "{refused}", "--no-cache",
         words=("--no-cache: only for runs on this machine (--local)",)),
    # serve and tensorboard, from a project of the user's (no checkout of ours): the command
    # to run first is the installed CLI's, not `make run`
    case("serve", "--summary", "{missing}",
         words=("run the pipeline first (fmnist-kfp run --local) or pass --model-dir",)),
    case("tensorboard", "--summary", "{missing}",
         words=("run the pipeline first (fmnist-kfp run --local) or pass --logdir",)),
    # compile
    case("compile", "--output-dir", "{file}/compiled", words=("cannot be made a directory",)),
    case("compile", "--output-dir", "{out}", "--gpu-image", "r.example/f",
         words=("'r.example/f' has no tag",)),
    # Image references a container runtime would refuse (distribution/reference's grammar).
    case("compile", "--output-dir", "{out}", "--image", "registry.example.com/ml/fmnist-kfp:",
         words=("is not an image reference: it ends in ':' with nothing after it",)),
    case("compile", "--output-dir", "{out}", "--image", "Registry.example.com/ML/fmnist-kfp:1",
         words=("is not an image reference: the repository name must be lowercase",)),
    case("compile", "--output-dir", "{out}", "--image", "http://registry.example.com/fmnist:1",
         words=("is not an image reference: an image reference has no scheme",)),
    case("compile", "--output-dir", "{out}", "--gpu-image", "r.example/fmnist@sha256:abc",
         words=("its digest is not <algorithm>:<hex digits>",)),
    case("compile", "--package", "{file}", words=("unrecognized arguments: --package",)),
    # upload
    case("upload", "--host", "not a url", words=("is not a URL",)),
    case("upload", "--host", "{refused}", "--package", "{missing}",
         words=("not found", "fmnist-kfp compile")),
    case("upload", "--host", "{refused}", "--package", "{file}", "--gpu-image", "r.example/f:1",
         words=("--gpu-image cannot change the package",)),
    case("upload", "--host", "{refused}", "--experiment", "x",
         words=("unrecognized arguments: --experiment",)),
    case("upload", "--host", "{refused}", "--package", "{file}", *BACKEND,
         words=("is not a compiled pipeline",)),
    # schedule
    case("schedule", "create", "--host", "{refused}", words=("required: --cron",)),
    case("schedule", "create", "--host", "{refused}", "--cron", "0 3 * * *", "--id", "x",
         words=("unrecognized arguments: --id",)),
    case("schedule", "create", "--host", "{refused}", "--cron", "every day",
         words=("cron 'every day' is malformed",)),
    case("schedule", "create", "--host", "{refused}", "--cron", "0 3 * * *",
         "--max-concurrency", "-1", words=("max concurrency must be at least 1",)),
    case("schedule", "create", "--host", "{refused}", "--cron", "0 3 * * *", "--backend",
         "nope", words=("unknown backend 'nope'",)),
    case("schedule", "disable", "--host", "{refused}", words=("required: --id",)),
    case("schedule", "disable", "--host", "{refused}", "--id", "x", "--experiment", "e",
         words=("unrecognized arguments: --experiment",)),
    case("schedule", "pause", "--host", "{refused}", words=("invalid choice: 'pause'",)),
    case("schedule", "list", "--host", "{refused}", "--epochs", "3", "--cron", "x",
         words=("unrecognized arguments: --epochs 3 --cron x",)),
    case("schedule", "--host", "{refused}", words=("invalid choice: '",)),
    case("schedule", "list", "--host", "ftp://x", words=("is not a URL",)),
    # preflight
    case("preflight", "--host", "not a url", words=("is not a URL",)),
    case("preflight", "--host", "{refused}", "--kubeconfig", "{missing}",
         words=("cannot load the kubeconfig",)),
    case("preflight", "--host", "{refused}", "--package", "{file}",
         words=("unrecognized arguments: --package",)),
    case("preflight", "--host", "{refused}", "--epochs", "3",
         words=("unrecognized arguments: --epochs",)),
    # serve
    case("serve", "--model-dir", "{missing}", words=("does not exist", "--model-dir")),
    case("serve", "--model-dir", "{dir}", "--port", "-1", words=("--port -1 is not a TCP port",)),
    case("serve", "--model-dir", "{dir}", "--port", "70000", words=("is not a TCP port",)),
    case("serve", "--model-dir", "{dir}", "--port", "abc", words=("invalid int value: 'abc'",)),
    case("serve", "--model-dir", "{dir}", "--port", "{busy_port}",
         words=("cannot listen on", "--port")),
    # deployment
    case("deployment", "status", "--name", "../../etc", words=("DNS-1035 label",)),
    case("deployment", "stop", "--name", "Bad Name!", words=("DNS-1035 label",)),
    case("deployment", "restart", words=("invalid choice: 'restart'",)),
    # tensorboard
    case("tensorboard", "--logdir", "{missing}", words=("--logdir", "does not exist")),
    case("tensorboard", "--summary", "{missing}", words=("no TensorBoard logs", "--logdir")),
    case("tensorboard", "--summary", "{gone_summary}", words=("are gone", "run the pipeline")),
    case("tensorboard", "--logdir", "{dir}", "--port", "-1", words=("is not a TCP port",)),
    case("tensorboard", "--logdir", "{dir}", "--port", "{busy_port}", words=("cannot listen",)),
    # lineage
    case("lineage", "{missing}", words=("does not exist",)),
    case("lineage", "{dir}", words=("not inside a local pipeline run",)),
    case("lineage", "{file}", words=("not inside a local pipeline run",)),
    # ingest
    case("ingest", words=("required: --output",)),
    case("ingest", "--output", "{out}", "--data-source", "{missing}", words=("does not exist",)),
    case("ingest", "--output", "{out}", "--data-source", "not a url",
         words=("'not a url' does not exist",)),
    case("ingest", "--output", "{out}", "--data-source", "{dir}", words=("lacks",)),
    case("ingest", "--output", "{file}", "--data-source", "{idx}",
         words=("--output", "cannot be made a directory")),
    case("ingest", "--output", "{out}", "--data-source", "{idx}", "--validation-examples", "-5",
         words=("validation_examples must be at least 1",)),
    case("ingest", "--output", "{out}", "--data-source", "ftp://x",
         words=("File system scheme 'ftp' not implemented", "http(s)://")),
]

UNREACHABLE = [
    case("run", "--host", "{refused}", code=1, words=("cannot reach Kubeflow Pipelines",
                                                      "refused", "--host")),
    case("run", "--host", UNRESOLVABLE, code=1, words=("cannot reach", "does not resolve")),
    case("run", "--host", "{refused}", *BACKEND, code=1, words=("cannot reach", "refused")),
    case("upload", "--host", "{refused}", code=1, words=("cannot reach", "refused")),
    case("upload", "--host", "{refused}", *BACKEND, code=1, words=("cannot reach", "refused")),
    case("upload", "--host", UNRESOLVABLE, *BACKEND, code=1,
         words=("cannot reach", "does not resolve")),
    case("schedule", "create", "--host", "{refused}", "--cron", "0 3 * * *", code=1,
         words=("cannot reach",)),
    case("schedule", "list", "--host", UNRESOLVABLE, *BACKEND, code=1,
         words=("cannot reach", "does not resolve")),
    case("schedule", "disable", "--host", "{refused}", "--id", "run-1", *BACKEND, code=1,
         words=("cannot reach",)),
    # A checker: it still prints its table (see the test below), and says it is not ready.
    case("preflight", "--host", "{refused}", "--kubeconfig", "{kubeconfig_refused}", code=1,
         words=("not ready", "KFP backend", "cannot reach")),
    case("preflight", "--host", UNRESOLVABLE, *BACKEND, "--kubeconfig",
         "{kubeconfig_unresolvable}", code=1, words=("not ready", "does not resolve")),
    # Local commands whose "host" is a download source, or an address to listen on.
    case("ingest", "--output", "{out}", "--data-source", "{refused}",
         words=("could not download", "FASHION_MNIST_DIR")),
    case("ingest", "--output", "{out}", "--data-source", UNRESOLVABLE,
         words=("could not download", "FASHION_MNIST_DIR")),
    case("ingest", "--output", "{out}", "--data-source", "tfds", offline=True,
         words=("could not download fashion_mnist", "cannot be reached", "FASHION_MNIST_DIR")),
    case("run", "--local", "--data-source", "{refused}",
         words=("the ingest-fashion-mnist step failed", "could not download",
                "FASHION_MNIST_DIR")),
    # `make run` on a machine without network and without $FASHION_MNIST_DIR (TFDS).
    case("run", "--local", offline=True,
         words=("the ingest-fashion-mnist step failed", "cannot be reached",
                "FASHION_MNIST_DIR")),
    case("serve", "--model-dir", "{dir}", "--host", "nonexistent.invalid",
         words=("--host 'nonexistent.invalid' does not resolve",)),
    case("tensorboard", "--logdir", "{dir}", "--host", "nonexistent.invalid",
         words=("does not resolve",)),
]


def _kubeconfig(path: Path, server: str) -> str:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c", "users": [{"name": "u", "user": {"token": "t"}}]}))
    return str(path)


@pytest.fixture(scope="module")
def world(tmp_path_factory, synthetic_idx):
    """What the placeholders stand for; the sockets stay open while the module runs."""
    root = tmp_path_factory.mktemp("world")
    refused = socket.socket()  # bound, never listening: a connection to it is refused
    refused.bind(("127.0.0.1", 0))
    busy = socket.socket()  # listening: nothing else may listen on its port
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    refused_url = f"http://127.0.0.1:{refused.getsockname()[1]}"
    (root / "file").write_text("not a directory, not a pipeline: [")
    (root / "dir").mkdir()
    (root / "gone.json").write_text(json.dumps({"tensorboard": {"basic": str(root / "gone")}}))
    values = {
        "refused": refused_url, "missing": str(root / "missing"), "file": str(root / "file"),
        "dir": str(root / "dir"), "idx": str(synthetic_idx[0]),
        "busy_port": str(busy.getsockname()[1]), "gone_summary": str(root / "gone.json"),
        "kubeconfig_refused": _kubeconfig(root / "kubeconfig-refused",
                                          refused_url.replace("http:", "https:")),
        "kubeconfig_unresolvable": _kubeconfig(root / "kubeconfig-unresolvable",
                                               "https://nonexistent.invalid"),
    }
    yield values
    refused.close()
    busy.close()


def run_cli(argv: list[str], tmp_path: Path, *, offline: bool = False):
    """The CLI in a subprocess, in ``tmp_path``, with nothing of the developer's: no data
    directory, no kubeconfig, no token, no local deployments. Returns it and its seconds."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO), "HOME": str(home),
           "TMPDIR": str(tmp_path), "TFDS_DATA_DIR": str(tmp_path / "tfds"),
           "KUBECONFIG": str(tmp_path / "no-kubeconfig"),
           "FMNIST_SERVING_STATE_DIR": str(tmp_path / "serving"), **TENSORFLOW_ENV}
    prefix = offline_prefix(tmp_path, env) if offline else []
    started = time.monotonic()
    done = subprocess.run([*prefix, sys.executable, "-m", "fmnist_kfp.cli", *argv],
                          cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=LIMIT_SECONDS * 2)
    return done, time.monotonic() - started


def _check(done, seconds: float, expected: Case) -> str:
    """No traceback anywhere, the exit code, an ``error:`` line holding the words (argparse
    writes ``fmnist-kfp <command>: error: ...``); returns the error from that line on."""
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output[-4000:]
    assert done.returncode == expected.code, output[-4000:]
    match = re.search(r"^(fmnist-kfp[\w ]*: )?error: ", done.stderr, re.MULTILINE)
    assert match, done.stderr[-4000:]
    error = done.stderr[match.start():]
    for word in expected.words:
        assert word in error, error
    assert seconds < LIMIT_SECONDS, f"took {seconds:.0f} s"
    return error


def _arguments(expected: Case, world: dict, tmp_path: Path) -> list[str]:
    """The case's arguments, placeholders filled. The subprocess runs outside the checkout:
    a command that sends the pipeline compiles it there unless the case names a package."""
    values = {**world, "out": str(tmp_path / "out")}
    return [re.sub(r"\{(\w+)\}", lambda m: values.get(m[1], m[0]), arg)
            for arg in expected.argv]


@pytest.mark.parametrize("expected", BAD_INPUT)
def test_bad_input_is_an_error_naming_the_fix(expected, world, tmp_path):
    done, seconds = run_cli(_arguments(expected, world, tmp_path), tmp_path)
    _check(done, seconds, expected)


@pytest.mark.parametrize("expected", UNREACHABLE)
def test_an_unreachable_host_is_an_error_in_seconds(expected, world, tmp_path):
    done, seconds = run_cli(_arguments(expected, world, tmp_path), tmp_path,
                            offline=expected.offline)
    _check(done, seconds, expected)


def test_preflight_still_reports_its_table_when_nothing_answers(world, tmp_path):
    """A checker: each unreachable side is one MISSING row with what to check, not a crash
    and not a row per permission."""
    done, seconds = run_cli(["preflight", "--host", world["refused"], "--kubeconfig",
                             world["kubeconfig_refused"]], tmp_path)
    _check(done, seconds, Case((), 1, ("not ready, 2 missing",)))
    rows = [line for line in done.stdout.splitlines() if line.startswith("MISSING")]
    assert len(rows) == 2, done.stdout
    assert "KFP backend" in rows[0] and "cannot reach Kubeflow Pipelines" in rows[0]
    assert "Kubernetes API server" in rows[1] and "cannot reach https://127.0.0.1:" in rows[1]
    assert "fix: check the kubeconfig's cluster" in done.stdout
    assert "NOT ready: 2 missing" in done.stdout
    # The table says it all: no client library's retry warnings beside it.
    assert "Retrying" not in done.stderr and "urllib3" not in done.stderr, done.stderr


def test_an_api_that_refuses_the_token_is_an_error_naming_it(world, tmp_path):
    """The KFP API answers, but refuses the request (HTTP 401 from kfp.Client's calls)."""
    from tests.standins.kfp import KfpStandIn

    class Refusing(KfpStandIn):
        def __init__(self):
            super().__init__()
            handler = self.server.RequestHandlerClass
            answer = handler.do_GET

            def do_get(request):
                if request.path.startswith("/apis/v2beta1/healthz"):
                    return answer(request)
                reply_json(request, {"error": "Unauthorized", "message": "no valid token",
                                     "code": 16}, 401)

            handler.do_GET = do_get

    with Refusing() as api:
        done, seconds = run_cli(["schedule", "list", "--host", api.url], tmp_path)
    error = _check(done, seconds, Case((), 1, ("answered HTTP 401", "no valid token")))
    assert "--token-file" in error


def test_an_experiment_that_is_not_there_is_bad_input(tmp_path):
    from tests.standins.kfp import KfpStandIn

    with KfpStandIn() as api:
        done, seconds = run_cli(["schedule", "list", "--host", api.url, "--experiment", "nope"],
                                tmp_path)
    _check(done, seconds, Case((), 2, ("no experiment 'nope'", "--experiment")))
