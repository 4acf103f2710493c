"""Micro-batching: concurrent requests share one forward pass, each waiting a bounded time.

Every request handler ``await``s ``MicroBatcher.submit(queries)``. One worker task takes the
first job from the queue, then everything already queued, then keeps collecting for at most
``max_wait`` seconds after that first job (or until ``max_batch`` queries are in hand), and runs
them as one call of ``run_batch`` on a single model thread. While that forward pass runs, new
requests queue up and form the next batch, so the batches grow with the load.

It waits only for requests that are on their way: the server counts the requests inside it
(``arrive`` / ``leave``, from the moment their bytes arrive, before parsing), and once every
one of them is in hand there is nobody to wait for. So a request alone is never delayed; under
load the wait ends when the requests being parsed have joined, or at ``max_wait``.

With ``max_batch=1`` every job runs alone (micro-batching off: one forward per request), on
the same thread, so the two modes compare the batching only. A job of several queries (a
``/recommend/batch`` request) is never split.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass


@dataclass
class BatchStats:
    """Counts since start: forward passes, queries answered, the largest pass."""

    batches: int = 0
    queries: int = 0
    largest: int = 0
    busy_seconds: float = 0.0

    def to_dict(self) -> dict:
        mean = self.queries / self.batches if self.batches else 0.0
        return {**self.__dict__, "mean_batch": mean}


class MicroBatcher:
    """See the module docstring. ``start()`` and ``stop()`` run in the server's event loop."""

    def __init__(
        self, run_batch: Callable[[list], list], max_batch: int = 64, max_wait: float = 0.002
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be ≥ 1, got {max_batch}")
        if max_wait < 0:
            raise ValueError(f"max_wait must be ≥ 0 seconds, got {max_wait}")
        self.run_batch = run_batch
        self.max_batch = max_batch
        self.max_wait = max_wait if max_batch > 1 else 0.0
        self.stats = BatchStats()
        # one thread: the model runs one pass at a time, using torch's own intra-op threads
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        self.inside = 0  # requests in the server that will submit (see the module docstring)

    def arrive(self) -> None:
        self.inside += 1

    def leave(self) -> None:
        self.inside -= 1

    def start(self) -> None:
        self._queue = asyncio.Queue()
        self._worker = asyncio.get_running_loop().create_task(self._serve())

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        self._executor.shutdown(wait=True)

    async def submit(self, queries: list) -> list:
        """The answers of ``queries`` (in order), computed with whatever else is queued."""
        if self._queue is None:
            raise RuntimeError("the batcher is not started")
        future = asyncio.get_running_loop().create_future()
        await self._queue.put((queries, future))
        return await future

    async def _collect(self) -> list[tuple[list, asyncio.Future]]:
        jobs = [await self._queue.get()]
        size = len(jobs[0][0])
        deadline = time.monotonic() + self.max_wait
        while size < self.max_batch:
            if self._queue.empty():
                if self.inside <= len(jobs):  # nobody else is on the way
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    job = await asyncio.wait_for(self._queue.get(), remaining)
                except TimeoutError:
                    break
            else:
                job = self._queue.get_nowait()
            jobs.append(job)
            size += len(job[0])
        return jobs

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = await self._collect()
            jobs = [(queries, future) for queries, future in jobs if not future.cancelled()]
            if not jobs:
                continue
            flat = [query for queries, _ in jobs for query in queries]
            start = time.perf_counter()
            try:
                answers = await loop.run_in_executor(self._executor, self.run_batch, flat)
            except Exception as error:  # the whole pass failed: every waiting request hears it
                for _, future in jobs:
                    if not future.done():
                        future.set_exception(error)
                continue
            finally:
                self.stats.busy_seconds += time.perf_counter() - start
            self.stats.batches += 1
            self.stats.queries += len(flat)
            self.stats.largest = max(self.stats.largest, len(flat))
            position = 0
            for queries, future in jobs:
                if not future.done():
                    future.set_result(answers[position : position + len(queries)])
                position += len(queries)
