"""Att-SVM solvers: ours against the official approach and against tight cvxpy + Clarabel.

Ours: ``solve_frobenius`` (Wolfe's min-norm point with bulk corral updates, exact KKT polish) and
``solve_nuclear`` (dedicated interior point on a working set), one BLAS thread (the theory lab's
policy, ``attnsvm.theory._threads``). Official: base.py's ``W_svm_solver``
(``solve_official_style``: one cvxpy constraint per pair, cvxpy 1.9.3's default solver, CLARABEL
for the Frobenius SOCP and SCS for the nuclear SDP). Clarabel: cvxpy + Clarabel at tight
tolerances (``CLARABEL_ACCURATE``, 1e-11 gaps) on the Frobenius QP as written
(``solve_frobenius_cvxpy``) and on the nuclear SDP in the same bases as ours (at d = 64 the
unreduced size, 2d). Each official and Clarabel run is a fresh process, killed past ``--cap``
seconds or ``--memory`` GiB and then reported as "> cap" / "> mem".

Instances follow the local_converge generator (unit-norm Gaussian tokens, unit queries, unit v,
random signs, alpha = opt; numpy RNG, seed 0). Per size, the systems run interleaved (ours,
Clarabel, official, then again) ``--repeats`` times; a system over its cap is not run again.
Times are medians; every run records the load average before and after it, and a row whose run
saw more runnable work than cores is marked loaded (conditions.py). KKT is the largest
of our residuals (primal, dual, complementarity, stationarity, gap).

    .venv/bin/python benchmarks/theory_solvers.py [--repeats 3] [--cap 300] [--memory 8]
        [--max-n 1000] [--only 300,50,64] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import queue as queue_module
import resource
import statistics
import time
import warnings

import numpy as np

import conditions
from attnsvm.theory import _nuclear
from attnsvm.theory._compat import solve_official_style
from attnsvm.theory.svm import (
    _selection_kernel,
    solve_frobenius,
    solve_frobenius_cvxpy,
    solve_nuclear,
)

# (n, T, d, solve the nuclear norm here)
SIZES = [
    (6, 8, 10, True),
    (20, 16, 16, True),
    (50, 32, 32, True),
    (100, 50, 64, True),
    (300, 50, 64, True),
    (1000, 50, 64, False),
]


def instance(n: int, T: int, d: int, seed: int = 0):
    """The local_converge generator's statistics (numpy RNG): ``(X, Z, alpha = opt)``."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(d)
    v /= np.linalg.norm(v)
    Y = np.where(rng.standard_normal(n) > 0, 1.0, -1.0)
    X = rng.standard_normal((n, T, d))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    Z = rng.standard_normal((n, d))
    Z /= np.linalg.norm(Z, axis=-1, keepdims=True)
    alpha = np.argmax(Y[:, None] * (X @ v), axis=1)
    return X, Z, alpha


def _clarabel_nuclear(X, Z, alpha):
    """Tight Clarabel on the nuclear SDP in the row/column-space bases: ``(seconds, W)``."""
    kernel = _selection_kernel(X, Z, alpha)
    U = _nuclear.orthonormal_basis(kernel.delta)
    V = _nuclear.orthonormal_basis(Z)
    start = time.perf_counter()
    B, _, _ = _nuclear._cvxpy(kernel.delta @ U, kernel.query @ V, "CLARABEL")
    return time.perf_counter() - start, U @ B @ V.T


def _child(queue, kind: str, size, memory_gib: float) -> None:
    limit = int(memory_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    warnings.simplefilter("ignore")  # Clarabel's "almost solved"; the accuracy is reported
    try:
        X, Z, alpha = instance(*size)
        if kind == "clarabel-nuc":
            seconds, W = _clarabel_nuclear(X, Z, alpha)
        else:
            solve = {
                "official-fro": lambda: solve_official_style(X, Z, alpha, fro=True),
                "official-nuc": lambda: solve_official_style(X, Z, alpha, fro=False),
                "clarabel-fro": lambda: solve_frobenius_cvxpy(X, Z, alpha),
            }[kind]
            result = solve()
            seconds, W = result.seconds, result.W
    except MemoryError:
        queue.put("memory")
        return
    queue.put((seconds, W))


def isolated(kind: str, size, cap: float, memory_gib: float):
    """One official or Clarabel run in a fresh process: ``(seconds, W)``, "cap" or "memory"
    (the child ran out of its address space: a MemoryError, or Clarabel's abort).

    "spawn", not "fork": a fork after Clarabel has started its threads can deadlock."""
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_child, args=(queue, kind, size, memory_gib))
    process.start()
    deadline = time.perf_counter() + cap
    try:
        while time.perf_counter() < deadline:
            try:
                return queue.get(timeout=1.0)
            except queue_module.Empty:
                if not process.is_alive():  # died: whatever it sent last, else out of memory
                    try:
                        return queue.get(timeout=1.0)
                    except queue_module.Empty:
                        return "memory"
        return "cap"
    finally:
        process.kill()
        process.join()


def timed(run, threads: int, loads: list) -> object:
    before = conditions.load()
    result = run()
    after = conditions.load()
    loads.append((before, after, conditions.loaded(before, after, threads)))
    return result


def measure(size, run_nuclear: bool, repeats: int, cap: float, memory: float) -> dict:
    """Every system on one size, interleaved, ``repeats`` times."""
    X, Z, alpha = instance(*size)
    ours = {"fro": [], "nuc": []}
    isolated_runs = {kind: [] for kind in ("clarabel-fro", "official-fro")}
    if run_nuclear:
        isolated_runs.update({"clarabel-nuc": [], "official-nuc": []})
    loads: list = []
    for _ in range(repeats):
        ours["fro"].append(timed(lambda: solve_frobenius(X, Z, alpha), 1, loads))
        if run_nuclear and ours["fro"][0].feasible:
            ours["nuc"].append(timed(lambda: solve_nuclear(X, Z, alpha), 1, loads))
        for kind, runs in isolated_runs.items():
            if runs and not isinstance(runs[-1], tuple):
                continue  # over its cap or memory once: enough to say so
            runs.append(timed(lambda kind=kind: isolated(kind, size, cap, memory), 1, loads))
    fro = ours["fro"][0]
    row = {
        "size": size,
        "N": size[0] * (size[1] - 1),
        "status": fro.status,
        "support": int(fro.support.sum()) if fro.feasible else 0,
        "fro": statistics.median(r.seconds for r in ours["fro"]),
        "fro_runs": [round(r.seconds, 3) for r in ours["fro"]],
        "fro_kkt": max(fro.kkt.values()) if fro.feasible else None,
        "loads": [[round(b, 2), round(a, 2), flag] for b, a, flag in loads],
    }
    if ours["nuc"]:
        nuc = ours["nuc"][0]
        row.update(
            nuc=statistics.median(r.seconds for r in ours["nuc"]),
            nuc_runs=[round(r.seconds, 3) for r in ours["nuc"]],
            nuc_kkt=max(nuc.kkt.values()),
            nuc_rounds=nuc.info.get("rounds"),
        )
    for kind, runs in isolated_runs.items():
        done = [r for r in runs if isinstance(r, tuple)]
        row[kind] = statistics.median(r[0] for r in done) if len(done) == len(runs) else None
        row[kind + "_runs"] = [round(r[0], 2) if isinstance(r, tuple) else r for r in runs]
        if done and kind.endswith("fro") and fro.feasible:
            row[kind + "_W_diff"] = float(np.linalg.norm(fro.W - done[0][1]))
            row[kind + "_W_diff"] /= float(np.linalg.norm(done[0][1]))
        if done and kind.endswith("nuc") and ours["nuc"]:
            theirs = float(np.linalg.svd(done[0][1], compute_uv=False).sum())
            row[kind + "_obj_diff"] = abs(ours["nuc"][0].objective - theirs) / theirs
    return row


def table(rows, cap: float, memory: float) -> str:
    """The markdown table: medians, our KKT, and each peer's time and distance to ours."""

    def peer(row, kind) -> str:
        value = row.get(kind)
        if value is not None:
            return f"{value:.3g}"
        if kind not in row:
            return "-"
        last = row[kind + "_runs"][-1]
        return f"> {cap:.0f}" if last == "cap" else f"> {memory:g} GiB"

    def num(value, fmt=".1e") -> str:
        return "-" if value is None else format(value, fmt)

    lines = [
        "| (n,T,d) | N | support | Fro ours (s) | KKT | Fro Clarabel (s) | W diff "
        "| Fro official (s) | nuc ours (s) | KKT | nuc Clarabel (s) | obj diff "
        "| nuc official SCS (s) | load | loaded |",
        "|" + "---|" * 15,
    ]
    for r in rows:
        load_values = [v for b, a, _ in r["loads"] for v in (b, a)]
        cells = [
            str(r["size"]).replace(" ", ""),
            str(r["N"]),
            str(r["support"]) if r["status"] == "optimal" else r["status"],
            f"{r['fro']:.3g}",
            num(r["fro_kkt"]),
            peer(r, "clarabel-fro"),
            num(r.get("clarabel-fro_W_diff")),
            peer(r, "official-fro"),
            num(r.get("nuc"), ".3g"),
            num(r.get("nuc_kkt")),
            peer(r, "clarabel-nuc"),
            num(r.get("clarabel-nuc_obj_diff")),
            peer(r, "official-nuc"),
            f"{min(load_values):.2f}-{max(load_values):.2f}",
            "yes" if any(flag for *_, flag in r["loads"]) else "no",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cap", type=float, default=300.0, help="per official/Clarabel run (s)")
    parser.add_argument("--memory", type=float, default=8.0, help="per official/Clarabel run (GiB)")
    parser.add_argument("--max-n", type=int, default=1000, help="skip sizes with larger n")
    parser.add_argument("--only", default=None, help="one size, e.g. 300,50,64")
    parser.add_argument("--json", default=None, help="also write the rows and conditions here")
    args = parser.parse_args()
    info = conditions.machine()
    print(conditions.describe(info), flush=True)
    rows = []
    for n, T, d, run_nuclear in SIZES:
        if n > args.max_n or (args.only and args.only != f"{n},{T},{d}"):
            continue
        row = measure((n, T, d), run_nuclear, args.repeats, args.cap, args.memory)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print()
    print(table(rows, args.cap, args.memory))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"conditions": info, "rows": rows}, out, indent=1)


if __name__ == "__main__":
    main()
