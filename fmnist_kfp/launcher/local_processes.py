"""Local backend: worker processes on loopback with the ``TF_CONFIG`` a TFJob would inject.

The launcher behaves like the Kubeflow training operator for one machine: it starts one process
per replica, streams their logs with a ``[job/worker-i]`` prefix, and when any worker fails it
stops the others and, if the failure is retryable (killed by a signal, exit code ≥ 128, as the
operator's ``ExitCode`` restart policy decides), restarts the whole job (up to ``max_restarts``)
— the workers resume from the chief's last epoch checkpoint. It fails with the failing
worker's last log lines when the restarts run out, and never leaves a worker behind: on SIGTERM
(a terminated run) it stops every worker — SIGTERM, then SIGKILL after a grace period — before
it exits, and each worker dies with the launcher even if the launcher is SIGKILLed.

With ``cluster_env="jobset"`` it starts the replicas as Kubeflow Trainer v2 would on the runtime
``fmnist-tensorflow``: one process per node, named as the JobSet names the pods, each given the
environment a node's pod has (:mod:`fmnist_kfp.training.jobset_cluster`'s contract:
``JOB_COMPLETION_INDEX``, ``FMNIST_JOBSET_NAME``, ...) and no ``TF_CONFIG``, so that the trainer
builds its own from them, as on the cluster; ``FMNIST_LOOPBACK_PORTS`` points the nodes at each
other's loopback ports instead of their DNS names. Only what such a TrainJob can be runs there:
every node a worker of ``MultiWorkerMirroredStrategy`` (:func:`~fmnist_kfp.training.
jobset_cluster.cluster_problems` names what is refused, and why).
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from fmnist_kfp.backends import sigterm_as_exit
from fmnist_kfp.errors import TrainingJobError, TrainingJobStopped, UserInputError
from fmnist_kfp.settings.platform import tensorflow_env
from fmnist_kfp.training import jobset_cluster
from fmnist_kfp.training.trainer import read_result
from fmnist_kfp.training.training_job import TrainingJobResult, TrainingJobSpec

_TAIL_LINES = 30
# TensorFlow's C++ start-up chatter (absl INFO/WARNING lines, the CUDA probe on CPU machines)
# would bury the epoch lines and the error that matters.
_NOISE = re.compile(
    r"^([IW]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+\] |WARNING: All log messages before absl"
    r"|E\d{4} .*(cuInit|cuda_platform)|To enable the following instructions|.*rebuild TensorFlow"
    r"|Collective all_reduce tensors|Sharding callback duration|\s*self\.data_adapter = )"
)
_STOP_GRACE_SECONDS = 10
_EVALUATOR_GRACE_SECONDS = 60
_PRINT_LOCK = threading.Lock()
# How the replicas learn their cluster: the TFJob operator's TF_CONFIG, or Trainer v2's JobSet
# environment (see the module docstring).
CLUSTER_ENVS = ("tfjob", "jobset")


def _retryable(code: int) -> bool:
    """The operator's ExitCode policy: 1-127 is a permanent error (bad input, a bug) that a
    restart repeats; a signal (killed, preempted, out of memory) is worth a retry."""
    return code < 0 or code >= 128


def _describe(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"exit code {code}"


def _die_with_parent() -> None:
    """Runs in each worker before exec: if the launcher dies (even by SIGKILL), so does it."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:  # not Linux: the launcher's own cleanup still stops the workers
        pass


# Ports handed to processes that bind them later come from below Linux's ephemeral range
# (32768-60999 by default), which the kernel gives to outgoing connections and to binds of
# port 0: an HTTP client's connection could otherwise take a chosen port before its server
# binds it. Each chosen port is reserved for PORT_RESERVATION_SECONDS by a file, written under
# a lock, so two launchers of one user (two runs, two test workers) never choose the same port
# in the seconds before theirs bind.
PORT_RANGE = (20000, 32768)
PORT_RESERVATION_SECONDS = 600
PORT_RESERVATIONS_DIR = "fmnist-kfp-ports"


def free_ports(count: int) -> list[int]:
    """``count`` loopback ports, free now and reserved against every other caller on this
    machine for :data:`PORT_RESERVATION_SECONDS` (see :data:`PORT_RANGE`)."""
    import fcntl
    import random
    import tempfile

    directory = os.path.join(tempfile.gettempdir(), f"{PORT_RESERVATIONS_DIR}-{os.getuid()}")
    os.makedirs(directory, exist_ok=True)
    chosen: list[int] = []
    with open(os.path.join(directory, "lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one chooser at a time: check-then-reserve is atomic
        now = time.time()
        low, high = PORT_RANGE
        # From a random place, so callers rarely meet; not the global generator, which a
        # seeded caller may own.
        start = random.SystemRandom().randrange(low, high)
        for offset in range(high - low):
            if len(chosen) == count:
                break
            port = low + (start - low + offset) % (high - low)
            reservation = os.path.join(directory, str(port))
            try:
                if now - os.stat(reservation).st_mtime < PORT_RESERVATION_SECONDS:
                    continue
            except FileNotFoundError:
                pass
            if _bindable(port):
                with open(reservation, "w"):
                    pass  # (re)written: its mtime starts the reservation
                chosen.append(port)
    if len(chosen) < count:
        raise OSError(f"no {count} free loopback ports in {PORT_RANGE[0]}-{PORT_RANGE[1] - 1}")
    return chosen


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def jobset_env_for(job_name: str, ports: list[int], me: int) -> dict[str, str]:
    """The environment of node ``me`` of a TrainJob ``job_name`` on the runtime
    ``fmnist-tensorflow`` (manifests/trainer-runtime): what its labels, the runtime and the
    TrainJob's trainer.env give the pod, and the loopback ports of every node."""
    return {
        jobset_cluster.COMPLETION_INDEX: str(me),
        jobset_cluster.JOBSET_NAME: job_name,
        jobset_cluster.REPLICATED_JOB: jobset_cluster.REPLICATED_JOB_NAME,
        jobset_cluster.JOB_INDEX: "0",
        jobset_cluster.TF_PORT: str(jobset_cluster.DEFAULT_TF_PORT),
        jobset_cluster.NUM_NODES: str(len(ports)),
        jobset_cluster.LOOPBACK_PORTS: ",".join(str(p) for p in ports),
    }


def tf_config_for(replicas: list[tuple[str, int]], ports: list[int], me: int) -> dict:
    """The ``TF_CONFIG`` of replica ``me``, shaped like the training operator's."""
    cluster: dict[str, list[str]] = {}
    for (task_type, _), port in zip(replicas, ports, strict=True):
        cluster.setdefault(task_type, []).append(f"127.0.0.1:{port}")
    task_type, index = replicas[me]
    return {"cluster": cluster, "task": {"type": task_type, "index": index}, "environment": "cloud"}


# (worker name, line): what a metrics collector watching the workers' logs is given.
LineCallback = Callable[[str, str], None]


class _Worker:
    def __init__(self, name: str, process: subprocess.Popen, job: str, out,
                 on_line: LineCallback | None = None):
        self.name = name
        self.process = process
        self.tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        self._on_line = on_line
        self._thread = threading.Thread(target=self._pump, args=(job, out), daemon=True)
        self._thread.start()

    def _pump(self, job: str, out) -> None:
        assert self.process.stdout is not None, "started with stdout=PIPE"
        for raw in self.process.stdout:
            line = raw.rstrip("\n")
            if line.strip() and not _NOISE.match(line):
                self.tail.append(line)
                with _PRINT_LOCK:  # one whole line at a time from each worker
                    print(f"[{job}/{self.name}] {line}", file=out, flush=True)
                if self._on_line is not None:
                    self._on_line(self.name, line)

    def finish_logs(self) -> None:
        self._thread.join(timeout=5)


class LocalProcessLauncher:
    """Runs a training job as local processes; see the module docstring."""

    def __init__(self, out=None, cpu_count: int | None = None,
                 on_line: LineCallback | None = None, cluster_env: str = "tfjob"):
        if cluster_env not in CLUSTER_ENVS:
            raise UserInputError(f"cluster_env must be one of {', '.join(CLUSTER_ENVS)}, got "
                                 f"{cluster_env!r}")
        self.cluster_env = cluster_env
        self.out = out or sys.stdout
        self.cpu_count = cpu_count or os.cpu_count() or 1
        # Sees every worker log line as it comes (the tuner's metrics collector).
        self.on_line = on_line
        self.workers: list[_Worker] = []  # the current attempt's workers (tests kill them)
        self._lock = threading.Lock()
        self._stop_reason = ""

    def stop(self, reason: str) -> None:
        """Ends the running job from another thread (early stopping, a terminated search):
        its workers are killed and ``run`` raises ``TrainingJobStopped`` instead of restarting
        them. SIGKILL, not SIGTERM: a multi-worker TensorFlow process takes SIGTERM as a
        preemption notice and trains on, and a stopped job has nothing left to save."""
        with self._lock:
            self._stop_reason = reason
            workers = list(self.workers)
        for worker in workers:
            if worker.process.poll() is None:
                worker.process.kill()

    def _replicas(self, spec: TrainingJobSpec) -> list[tuple[str, int]]:
        return spec.task_list()

    def _start(self, spec: TrainingJobSpec) -> None:
        replicas = self._replicas(spec)
        ports = free_ports(len(replicas))
        command = spec.trainer_command()
        threads = max(1, self.cpu_count // len(replicas))
        with self._lock:
            # Each worker is recorded as soon as it exists, so a SIGTERM that lands while the
            # others are still starting stops the ones already running.
            workers = self.workers = []
        for i, (task_type, index) in enumerate(replicas):
            env = dict(os.environ)
            env.pop("TF_CONFIG", None)
            for variable in (*jobset_cluster.REQUIRED_VARIABLES, jobset_cluster.LOOPBACK_PORTS):
                env.pop(variable, None)  # only what this launcher gives
            name = f"{task_type}-{index}"
            if self.cluster_env == "jobset":
                # No TF_CONFIG, as on Trainer v2: the trainer builds it from this (also for
                # one node, which then trains alone, as a one-node TrainJob's pod would).
                env.update(jobset_env_for(spec.name, ports, i))
                # The pod's hostname less the job's name, which the log prefix shows already.
                name = jobset_cluster.node_hostname(spec.name, i).removeprefix(f"{spec.name}-")
            elif len(replicas) > 1:
                # As the training operator: TF_CONFIG only for a distributed job (a single
                # replica gets none), so a one-worker job runs without a cluster — and without
                # MultiWorkerMirroredStrategy's health-check thread, whose 30 s sleep stalled
                # the end of training when the strategy was torn down.
                env["TF_CONFIG"] = json.dumps(tf_config_for(replicas, ports, i))
            env.update(
                PYTHONUNBUFFERED="1",
                **tensorflow_env(env),
                # Share the cores instead of every worker assuming it owns them all.
                TF_NUM_INTRAOP_THREADS=str(threads),
                TF_NUM_INTEROP_THREADS=str(min(2, threads)),
            )
            if spec.gpus_per_worker == 0 or task_type in ("ps", "evaluator"):
                env["CUDA_VISIBLE_DEVICES"] = ""
            else:
                first = i * spec.gpus_per_worker
                env["CUDA_VISIBLE_DEVICES"] = ",".join(
                    str(g) for g in range(first, first + spec.gpus_per_worker)
                )
            process = subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                bufsize=1, preexec_fn=_die_with_parent,
            )
            with self._lock:
                workers.append(_Worker(name, process, spec.name, self.out, self.on_line))
        with self._lock:
            stopped = self._stop_reason
        if stopped:  # stop() came while the workers were starting
            self.stop(stopped)

    def _stop_all(self) -> None:
        with self._lock:
            workers = list(self.workers)
        for worker in workers:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
        deadline = time.time() + _STOP_GRACE_SECONDS
        for worker in workers:
            try:
                worker.process.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
            worker.finish_logs()

    def _wait(self, spec: TrainingJobSpec) -> _Worker | None:
        """Waits until the job succeeded (returns None) or failed (returns the replica to
        blame): as the training operator decides (kubeflow/trainer v1.9.2
        pkg/controller.v1/tensorflow/tfjob_controller.go ``UpdateJobStatus``), a job with a
        Chief succeeds when the chief does; without one when every worker has (our jobs run
        ``MultiWorkerMirroredStrategy``, whose workers finish together). Workers and PS of a
        parameter-server job never exit on their own, so there the chief alone decides."""
        if spec.parameter_server:
            return self._wait_for_chief(spec)
        while True:
            with self._lock:
                workers = list(self.workers)
            codes = [w.process.poll() for w in workers]
            if any(w.name.startswith("evaluator") for w in workers):
                training = [c for w, c in zip(workers, codes, strict=True)
                            if not w.name.startswith("evaluator")]
                if all(code == 0 for code in training):
                    return self._finish_evaluator(spec)
            failed = [w for w, code in zip(workers, codes, strict=True) if code not in (None, 0)]
            if failed:
                # A killed worker takes its peers down with it (their collectives fail with
                # exit code 1); the killed one is the cause to report and to act on.
                time.sleep(0.5)
                failed = [w for w in workers if w.process.poll() not in (None, 0)]
                return max(failed, key=lambda w: _retryable(w.process.returncode))
            if all(code == 0 for code in codes):
                for worker in workers:
                    worker.finish_logs()
                return None
            time.sleep(0.2)

    def _wait_for_chief(self, spec: TrainingJobSpec) -> _Worker | None:
        """A parameter-server job: the chief's exit is the job's. A lost worker is reported
        and training goes on without it (the coordinator reschedules its steps); a lost PS
        makes the coordinator fail, which fails the chief."""
        reported: set[str] = set()
        while True:
            with self._lock:
                workers = list(self.workers)
            chief = next(w for w in workers if w.name == "chief-0")
            code = chief.process.poll()
            if code is not None:
                if code != 0:
                    return chief
                chief.finish_logs()
                return self._finish_evaluator(spec)
            for worker in workers:
                lost = worker.process.poll()
                if lost is not None and worker.name not in reported:
                    reported.add(worker.name)
                    if worker.name.startswith("evaluator") and lost != 0:
                        return worker  # a failed Evaluator fails the TFJob too
                    if not worker.name.startswith("evaluator"):
                        print(f"[{spec.name}] {worker.name} exited ({_describe(lost)}); the "
                              "chief coordinates on without it", file=self.out, flush=True)
            time.sleep(0.2)

    def _finish_evaluator(self, spec: TrainingJobSpec) -> _Worker | None:
        """After training: the evaluator finishes once it has scored the last checkpoint
        (the chief waited for that); a failed evaluator fails the job, as a failed Evaluator
        pod fails a TFJob. One still running after the grace period is stopped."""
        with self._lock:
            evaluators = [w for w in self.workers if w.name.startswith("evaluator")]
        for worker in evaluators:
            try:
                worker.process.wait(timeout=_EVALUATOR_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                print(f"[{spec.name}] {worker.name} still running after training; stopping it",
                      file=self.out, flush=True)
                continue
            worker.finish_logs()
            if worker.process.returncode != 0:
                return worker
        return None

    def run(self, spec: TrainingJobSpec) -> TrainingJobResult:
        if self.cluster_env == "jobset":
            problems = jobset_cluster.cluster_problems(spec.strategy, spec.use_chief,
                                                       spec.evaluator)
            if problems:
                raise UserInputError("; ".join(problems))
        started = time.time()
        restarts = 0
        previous = sigterm_as_exit()
        try:
            while True:
                kinds = ", ".join(f"{n} {kind}" for kind, n in spec.replica_counts().items())
                if self.cluster_env == "jobset":
                    kinds = f"{spec.replicas} node(s) with the JobSet environment, no TF_CONFIG"
                print(
                    f"[{spec.name}] starting {spec.replicas} process(es): {kinds}"
                    + (f" (restart {restarts}/{spec.max_restarts})" if restarts else ""),
                    file=self.out, flush=True,
                )
                self._start(spec)
                failed = self._wait(spec)
                if failed is None:
                    break
                code = failed.process.returncode
                self._stop_all()
                if self._stop_reason:
                    raise TrainingJobStopped(f"training job {spec.name} stopped: "
                                             f"{self._stop_reason}")
                reason = f"signal {-code}" if code < 0 else f"exit code {code}"
                if not _retryable(code) or restarts >= spec.max_restarts:
                    why = (f"max_restarts={spec.max_restarts} allows no more"
                           if _retryable(code) else "an exit code of 1-127 is not retried")
                    tail = "\n".join(failed.tail)
                    raise TrainingJobError(
                        f"training job {spec.name}: {failed.name} failed with {reason} after "
                        f"{restarts} restart(s) ({why}). Its last log lines:\n{tail}"
                    )
                restarts += 1
                print(
                    f"[{spec.name}] {failed.name} failed with {reason}; restarting all workers "
                    "from the last checkpoint",
                    file=self.out, flush=True,
                )
        finally:
            if previous is not None:
                # Stopping now: a second SIGTERM must not cut the cleanup short.
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            try:
                self._stop_all()
            finally:
                if previous is not None:
                    signal.signal(signal.SIGTERM, previous)
        return TrainingJobResult(read_result(spec.work_dir), round(time.time() - started, 2),
                                 restarts)
