"""Dynamic batching: requests that arrive within ``max_wait_ms`` share one model forward.

The event loop only enqueues :class:`Job` objects and awaits their futures; ONE batching thread takes the
oldest job, keeps collecting jobs of the same kind until the wait runs out or the next job would pass
``max_batch_size`` texts or ``max_batch_tokens`` tokens, runs them as one call and hands each job exactly its
own slice of the results. The wait counts from the oldest request's arrival, and is skipped while requests
come further apart than it (a lone client would only wait longer). The queue is bounded: a full queue is
refused at once (the HTTP layer answers 503), so memory never grows without bound. A job whose client went
away (or timed out) before its batch started is skipped, and counted.

With ``concurrency`` n > 1 (a CPU with n cores for the model), up to n batches run at once, each
whole on one core, in :func:`bertkit.inference.worker_pool`'s threads: the next batch is formed while
the others run, from the requests that arrived meanwhile. One batch at a time, split over the cores,
left them idle while its answers went back and the next requests came in (a closed loop of 32 clients
kept 1.3 of 2 cores busy). A batch of at least ``split_min_items`` items that finds no other batch
running, and holds one request only, still runs on the batching thread, where its runner may spread it
over every core: a lone large request is answered as fast as before. Kinds in ``serial_kinds`` (runners
whose pipelines keep per-call state) never run beside each other.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from .metrics import Metrics

__all__ = ["Batcher", "Job", "QueueFull"]

logger = logging.getLogger("bertkit.serve")


# the weight of the newest gap between two arrivals in their running mean
_GAP_WEIGHT = 0.2


class QueueFull(Exception):
    """The server has as many waiting requests as it accepts."""


@dataclass
class Job:
    """One request's work: ``items`` of one ``kind``, ``tokens`` real tokens in all."""

    kind: str
    items: list[Any]
    tokens: int
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    enqueued: float = field(default_factory=time.perf_counter)
    dropped: threading.Event = field(default_factory=threading.Event)


class Batcher:
    """Owns the batching thread. ``runners[kind](items) -> results`` (one result per item)."""

    def __init__(
        self,
        runners: dict[str, Callable[[list[Any]], Sequence[Any]]],
        metrics: Metrics,
        max_batch_size: int = 64,
        max_batch_tokens: int = 8192,
        max_wait_ms: float = 5.0,
        max_queue: int = 1024,
        concurrency: int = 1,
        serial_kinds: Collection[str] = (),
        split_min_items: int | None = None,
    ) -> None:
        self.runners = runners
        self.metrics = metrics
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.max_wait = max_wait_ms / 1000.0
        self.concurrency = max(1, concurrency)
        self.serial_kinds = frozenset(serial_kinds)
        self._queue: queue.Queue[Job | None] = queue.Queue(maxsize=max_queue)
        self._held: collections.deque[Job] = collections.deque()  # taken but of another kind than the batch
        self._slots = threading.BoundedSemaphore(self.concurrency)  # batches that may run at once
        self._serial = threading.Lock()  # held by a running batch of a serial kind
        self.split_min_items = split_min_items
        self._running = 0  # batches handed to the pool and not finished
        self._running_lock = threading.Lock()
        self._pool = None
        if self.concurrency > 1:
            from bertkit.inference import worker_pool

            self._pool = worker_pool(self.concurrency)  # each thread runs torch on one core
        # the mean time between arrivals (an exponential average, written by the event loop only): a lone
        # client's next request comes after its answer, so waiting for company would only add latency
        self._gap, self._last_arrival = float("inf"), None
        self._thread = threading.Thread(target=self._loop, name="bertkit-inference", daemon=True)
        self._thread.start()

    @property
    def depth(self) -> int:
        return self._queue.qsize() + len(self._held)

    def submit(self, kind: str, items: list[Any], tokens: int) -> Job:
        """Enqueue a job (from the event loop); raises :class:`QueueFull` when no room is left."""
        loop = asyncio.get_running_loop()
        job = Job(kind, items, tokens, loop.create_future(), loop)
        if self._last_arrival is not None:
            gap = job.enqueued - self._last_arrival
            self._gap = gap if self._gap == float("inf") else self._gap + _GAP_WEIGHT * (gap - self._gap)
        self._last_arrival = job.enqueued
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            raise QueueFull from None
        return job

    def close(self, timeout: float = 30.0) -> None:
        """Finish the queued jobs and the running batches, then stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout)
        end = time.monotonic() + timeout
        for _ in range(self.concurrency):  # every slot back: no batch is still running
            if not self._slots.acquire(timeout=max(0.0, end - time.monotonic())):
                break

    # ----------------------------------------------------------------- the batching thread
    def _next(self, timeout: float | None) -> Job | None:
        if self._held:
            return self._held.popleft()
        try:
            return self._queue.get(timeout=timeout) if timeout is None or timeout > 0 else self._queue.get_nowait()
        except queue.Empty:
            raise TimeoutError from None

    def _loop(self) -> None:
        stopping = False
        while not stopping or self._held:
            first = self._next(None)
            if first is None:
                stopping = True
                continue
            # a free slot before the batch is formed: while every slot is busy, requests queue up and
            # the next batch takes them all at once
            self._slots.acquire()
            if first.dropped.is_set():
                self.metrics.count_dropped(1)
                self._slots.release()
                continue
            batch, n_items, n_tokens = [first], len(first.items), first.tokens
            # the wait is counted from the oldest request's arrival: one that already waited for a free
            # slot has had its company arrive meanwhile, and waiting again would leave that core idle.
            # Nor does it wait where requests come further apart than the window: none would join it.
            deadline = first.enqueued + (self.max_wait if self._gap < self.max_wait else 0.0)
            postponed: list[Job] = []
            while n_items < self.max_batch_size and not stopping:
                try:
                    job = self._next(deadline - time.perf_counter())
                except TimeoutError:
                    break
                if job is None:
                    stopping = True
                    break
                if job.dropped.is_set():
                    self.metrics.count_dropped(1)
                    continue
                if (
                    job.kind != first.kind
                    or n_items + len(job.items) > self.max_batch_size
                    or n_tokens + job.tokens > self.max_batch_tokens
                ):
                    postponed.append(job)
                    if job.kind == first.kind:
                        break  # full: run what we have; the job leads the next batch
                    continue
                batch.append(job)
                n_items += len(job.items)
                n_tokens += job.tokens
            self._held.extendleft(reversed(postponed))
            with self._running_lock:
                alone = self._running == 0
                # only one request's batch: a batch gathered from many requests running on every core
                # would hold up the next batch, and the closed loop of clients behind it, until it ends
                pooled = self._pool is not None and not (
                    alone and len(batch) == 1 and self.split_min_items is not None and n_items >= self.split_min_items
                )
                self._running += pooled
            if pooled:
                self._pool.submit(self._run_in_slot, batch, n_tokens, True)  # type: ignore[union-attr]
            else:  # on this thread, with every torch thread: nothing else runs until it is done
                self._run_in_slot(batch, n_tokens, False)

    def _run_in_slot(self, batch: list[Job], n_tokens: int, pooled: bool) -> None:
        try:
            lock = self._serial if batch[0].kind in self.serial_kinds else contextlib.nullcontext()
            with lock:
                self._run(batch, n_tokens)
        finally:
            if pooled:
                with self._running_lock:
                    self._running -= 1
            self._slots.release()

    def _run(self, batch: list[Job], n_tokens: int) -> None:
        # a client may have left while the batch waited for company
        kept = [job for job in batch if not job.dropped.is_set()]
        if len(kept) < len(batch):
            self.metrics.count_dropped(len(batch) - len(kept))
            if not kept:
                return
            batch, n_tokens = kept, sum(job.tokens for job in kept)
        items = [x for job in batch for x in job.items]
        start = time.perf_counter()
        try:
            results = list(self.runners[batch[0].kind](items))
            error: BaseException | None = None
        except Exception as e:  # a failure is reported to each waiting request, never kills the thread
            logger.exception("inference failed")
            results, error = [], e
        took = time.perf_counter() - start
        self.metrics.observe_batch(len(items), n_tokens, took, [start - j.enqueued for j in batch])
        if error is not None and len(batch) > 1:
            # one request's bad input must not fail the requests that shared its batch: run each alone
            for job in batch:
                self._run([job], job.tokens)
            return
        k = 0
        for job in batch:
            part = results[k : k + len(job.items)]
            k += len(job.items)
            job.loop.call_soon_threadsafe(_resolve, job.future, part, error)


def _resolve(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():  # the request was cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
