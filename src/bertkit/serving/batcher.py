"""Dynamic batching: requests that arrive within ``max_wait_ms`` share one model forward.

The event loop only enqueues :class:`Job` objects and awaits their futures; ONE inference thread owns
the model. It takes the oldest job, keeps collecting jobs of the same kind until the wait runs out or
the next job would pass ``max_batch_size`` texts or ``max_batch_tokens`` tokens, runs them as one
call and hands each job exactly its own slice of the results. The queue is bounded: a full queue
is refused at once (the HTTP layer answers 503), so memory never grows without bound. A job whose
client went away (or timed out) before its batch started is skipped, and counted.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .metrics import Metrics

__all__ = ["Batcher", "Job", "QueueFull"]

logger = logging.getLogger("bertkit.serve")


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
    """Owns the inference thread. ``runners[kind](items) -> results`` (one result per item)."""

    def __init__(
        self,
        runners: dict[str, Callable[[list[Any]], Sequence[Any]]],
        metrics: Metrics,
        max_batch_size: int = 64,
        max_batch_tokens: int = 8192,
        max_wait_ms: float = 5.0,
        max_queue: int = 1024,
    ) -> None:
        self.runners = runners
        self.metrics = metrics
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.max_wait = max_wait_ms / 1000.0
        self._queue: queue.Queue[Job | None] = queue.Queue(maxsize=max_queue)
        self._held: collections.deque[Job] = collections.deque()  # taken but of another kind than the batch
        self._thread = threading.Thread(target=self._loop, name="bertkit-inference", daemon=True)
        self._thread.start()

    @property
    def depth(self) -> int:
        return self._queue.qsize() + len(self._held)

    def submit(self, kind: str, items: list[Any], tokens: int) -> Job:
        """Enqueue a job (from the event loop); raises :class:`QueueFull` when no room is left."""
        loop = asyncio.get_running_loop()
        job = Job(kind, items, tokens, loop.create_future(), loop)
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            raise QueueFull from None
        return job

    def close(self, timeout: float = 30.0) -> None:
        """Finish the queued jobs, then stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout)

    # ----------------------------------------------------------------- the inference thread
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
            if first.dropped.is_set():
                self.metrics.count_dropped(1)
                continue
            batch, n_items, n_tokens = [first], len(first.items), first.tokens
            deadline = time.perf_counter() + self.max_wait
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
            self._run(batch, n_tokens)

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
