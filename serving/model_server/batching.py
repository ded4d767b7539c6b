"""Adaptive batching inside the server: one model call for many concurrent requests.

Requests put their instances on a queue. A single worker takes the first waiting instance,
then everything else already queued, then waits at most ``max_latency_ms`` for more (but only
while the batch is smaller than the previous one), up to ``max_batch_size``, and runs the model
once. While the model runs, new arrivals queue up, so batches grow with the load, and a lone
request does not wait at all.

A batch that fails is retried one instance at a time, so a bad instance fails only the request
that sent it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

# (kind, values) -> one result per value
RunBatch = Callable[[str, Sequence[Any]], Sequence[Any]]


@dataclass
class BatchStats:
    requests: int = 0
    instances: int = 0
    batches: int = 0
    failed_instances: int = 0
    largest_batch: int = 0
    started: float = field(default_factory=time.monotonic)

    def as_dict(self) -> dict:
        return {
            "requests": self.requests,
            "instances": self.instances,
            "batches": self.batches,
            "mean_batch_size": round(self.instances / self.batches, 2) if self.batches else 0.0,
            "largest_batch": self.largest_batch,
            "failed_instances": self.failed_instances,
        }


class AdaptiveBatcher:
    """Gathers concurrent instances into batches for ``run_batch``."""

    def __init__(self, run_batch: RunBatch, max_batch_size: int = 32,
                 max_latency_ms: float = 2.0, inline_kinds: tuple[str, ...] = ()):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        if max_latency_ms < 0:
            raise ValueError(f"max_latency_ms must be >= 0, got {max_latency_ms}")
        self.run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_latency = max_latency_ms / 1000.0
        self.stats = BatchStats()
        # One model call at a time: TensorFlow already spreads one call over every core.
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="batch")
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        self._last_batch = 1
        # Kinds whose model call is so short that a hop to the thread (and back through the
        # GIL) costs more than it saves; they run on the event loop.
        self.inline_kinds = inline_kinds

    def __getstate__(self) -> dict:
        """A copy for another process: settings only, a fresh queue, thread and counters."""
        return {"run_batch": self.run_batch, "max_batch_size": self.max_batch_size,
                "max_latency": self.max_latency, "inline_kinds": self.inline_kinds}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["run_batch"], state["max_batch_size"],
                      state["max_latency"] * 1000.0, state["inline_kinds"])

    async def submit(self, items: Sequence[tuple[str, Any]]) -> list[Any]:
        """Results for ``(kind, value)`` items in order; an item's exception takes its place."""
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done():
            self._queue = asyncio.Queue()
            self._worker = loop.create_task(self._work())
        futures = []
        for kind, value in items:
            future = loop.create_future()
            self._queue.put_nowait((kind, value, future))
            futures.append(future)
        self.stats.requests += 1
        return await asyncio.gather(*futures, return_exceptions=True)

    async def _gather(self) -> list[tuple]:
        queue = self._queue
        batch = [await queue.get()]
        deadline = time.monotonic() + self.max_latency
        # Wait only for as many as came last time: steady clients send the same number per
        # round, so the batch is complete once they are in, and a lone client never waits.
        target = min(self.max_batch_size, self._last_batch)
        while len(batch) < self.max_batch_size:
            if len(batch) >= target and queue.empty():
                break
            if not queue.empty():
                batch.append(queue.get_nowait())
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(queue.get(), remaining))
            except TimeoutError:
                break
        return batch

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._gather()
            self._last_batch = len(batch)
            by_kind: dict[str, list[tuple]] = {}
            for item in batch:
                by_kind.setdefault(item[0], []).append(item)
            for kind, items in by_kind.items():
                await self._run(loop, kind, items)

    async def _run(self, loop, kind: str, items: list[tuple]) -> None:
        self.stats.batches += 1
        self.stats.instances += len(items)
        self.stats.largest_batch = max(self.stats.largest_batch, len(items))
        values = [value for _, value, _ in items]
        try:
            if kind in self.inline_kinds:
                results = self.run_batch(kind, values)
            else:
                results = await loop.run_in_executor(self._executor, self.run_batch, kind, values)
        except Exception as error:  # noqa: BLE001 - isolated below, reported per instance
            if len(items) == 1:
                self.stats.failed_instances += 1
                _resolve(items[0][2], error=error)
                return
            logger.info("a batch of %d failed (%s); retrying one by one", len(items), error)
            for item in items:
                await self._run(loop, kind, [item])
            self.stats.batches -= len(items)  # count the retries as one batch
            self.stats.instances -= len(items)
            return
        for (_, _, future), result in zip(items, results, strict=True):
            _resolve(future, result=result)

    def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)


def _resolve(future: asyncio.Future, result: Any = None, error: BaseException | None = None):
    if future.done():  # the client went away and the request was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
