"""The theory lab beside a busy core: its solvers with one BLAS thread (the policy of
``attnsvm.theory._threads``) against the BLAS libraries' default threads, idle and under load.

Another job is a bounded busy loop: a child process spinning on one core (pinned to the last
one) for at most ``--bound`` seconds, started before a measured solve and stopped after it.
Workloads: ``solve_nuclear`` at (50, 32, 32), the issue's case (77-113 s with the default
threads on a busy machine against 7-8 s single-threaded, before this policy), and
``solve_frobenius`` at (500, 50, 64). "default threads" calls the solver without the policy
(``__wrapped__``) with every core's BLAS thread, as the libraries start. Runs interleave
(policy, default; idle, busy; repeated) and record the load average before and after.

    .venv/bin/python benchmarks/theory_contention.py [--repeats 2] [--bound 900]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from threadpoolctl import ThreadpoolController

import conditions
from attnsvm.theory.svm import solve_frobenius, solve_nuclear
from theory_solvers import instance

WORKLOADS = {
    "solve_nuclear (50,32,32)": (solve_nuclear, (50, 32, 32)),
    "solve_frobenius (500,50,64)": (solve_frobenius, (500, 50, 64)),
}


def run(solver, size, mode: str, busy: bool, bound: float, controller) -> dict:
    X, Z, alpha = instance(*size)
    cores = len(os.sched_getaffinity(0))
    before = conditions.load()
    start = time.perf_counter()
    if busy:
        with conditions.BusyCore(bound):
            start = time.perf_counter()
            _solve(solver, X, Z, alpha, mode, cores, controller)
            seconds = time.perf_counter() - start
    else:
        _solve(solver, X, Z, alpha, mode, cores, controller)
        seconds = time.perf_counter() - start
    after = conditions.load()
    return {"seconds": seconds, "load": [round(before, 2), round(after, 2)]}


def _solve(solver, X, Z, alpha, mode: str, cores: int, controller) -> None:
    if mode == "one thread (policy)":
        solver(X, Z, alpha)
    else:
        with controller.limit(limits=cores, user_api="blas"):
            solver.__wrapped__(X, Z, alpha)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--bound", type=float, default=900.0, help="busy loop's limit (s)")
    parser.add_argument("--json", default=None, help="also write the runs and conditions here")
    args = parser.parse_args()
    info = conditions.machine()
    print(conditions.describe(info), flush=True)
    controller = ThreadpoolController()
    modes = ("one thread (policy)", f"default threads ({info['cores']})")
    runs = conditions.idle_and_busy(
        list(WORKLOADS),
        modes,
        args.repeats,
        lambda workload, mode, busy: run(*WORKLOADS[workload], mode, busy, args.bound, controller),
    )
    print("| workload | BLAS threads | idle (s) | one busy core (s) | busy / idle | load |")
    print("|---|---|---|---|---|---|")
    for workload in WORKLOADS:
        for mode in modes:
            idle = statistics.median(r["seconds"] for r in runs[workload, mode, False])
            busy = statistics.median(r["seconds"] for r in runs[workload, mode, True])
            both = runs[workload, mode, False] + runs[workload, mode, True]
            print(
                f"| {workload} | {mode} | {idle:.2f} | {busy:.2f} | {busy / idle:.1f}x "
                f"| {conditions.load_range(both)} |"
            )
    conditions.write_runs(args.json, info, runs)


if __name__ == "__main__":
    main()
