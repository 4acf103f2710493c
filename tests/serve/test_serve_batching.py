"""The micro-batcher: concurrent jobs share a pass, within ``max_batch``, after a bounded wait."""

from __future__ import annotations

import asyncio
import time

import pytest

from attnsvm.serve.batching import MicroBatcher


def run(coroutine_function, *arguments):
    return asyncio.run(coroutine_function(*arguments))


def recording(passes: list[list], fail_on=None):
    def run_batch(queries: list) -> list:
        passes.append(list(queries))
        if fail_on is not None and fail_on in queries:
            raise RuntimeError("the model failed")
        return [query * 10 for query in queries]

    return run_batch


async def submit_all(batcher: MicroBatcher, jobs: list[list]) -> list:
    """Every job as a request that has arrived (as the server counts them) and submits."""
    batcher.start()
    for _ in jobs:
        batcher.arrive()
    try:
        return await asyncio.gather(*(batcher.submit(job) for job in jobs))
    finally:
        await batcher.stop()


def test_concurrent_jobs_share_one_pass_and_get_their_own_answers():
    passes = []
    answers = run(submit_all, MicroBatcher(recording(passes), 64, 0.05), [[1], [2], [3], [4]])
    assert answers == [[10], [20], [30], [40]]
    assert passes == [[1, 2, 3, 4]]


def test_a_pass_holds_at_most_max_batch_queries_and_never_splits_a_job():
    passes = []
    jobs = [[1], [2, 3, 4], [5], [6], [7, 8], [9]]
    answers = run(submit_all, MicroBatcher(recording(passes), 3, 0.05), jobs)
    assert answers == [[q * 10 for q in job] for job in jobs]
    assert passes == [[1, 2, 3, 4], [5, 6, 7, 8], [9]]  # a pass closes once it reaches 3


def test_off_means_one_pass_per_request():
    passes = []
    batcher = MicroBatcher(recording(passes), 1, 0.05)
    assert batcher.max_wait == 0.0
    run(submit_all, batcher, [[1], [2], [3]])
    assert passes == [[1], [2], [3]]


async def latency(others_inside: int, max_wait: float) -> float:
    """Seconds a lone submit takes while ``others_inside`` more requests are in the server."""
    batcher = MicroBatcher(recording([]), 64, max_wait)
    batcher.start()
    for _ in range(1 + others_inside):
        batcher.arrive()
    try:
        start = time.perf_counter()
        await batcher.submit([1])
        return time.perf_counter() - start
    finally:
        await batcher.stop()


def test_a_request_alone_in_the_server_does_not_wait():
    assert run(latency, 0, 2.0) < 1.0  # far below the 2 s it would wait (a busy machine)


def test_a_request_waits_for_others_on_their_way_no_longer_than_max_wait():
    assert 0.025 <= run(latency, 3, 0.03) < 1.0


def test_the_wait_ends_when_the_request_on_its_way_arrives():
    passes = []

    async def scenario() -> float:
        batcher = MicroBatcher(recording(passes), 64, 1.0)
        batcher.start()
        batcher.arrive()
        batcher.arrive()
        try:
            start = time.perf_counter()
            first = asyncio.ensure_future(batcher.submit([1]))
            await asyncio.sleep(0.05)  # the second request is still being parsed
            await batcher.submit([2])
            await first
            return time.perf_counter() - start
        finally:
            await batcher.stop()

    assert run(scenario) < 0.5  # not the full second
    assert passes == [[1, 2]]


def test_a_failed_pass_reaches_every_waiting_request_and_the_batcher_goes_on():
    passes = []

    async def scenario():
        batcher = MicroBatcher(recording(passes, fail_on=2), 64, 0.05)
        batcher.start()
        batcher.arrive()
        batcher.arrive()
        try:
            failed = await asyncio.gather(
                batcher.submit([1]), batcher.submit([2]), return_exceptions=True
            )
            after = await batcher.submit([3])
        finally:
            await batcher.stop()
        return failed, after

    failed, after = run(scenario)
    assert all(isinstance(error, RuntimeError) for error in failed)
    assert after == [30]


def test_settings_are_checked():
    with pytest.raises(ValueError, match="max_batch"):
        MicroBatcher(recording([]), 0)
    with pytest.raises(ValueError, match="max_wait"):
        MicroBatcher(recording([]), 4, -1.0)
