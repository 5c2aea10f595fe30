"""The server's batcher with several batches at once: up to ``concurrency`` batches run side by side, each on
a worker thread that runs torch on one core; serial kinds never overlap; a large batch that finds no other
running stays on the batching thread, where its runner may use every core.

The runners here are plain functions that record where and how they ran (the model's own path through the
batcher is tested over HTTP in test_serve.py); a barrier proves two batches ran at the same time."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from bertkit.inference import threads_here
from bertkit.serving.batcher import Batcher
from bertkit.serving.metrics import Metrics


def _run_jobs(batcher: Batcher, jobs: list[tuple[str, list]]) -> list:
    async def main() -> list:
        futures = [batcher.submit(kind, items, len(items)).future for kind, items in jobs]
        out = await asyncio.gather(*futures, return_exceptions=True)
        await asyncio.to_thread(batcher.close)
        return out

    return asyncio.run(main())


def _meeting(parties: int, timeout: float):
    """A runner that returns only once ``parties`` batches are inside it at the same time."""
    barrier = threading.Barrier(parties, timeout=timeout)

    def runner(items: list) -> list:
        barrier.wait()
        return [(x, threads_here()) for x in items]

    return runner


def test_two_batches_run_at_once_each_on_one_core():
    batcher = Batcher({"e": _meeting(2, timeout=20)}, Metrics(), max_batch_size=1, max_wait_ms=1, concurrency=2)
    out = _run_jobs(batcher, [("e", ["a"]), ("e", ["b"])])
    assert out == [[("a", 1)], [("b", 1)]]


def test_one_batch_at_a_time_without_concurrency():
    # the same two jobs, one slot: the first batch waits at the barrier alone until it breaks
    batcher = Batcher({"e": _meeting(2, timeout=1)}, Metrics(), max_batch_size=1, max_wait_ms=1, concurrency=1)
    out = _run_jobs(batcher, [("e", ["a"]), ("e", ["b"])])
    assert all(isinstance(r, threading.BrokenBarrierError) for r in out)


def test_serial_kinds_never_overlap_and_the_others_do():
    inside, most = 0, 0
    lock = threading.Lock()

    def serial(items: list) -> list:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        time.sleep(0.05)
        with lock:
            inside -= 1
        return items

    runners = {"p": serial, "e": _meeting(2, timeout=20)}
    batcher = Batcher(runners, Metrics(), max_batch_size=1, max_wait_ms=1, concurrency=2, serial_kinds=("p",))
    out = _run_jobs(batcher, [("p", [i]) for i in range(4)] + [("e", ["a"]), ("e", ["b"])])
    assert out[:4] == [[0], [1], [2], [3]] and most == 1
    assert out[4:] == [[("a", 1)], [("b", 1)]]


@pytest.mark.parametrize(("items", "on_batching_thread"), [(["a", "b", "c", "d"], True), (["a"], False)])
def test_a_large_batch_alone_runs_on_the_batching_thread(items, on_batching_thread):
    def where(batch: list) -> list:
        return [threading.current_thread().name] * len(batch)

    batcher = Batcher({"e": where}, Metrics(), max_batch_size=8, max_wait_ms=1, concurrency=2, split_min_items=4)
    (names,) = _run_jobs(batcher, [("e", items)])
    assert (names[0] == "bertkit-inference") == on_batching_thread, names


def test_the_wait_for_company_is_skipped_for_a_lone_client_and_kept_under_load():
    """Requests further apart than --max-wait-ms do not wait (nobody would join them); requests closer
    together than it do, and a late one joins the batch. The window (3 s) dwarfs any scheduling delay."""
    batches: list[list] = []

    def record(items: list) -> list:
        batches.append(list(items))
        return items

    async def main() -> tuple[float, list]:
        batcher = Batcher({"e": record}, Metrics(), max_batch_size=8, max_wait_ms=3000)
        t0 = time.perf_counter()
        await batcher.submit("e", ["lone"], 1).future  # no arrivals before it: nothing to wait for
        lone = time.perf_counter() - t0
        await asyncio.gather(batcher.submit("e", ["a"], 1).future, batcher.submit("e", ["b"], 1).future)
        first = batcher.submit("e", ["c"], 1)  # arrivals are now close together: this one waits
        await asyncio.sleep(0.2)
        await asyncio.gather(first.future, batcher.submit("e", ["d"], 1).future)
        await asyncio.to_thread(batcher.close)
        return lone, batches

    lone, seen = asyncio.run(main())
    assert lone < 1.5, f"a lone request waited {lone:.2f} s for company"
    assert seen[0] == ["lone"] and ["c", "d"] in seen, seen
