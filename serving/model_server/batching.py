"""Adaptive batching inside the server: one model call for many concurrent requests.

Requests add their instances to a pending list. The first instance to arrive schedules a flush:
at once (on the next turn of the event loop, after the handlers already running have added
theirs) when the previous batch held a single instance, else after at most ``max_latency_ms``
— or as soon as as many instances as last time are pending, since steady clients send the same
number per round. A flush runs the model once on up to ``max_batch_size`` instances. So batches
grow with the load and a lone request does not wait. While a batch runs on the worker thread,
new arrivals wait for it and form the next batch.

Plain callbacks and futures, no queue and no timer task per request: this sits on the path of
every request, and its own cost must stay well below the model call it saves.

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
    retried_batches: int = 0
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
            "retried_batches": self.retried_batches,
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
        # Kinds whose model call is so short that a hop to the thread (and back through the
        # GIL) costs more than it saves; they run on the event loop.
        self.inline_kinds = inline_kinds
        self.stats = BatchStats()
        # One model call at a time: TensorFlow already spreads one call over every core.
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: list[tuple[str, Any, asyncio.Future]] = []
        self._flush: asyncio.Handle | None = None
        self._flush_soon = False
        self._running = False
        self._last_batch = 1

    def __getstate__(self) -> dict:
        """A copy for another process: settings only, fresh state and counters."""
        return {"run_batch": self.run_batch, "max_batch_size": self.max_batch_size,
                "max_latency": self.max_latency, "inline_kinds": self.inline_kinds}

    def __setstate__(self, state: dict) -> None:
        AdaptiveBatcher.__init__(self, state["run_batch"], state["max_batch_size"],
                                 state["max_latency"] * 1000.0, state["inline_kinds"])

    async def submit(self, items: Sequence[tuple[str, Any]]) -> list[Any]:
        """Results for ``(kind, value)`` items in order; an item's exception takes its place."""
        loop = asyncio.get_running_loop()
        futures = []
        for kind, value in items:
            future = loop.create_future()
            self._pending.append((kind, value, future))
            futures.append(future)
        self.stats.requests += 1
        self._schedule(loop)
        if len(futures) == 1:
            try:
                return [await futures[0]]
            except Exception as error:  # noqa: BLE001 - reported in its place, as gather does
                return [error]
        return await asyncio.gather(*futures, return_exceptions=True)

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._running:
            return  # the running batch flushes again when it is done
        if len(self._pending) >= min(self.max_batch_size, self._last_batch):
            if self._flush is not None and not self._flush_soon:
                self._flush.cancel()  # the wait is over: as many as last time are here
                self._flush = None
            if self._flush is None:
                self._flush, self._flush_soon = loop.call_soon(self._start, loop), True
        elif self._flush is None:
            self._flush = loop.call_later(self.max_latency, self._start, loop)
            self._flush_soon = False

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._flush = None
        if self._running or not self._pending:
            return
        batch = self._pending[:self.max_batch_size]
        del self._pending[:self.max_batch_size]
        self._last_batch = len(batch)
        by_kind: dict[str, list[tuple]] = {}
        for item in batch:
            by_kind.setdefault(item[0], []).append(item)
        if all(kind in self.inline_kinds for kind in by_kind):
            for kind, items in by_kind.items():
                self._run_inline(kind, items)
            self._after(loop)
            return
        self._running = True
        task = loop.create_task(self._run_in_thread(loop, by_kind))
        task.add_done_callback(lambda _: self._after(loop))

    def _after(self, loop: asyncio.AbstractEventLoop) -> None:
        self._running = False
        if self._pending:
            self._schedule(loop)

    def _count(self, items: list[tuple]) -> None:
        self.stats.batches += 1
        self.stats.instances += len(items)
        self.stats.largest_batch = max(self.stats.largest_batch, len(items))

    def _run_inline(self, kind: str, items: list[tuple]) -> None:
        self._count(items)
        try:
            results = self.run_batch(kind, [value for _, value, _ in items])
        except Exception as error:  # noqa: BLE001 - isolated below, reported per instance
            for item in self._to_retry(items, error):
                self._run_inline(kind, [item])
            return
        _deliver(items, results)

    async def _run_in_thread(self, loop, by_kind: dict[str, list[tuple]]) -> None:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="batch")
        for kind, items in by_kind.items():
            if kind in self.inline_kinds:
                self._run_inline(kind, items)
                continue
            await self._run_threaded(loop, kind, items)

    async def _run_threaded(self, loop, kind: str, items: list[tuple]) -> None:
        self._count(items)
        try:
            results = await loop.run_in_executor(
                self._executor, self.run_batch, kind, [value for _, value, _ in items])
        except Exception as error:  # noqa: BLE001 - isolated below, reported per instance
            for item in self._to_retry(items, error):
                await self._run_threaded(loop, kind, [item])
            return
        _deliver(items, results)

    def _to_retry(self, items: list[tuple], error: Exception) -> list[tuple]:
        """After a failed batch: a lone instance gets the error; a batch's instances are
        retried one by one, so one bad instance never fails its neighbours."""
        if len(items) == 1:
            self.stats.failed_instances += 1
            _resolve(items[0][2], error=error)
            return []
        logger.info("a batch of %d failed (%s); retrying one by one", len(items), error)
        self.stats.retried_batches += 1
        return items

    def close(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)


def _deliver(items: list[tuple], results: Sequence[Any]) -> None:
    for (_, _, future), result in zip(items, results, strict=True):
        _resolve(future, result=result)


def _resolve(future: asyncio.Future, result: Any = None, error: BaseException | None = None):
    if future.done():  # the client went away and the request was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
