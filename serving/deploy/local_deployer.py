"""The local deployment backend: the predictor as a long-running process on loopback.

A deployment is named (like an InferenceService) and belongs to the pipeline root of the runs
that made it: its record (pid, URL, model, test accuracy) lives in ``<pipeline root>/deployments``
(:func:`deployments_of`; ``$FMNIST_SERVING_STATE_DIR`` names another place, and outside a run
the default is ``~/.cache/fmnist-kfp/serving``), so a later run of the same root finds it, and
another root's runs and ``fmnist-kfp deployment`` never see or stop it. The same model is
reused as is; a new, blessed model is started next to the running one (blue/green), checked
with real predictions, and only then replaces it; if the check fails, the running server stays
and the new one is stopped.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

from fmnist_kfp.errors import FmnistError
from fmnist_kfp.serving.deploy.blessing import BlessingDecision, bless, bless_early
from fmnist_kfp.serving.deploy.client import wait_until_ready
from fmnist_kfp.serving.deploy.rollout_result import Action, Verification
from fmnist_kfp.serving.model_server.ports import read_port_file

STATE_DIR_ENV = "FMNIST_SERVING_STATE_DIR"
READY_TIMEOUT = 180.0


class ModelServerDidNotStart(FmnistError, RuntimeError):
    """The local model server exited or never answered; the message ends with its log's tail."""


def state_dir() -> Path:
    path = Path(os.environ.get(STATE_DIR_ENV) or Path.home() / ".cache" / "fmnist-kfp" / "serving")
    path.mkdir(parents=True, exist_ok=True)
    return path


def deployments_dir(pipeline_root: str) -> Path:
    """Where the local deployments of the runs under ``pipeline_root`` are recorded."""
    return Path(pipeline_root).resolve() / "deployments"


@contextlib.contextmanager
def deployments_of(pipeline_root: str):
    """While the block runs, local deployments are those of ``pipeline_root``
    (:func:`deployments_dir`), for this process and the steps it starts (they inherit
    ``$FMNIST_SERVING_STATE_DIR``), unless that is already set. Yields the directory."""
    if os.environ.get(STATE_DIR_ENV):
        yield state_dir()
        return
    os.environ[STATE_DIR_ENV] = str(deployments_dir(pipeline_root))
    try:
        yield state_dir()
    finally:
        os.environ.pop(STATE_DIR_ENV, None)


@dataclass
class LocalServer:
    name: str
    url: str
    port: int
    pid: int
    model_dir: str
    model_fingerprint: str
    test_accuracy: float | None
    log_file: str
    started: float
    # serve_early: the validation accuracy it was promoted on, and which model it is.
    validation_accuracy: float | None = None
    model_type: str = ""

    def is_alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True


def model_fingerprint(model_dir: str) -> str:
    """sha256 over the SavedModel's files, so a copy of the same model counts as the same."""
    digest = hashlib.sha256()
    root = Path(model_dir)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(("backup/", "history", "result")):
            continue  # training leftovers, not the served model
        digest.update(relative.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _record_path(name: str) -> Path:
    return state_dir() / f"{name}.json"


def running_server(name: str) -> LocalServer | None:
    """The live deployment called ``name``, or None (a stale record is removed)."""
    path = _record_path(name)
    if not path.exists():
        return None
    server = LocalServer(**json.loads(path.read_text()))
    if server.is_alive():
        try:
            wait_until_ready(server.url, name, timeout=5.0)
            return server
        except (TimeoutError, RuntimeError):
            pass
    path.unlink(missing_ok=True)
    return None



def start_server(name: str, model_dir: str, *, test_accuracy: float | None = None,
                 port: int = 0, server_args: list[str] | None = None,
                 timeout: float = READY_TIMEOUT) -> LocalServer:
    """Starts ``python -m fmnist_kfp.serving.model_server.server`` detached (it outlives the step)
    and waits for it.

    With ``port=0`` (the default) the server binds a free loopback port itself and reports it
    in a port file: no other process can take the port between its choice and the bind. gRPC
    takes a free port too (it is in the server's log and port file)."""
    files = state_dir()
    tag = f"{name}-{os.getpid()}-{time.monotonic_ns()}"
    log_file = files / f"{tag}.log"
    port_file = files / f"{tag}.ports.json"
    command = [sys.executable, "-m", "fmnist_kfp.serving.model_server.server",
               f"--model_dir={model_dir}", f"--model_name={name}", "--host=127.0.0.1",
               f"--http_port={port}", "--grpc_port=0", f"--port_file={port_file}",
               *(server_args or [])]
    with open(log_file, "ab") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # not killed with the pipeline step that started it
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
    started = time.monotonic()
    try:
        bound = read_port_file(port_file, timeout, is_alive=lambda: process.poll() is None)
        port = int(bound["http_port"])
        url = f"http://127.0.0.1:{port}"
        wait_until_ready(url, name, max(1.0, timeout - (time.monotonic() - started)),
                         is_alive=lambda: process.poll() is None)
    except (TimeoutError, RuntimeError) as error:
        stop_process(process.pid)
        tail = Path(log_file).read_text(errors="replace")[-2000:]
        raise ModelServerDidNotStart(f"the model server did not start: {error}\n{tail}") from None
    finally:
        port_file.unlink(missing_ok=True)
    return LocalServer(
        name=name, url=url, port=port, pid=process.pid,
        model_dir=os.path.abspath(model_dir), model_fingerprint=model_fingerprint(model_dir),
        test_accuracy=test_accuracy, log_file=str(log_file), started=time.time(),
    )


def stop_process(pid: int, timeout: float = 30.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            finished, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not our child: poll for it instead
            finished = 0
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
        if finished:
            return
        time.sleep(0.2)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop_server(name: str) -> bool:
    """Stops the deployment called ``name``; False when none was running."""
    path = _record_path(name)
    if not path.exists():
        return False
    server = LocalServer(**json.loads(path.read_text()))
    stop_process(server.pid)
    path.unlink(missing_ok=True)
    return True


@dataclass(frozen=True)
class LocalDeployment:
    """How a local deployment ended (``action``: created, unchanged, rejected, promoted,
    rolled_back, failed), where it answers now (``url``: the serving model's when this one was
    not served) and the verification of the model (None: none ran)."""

    BACKEND: ClassVar[str] = "local"
    storage_uri: ClassVar[str] = ""  # served from its directory on this machine, not fetched

    name: str
    action: Action
    url: str
    blessing: BlessingDecision
    previous_url: str  # what served before ("" when nothing did)
    verification: Verification | None

    def _fields(self) -> dict[str, Any]:
        """What :meth:`record` writes after the name, backend and blessing, before the
        outcome (a promotion adds its models')."""
        return {"previous_url": self.previous_url}

    def record(self) -> dict[str, Any]:
        """The record the deploy and promote steps hand to KFP: the verifier's report and
        the one verdict on it as ``verification``, as a KServe rollout records it (``{}``
        when none ran)."""
        return {"name": self.name, "backend": self.BACKEND, "blessing": self.blessing.as_dict(),
                **self._fields(), "action": self.action.value, "url": self.url,
                "verification": {} if self.verification is None
                else self.verification.as_dict()}


@dataclass(frozen=True)
class LocalPromotion(LocalDeployment):
    """How a local early promotion (``serve_early``) ended: a :class:`LocalDeployment` of
    ``model_type``, and which model served before."""

    model_type: str
    previous_model_type: str  # "" when nothing served

    def _fields(self) -> dict[str, Any]:
        return {"model_type": self.model_type, "previous_url": self.previous_url,
                "previous_model_type": self.previous_model_type}


def history_path(name: str) -> Path:
    """Every change of the deployment ``name``, one JSON line each: when which model started
    serving (the run summary reads it)."""
    return state_dir() / f"{name}.history.jsonl"


def _record_change(name: str, action: Action, server: LocalServer, how: str) -> None:
    entry = {"at": time.time(), "action": action.value, "how": how, "url": server.url,
             "model_type": server.model_type, "model_dir": server.model_dir,
             "validation_accuracy": server.validation_accuracy,
             "test_accuracy": server.test_accuracy}
    with open(history_path(name), "a") as handle:
        handle.write(json.dumps(entry) + "\n")


def _save(server: LocalServer) -> None:
    # Written whole, then renamed: a reader never sees half a record.
    path = _record_path(server.name)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(asdict(server), indent=2))
    os.replace(partial, path)


@contextlib.contextmanager
def deployment_lock(name: str):
    """One deployment change of ``name`` at a time, across processes (``flock``): compare,
    start, verify and swap happen as one step, so a promotion decided against a model that
    another one has since replaced cannot happen."""
    with open(state_dir() / f"{name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def promote_locally(name: str, model_dir: str, validation_accuracy: float, *, model_type: str,
                    tolerance: float, verify: Callable[[str], object],
                    server_args: list[str] | None = None, log: Callable[[str], None] = print,
                    start: Callable[..., LocalServer] | None = None) -> LocalPromotion:
    """``serve_early``: serves ``model_dir`` as ``name`` if it is better on validation than
    what is served (:func:`~fmnist_kfp.serving.deploy.blessing.bless_early`), under the deployment's
    lock; returns how it ended. ``start``: how a server is started (tests)."""
    start = start or start_server
    with deployment_lock(name):
        current = running_server(name)
        decision = bless_early(
            validation_accuracy, current.validation_accuracy if current else None,
            current.test_accuracy if current else None, tolerance)

        def ended(action: Action, url: str,
                  verification: Verification | None = None) -> LocalPromotion:
            return LocalPromotion(
                name=name, action=action, url=url, blessing=decision,
                previous_url=current.url if current else "", verification=verification,
                model_type=model_type, previous_model_type=current.model_type if current else "")

        if current and current.model_fingerprint == model_fingerprint(model_dir):
            return ended(Action.UNCHANGED, current.url)
        if not decision.blessed:
            log(f"{name}: {model_type} not served early: {decision.reason}")
            return ended(Action.REJECTED, current.url if current else "")
        log(f"{name}: serving {model_type} early ({decision.reason})")
        candidate = start(name, model_dir, server_args=server_args)
        candidate.validation_accuracy = validation_accuracy
        candidate.model_type = model_type
        verification = Verification.of(lambda: verify(candidate.url), validation_accuracy,
                                       tolerance)
        if not verification.passed:
            stop_process(candidate.pid)
            log(f"{name}: {model_type} failed verification ({verification.report}); still "
                f"serving {current.model_type if current else 'nothing'}")
            return ended(Action.undone(bool(current)), current.url if current else "",
                         verification)
        _save(candidate)
        action = Action.serving(bool(current))
        _record_change(name, action, candidate, "serve_early")
        if current:
            stop_process(current.pid)
        log(f"{name}: {model_type} serves at {candidate.url}"
            + (f", replacing {current.model_type or 'the previous model'}" if current else ""))
        return ended(action, candidate.url, verification)


def deploy_locally(name: str, model_dir: str, test_accuracy: float, *, tolerance: float,
                   verify: Callable[[str], object], server_args: list[str] | None = None,
                   log: Callable[[str], None] = print) -> LocalDeployment:
    """Deploys ``model_dir`` as ``name`` on loopback; returns how it ended."""
    with deployment_lock(name):
        return _deploy_locally(name, model_dir, test_accuracy, tolerance=tolerance,
                               verify=verify, server_args=server_args, log=log)


def _deploy_locally(name: str, model_dir: str, test_accuracy: float, *, tolerance: float,
                    verify: Callable[[str], object], server_args: list[str] | None,
                    log: Callable[[str], None]) -> LocalDeployment:
    current = running_server(name)
    fingerprint = model_fingerprint(model_dir)
    serving_accuracy = current.test_accuracy if current else None
    blessing = bless(test_accuracy, serving_accuracy, tolerance)

    def ended(action: Action, url: str,
              verification: Verification | None = None) -> LocalDeployment:
        return LocalDeployment(name=name, action=action, url=url, blessing=blessing,
                               previous_url=current.url if current else "",
                               verification=verification)

    if current and current.model_fingerprint == fingerprint:
        log(f"{name}: this model is already served at {current.url}; reusing it")
        if current.test_accuracy is None:  # served early: its test accuracy is known now
            current.test_accuracy = test_accuracy
            _save(current)
        # Measured, as it always was; a verifier that raises fails the step.
        return ended(Action.UNCHANGED, current.url,
                     Verification.judged(verify(current.url), test_accuracy, tolerance))
    if not blessing.blessed:
        log(f"{name}: not deployed: {blessing.reason}")
        return ended(Action.REJECTED, current.url if current else "")
    log(f"{name}: starting the predictor for {test_accuracy:.4f} test accuracy "
        f"({blessing.reason})")
    candidate = start_server(name, model_dir, test_accuracy=test_accuracy,
                             server_args=server_args)
    verification = Verification.of(lambda: verify(candidate.url), test_accuracy, tolerance)
    if not verification.passed:
        stop_process(candidate.pid)
        action = Action.undone(bool(current))
        log(f"{name}: the new server failed verification ({verification.report}); {action}")
        return ended(action, current.url if current else "", verification)
    _save(candidate)
    action = Action.serving(bool(current))
    _record_change(name, action, candidate, "deploy")
    if current:
        stop_process(current.pid)
        log(f"{name}: promoted {candidate.url}; stopped the previous server {current.url}")
    else:
        log(f"{name}: serving at {candidate.url}")
    return ended(action, candidate.url, verification)
