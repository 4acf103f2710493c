"""Att-SVM solvers: ours against the official approach (base.py ``W_svm_solver``).

The official approach builds one cvxpy constraint per pair (i, t) and calls cvxpy's default
solver (cvxpy 1.9.3: CLARABEL for the Frobenius SOCP, SCS for the nuclear-norm SDP). Instances
follow the local_converge generator: unit-norm Gaussian tokens, unit queries, a unit ``v``,
random signs ``Y`` and ``alpha = opt``. Every timing is the median of ``--repeats`` runs; a
run of the official approach that exceeds ``--cap`` seconds is killed and reported as "> cap".

    .venv/bin/python benchmarks/theory_solvers.py [--repeats 3] [--cap 200]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics

import numpy as np

from attnsvm.theory._compat import solve_official_style
from attnsvm.theory.svm import solve_frobenius, solve_nuclear

# (n, T, d, run the official approach, run our nuclear solver)
SIZES = [
    (6, 8, 10, True, True),
    (20, 16, 16, True, True),
    (50, 32, 32, True, True),
    (100, 50, 64, True, True),
    (300, 50, 64, False, False),
    (1000, 50, 64, False, False),
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


def _child(queue, fro: bool, size) -> None:
    result = solve_official_style(*instance(*size), fro=fro)
    queue.put((result.seconds, result.W, result.objective))


def official(size, fro: bool, cap: float):
    """One official-style solve in a fresh process: ``(seconds, W, objective)`` or None.

    "spawn", not "fork": a fork after Clarabel has started its threads can deadlock."""
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_child, args=(queue, fro, size))
    process.start()
    try:
        return queue.get(timeout=cap)
    except Exception:  # queue.Empty: over the cap
        return None
    finally:
        process.kill()
        process.join()


def median_time(solve, repeats: int):
    runs = [solve() for _ in range(repeats)]
    return statistics.median(r.seconds for r in runs), runs[0]


def fmt(seconds: float | None, cap: float, runs=()) -> str:
    """The median, or "> cap" with the runs that did finish before one went over the cap."""
    if seconds is not None:
        return f"{seconds:.3g}"
    finished = [f"{r:.3g}" for r in runs if r != "over cap"]
    return f"> {cap:.0f}" + (
        f" ({', '.join(finished)} s, then one > {cap:.0f})" if finished else ""
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cap", type=float, default=200.0, help="official-run timeout (s)")
    parser.add_argument("--max-n", type=int, default=1000, help="skip sizes with larger n")
    parser.add_argument("--only", default=None, help="one size, e.g. 50,32,32")
    args = parser.parse_args()
    rows = []
    for n, T, d, run_official, run_nuclear in SIZES:
        if n > args.max_n or (args.only and args.only != f"{n},{T},{d}"):
            continue
        X, Z, alpha = instance(n, T, d)
        # sizes only we can do run once: a median of 3 would triple minutes of compute
        repeats = args.repeats if run_official else 1
        fro_s, fro = median_time(lambda X=X, Z=Z, a=alpha: solve_frobenius(X, Z, a), repeats)
        row = {"size": (n, T, d), "N": n * (T - 1), "fro": fro_s, "status": fro.status}
        row["support"] = int(fro.support.sum()) if fro.feasible else 0
        if run_nuclear and fro.feasible:
            row["nuc"], nuc = median_time(lambda X=X, Z=Z, a=alpha: solve_nuclear(X, Z, a), repeats)
            row["nuc_obj"] = nuc.objective
        for fro_mode, key in ((True, "off_fro"), (False, "off_nuc")):
            if not run_official:
                continue
            runs = []
            for _ in range(repeats):
                runs.append(official((n, T, d), fro_mode, args.cap))
                if runs[-1] is None:  # over the cap: one timed-out run is enough to say so
                    break
            done = [r for r in runs if r is not None]
            row[key] = statistics.median(r[0] for r in done) if len(done) == len(runs) else None
            row[key + "_runs"] = [round(r[0], 2) for r in done] + ["over cap"] * (
                len(runs) - len(done)
            )
            if done and fro_mode and fro.feasible:
                row["fro_err"] = np.linalg.norm(fro.W - done[0][1]) / np.linalg.norm(done[0][1])
            if done and not fro_mode and "nuc_obj" in row:
                row["nuc_err"] = abs(row["nuc_obj"] - done[0][2]) / done[0][2]
        rows.append(row)
        print(row, flush=True)
    print()
    print(table(rows, args.cap))


def table(rows, cap: float) -> str:
    """The markdown table of RESULTS.md."""

    def ratio(ours, off) -> str:
        if ours is None:
            return "-"
        return f"> {cap / ours:.0f}x" if off is None else f"{off / ours:.0f}x"

    def err(value) -> str:
        return "-" if value is None else f"{value:.1e}"

    lines = [
        "| (n,T,d) | N | active | Fro ours (s) | Fro official (s) | speed-up | rel. W diff "
        "| nuc ours (s) | nuc official SCS (s) | speed-up | rel. objective diff |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ran = "off_fro" in r
        nuc = r.get("nuc")
        cells = [
            str(r["size"]).replace(" ", ""),
            str(r["N"]),
            str(r["support"]) if r["status"] == "optimal" else r["status"],
            f"{r['fro']:.3g}",
            fmt(r["off_fro"], cap, r["off_fro_runs"]) if ran else "not run",
            ratio(r["fro"], r["off_fro"]) if ran else "-",
            err(r.get("fro_err")),
            "skipped" if nuc is None else f"{nuc:.3g}",
            fmt(r["off_nuc"], cap, r["off_nuc_runs"]) if ran else "not run",
            ratio(nuc, r["off_nuc"]) if ran else "-",
            err(r.get("nuc_err")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
