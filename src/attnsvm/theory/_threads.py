"""The theory lab's thread policy: its solvers run with one BLAS thread.

Their linear algebra is many small and mid-sized products and factorisations (64-square blocks,
Schur and Gram matrices of a few thousand rows), where OpenBLAS's threads gain little on an idle
machine and collapse on a busy one: on 2 shared cores, ``solve_nuclear`` at (50, 32, 32) took
77-113 s with the default threads against 7-8 s with one (before this policy), and the
(1000, 50, 64) Frobenius solve took 19 s with two threads against 9 s with one at a load of
about one other process. One thread is the choice that never loses much and never collapses
(``benchmarks/theory_contention.py`` measures both, idle and beside a busy core).
The limit holds inside the decorated functions only, whatever the caller set, and is undone on
return; the undecorated function stays reachable as ``__wrapped__`` for that benchmark.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from threadpoolctl import ThreadpoolController

P = ParamSpec("P")
R = TypeVar("R")

#: BLAS threads inside the theory lab's solvers and experiments.
BLAS_THREADS = 1

_controller: ThreadpoolController | None = None


def one_blas_thread(func: Callable[P, R]) -> Callable[P, R]:
    """Run ``func`` with ``BLAS_THREADS`` BLAS threads (the loaded libraries are inspected once,
    on the first call, so a call costs microseconds)."""

    @functools.wraps(func)
    def limited(*args: P.args, **kwargs: P.kwargs) -> R:
        global _controller
        if _controller is None:
            _controller = ThreadpoolController()
        with _controller.limit(limits=BLAS_THREADS, user_api="blas"):
            return func(*args, **kwargs)

    return limited
