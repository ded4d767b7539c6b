"""Local backend: one worker process per shard on this machine, each with its share of the
cores; a worker that fails fails the job with its last log lines (a bad input never does: it is
an error row)."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time

from fmnist_kfp.backends import sigterm_as_exit
from fmnist_kfp.scoring.scoring_job import BatchPredictionError, ScoringJobSpec, merge_shards
from fmnist_kfp.settings.platform import tensorflow_env

_TAIL_LINES = 20


class LocalBatchScorer:
    """Runs a :class:`ScoringJobSpec` as local processes."""

    def __init__(self, out=None, cpu_count: int | None = None, timeout_seconds: float = 0.0):
        self.out = out or sys.stdout
        self.cpu_count = cpu_count or len(os.sched_getaffinity(0)) or 1
        self.timeout_seconds = timeout_seconds

    def run(self, spec: ScoringJobSpec) -> dict:
        threads = max(1, self.cpu_count // spec.num_shards)
        env = {**os.environ, **tensorflow_env(), "TF_NUM_INTRAOP_THREADS": str(threads),
               "TF_NUM_INTEROP_THREADS": str(min(2, threads)), "CUDA_VISIBLE_DEVICES": ""}
        print(f"[{spec.name}] scoring {spec.num_shards} shard(s) in local processes",
              file=self.out, flush=True)
        started = time.time()
        processes, tails, pumps = [], [], []
        previous = sigterm_as_exit()
        try:
            for shard in range(spec.num_shards):
                process = subprocess.Popen(
                    spec.worker_command(shard=shard), env=env, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, text=True)
                tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
                pump = threading.Thread(target=self._pump, args=(process, tail, shard),
                                        daemon=True)
                pump.start()
                processes.append(process)
                tails.append(tail)
                pumps.append(pump)
            for shard, process in enumerate(processes):
                remaining = None
                if self.timeout_seconds:
                    remaining = max(0.1, started + self.timeout_seconds - time.time())
                try:
                    code = process.wait(timeout=remaining)
                except subprocess.TimeoutExpired:
                    raise BatchPredictionError(
                        f"batch prediction {spec.name} did not finish within "
                        f"{self.timeout_seconds:g} s") from None
                pumps[shard].join(timeout=5)
                if code != 0:
                    reason = f"signal {-code}" if code < 0 else f"exit code {code}"
                    raise BatchPredictionError(
                        f"batch prediction {spec.name}: shard {shard} failed with {reason}. "
                        "Its last log lines:\n" + "\n".join(tails[shard]))
        finally:
            for process in processes:
                if process.poll() is None:
                    process.send_signal(signal.SIGKILL)
                    process.wait()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        summary = merge_shards(spec.output_dir, spec.num_shards)
        summary["job_seconds"] = round(time.time() - started, 3)
        return summary

    def _pump(self, process: subprocess.Popen, tail, shard: int) -> None:
        assert process.stdout is not None, "started with stdout=PIPE"
        for line in process.stdout:
            line = line.rstrip("\n")
            if line.strip():
                tail.append(line)
                print(f"[shard-{shard}] {line}", file=self.out, flush=True)
