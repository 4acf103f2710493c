"""Every experiment of the paper (theory.md §3), by name, with full-size and quick settings.

``run_experiment(name, seeds=..., quick=...)`` returns an :class:`ExperimentResult`; its
``save(out_dir)`` writes ``results.json`` and the PNG figures. ``demo_summary(out_dir)`` runs the
quick version of all of them and returns a rich table.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from attnsvm.theory._threads import one_blas_thread
from attnsvm.theory.experiments import (
    global_path,
    local_convergence,
    multi_token,
    overparameterization,
    rank,
    regularization_path,
)
from attnsvm.theory.experiments._result import ExperimentResult
from attnsvm.theory.experiments._svms import FALLBACKS

__all__ = ["EXPERIMENTS", "Experiment", "ExperimentResult", "demo_summary", "run_experiment"]


@dataclass(frozen=True)
class Experiment:
    """``run(seeds=..., **options)``; ``quick`` overrides for the demo; ``headline`` one line."""

    run: Callable[..., ExperimentResult]
    description: str
    default_seeds: int
    headline: Callable[[ExperimentResult], str]
    quick: dict = field(default_factory=dict)


def _local(r):
    f = r.metrics["final"]
    return (
        f"median corr W->Fro {f['W_fro']['median']:.4f}, KQ->nuc {f['KQ_nuc']['median']:.4f}, "
        f"cross {f['W_nuc']['median']:.3f}"
    )


def _global(r):
    m = r.metrics["visualization1"]
    return f"vis1 corr W->Fro {m['corr_W_fro']:.5f}, KQ->nuc {m['corr_KQ_nuc']:.5f}"


def _rank(r):
    cell = r.metrics["accurate"].get("n=5,T=5", {})
    d = max(cell) if cell else None
    if d is None or cell[d]["rank_fro"] is None:
        return "no feasible cell"
    return f"n=5,T=5,d={d}: rank Fro {cell[d]['rank_fro']:.2f}, nuclear {cell[d]['rank_nuc']:.2f}"


def _multi(r):
    parts = []
    for d, m in r.metrics["by_d"].items():
        if m["accepted"]:
            f = m["final_one_minus_corr"]
            parts.append(
                f"d={d}: 1-corr SVMeq {f['svmeq']['mean']:.4f} / W^mm(O) "
                f"{f['dir']['mean']:.4f} / 1tok {f['one_token']['mean']:.3f}"
            )
    return "; ".join(parts) or "no accepted runs"


def _over(r):
    rows = r.metrics["by_d"]
    return ", ".join(f"d={d}: {rows[d]['W']['frac_global']:.2f}" for d in rows) + " reach opt (W)"


def _regpath(r):
    w, kq = r.metrics["W"], r.metrics["KQ"]
    return (
        f"largest R: median corr W_R->Fro {w['corr_fro_median'][-1]:.4f}, "
        f"KQ_R->nuc {kq['corr_nuc_median'][-1]:.4f}"
    )


EXPERIMENTS: dict[str, Experiment] = {
    "global-path": Experiment(
        global_path.run, "visualization1/2: 2-D GD paths vs SVM rays", 1, _global
    ),
    "local-convergence": Experiment(
        local_convergence.run,
        "local_converge: GD -> W^mm_alpha (W: Frobenius, KQ: nuclear)",
        100,
        _local,
        {"seeds": 8},
    ),
    "rank": Experiment(
        rank.run,
        "svm_rank: ranks of W^mm and W^mm_* vs d, accurate and notebook modes",
        100,
        _rank,
        {"seeds": 10, "dims": (2, 4, 10), "cells": ((5, 5),)},
    ),
    "multi-token": Experiment(
        multi_token.run,
        "multi_token_converge: ReLU head, SVM-equivalence",
        500,
        _multi,
        {"seeds": 5, "dims": (4, 10)},
    ),
    "overparameterization": Experiment(
        overparameterization.run,
        "fraction of runs reaching the global opt vs d",
        30,
        _over,
        {"seeds": 8, "dims": (4, 20)},
    ),
    "regularization-path": Experiment(
        regularization_path.run,
        "norm-constrained minimisers W_R / R -> W^mm (both parameterisations)",
        20,
        _regpath,
        {"seeds": 4, "restarts": 4, "steps": 300},
    ),
}


@one_blas_thread
def run_experiment(
    name: str, seeds: int | None = None, *, quick: bool = False, progress: bool = False, **options
) -> ExperimentResult:
    """Run experiment ``name`` (a ValueError naming the choices if unknown)."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}")
    exp = EXPERIMENTS[name]
    kwargs = dict(exp.quick) if quick else {}
    kwargs.update(options)
    if seeds is not None:
        if seeds < 1:
            raise ValueError(f"seeds: expected a positive count, got {seeds}")
        kwargs["seeds"] = seeds
    kwargs.setdefault("seeds", exp.default_seeds)
    before = dict(FALLBACKS)
    result = exp.run(progress=progress, **kwargs)
    result.metrics["solver_fallbacks"] = {k: v - before[k] for k, v in FALLBACKS.items()}
    return result


QUICK_CAPTION = (
    "Quick mode runs each experiment at a small size. The checks are calibrated for the paper's "
    "sizes: n/a means too few runs to check here (multi-token needs 20 accepted runs per d), and "
    "a check may fail at quick size and pass at full size (regularization-path's (K,Q) "
    "correlation reaches about 0.96 of the 0.99 it needs). `attnsvm theory all` runs the full "
    "sizes."
)


def summary_table(
    results: dict[str, ExperimentResult], title: str, *, quick: bool = False
) -> Table:
    """One row per experiment; in quick mode a caption says how to read the check counts."""
    table = Table(title=title, caption=QUICK_CAPTION if quick else None)
    for column in ("experiment", "headline", "checks", "seconds"):
        table.add_column(column)
    for name, result in results.items():
        passed = sum(result.checks.values())
        table.add_row(
            name,
            EXPERIMENTS[name].headline(result),
            f"{passed}/{len(result.checks)}" if result.checks else "n/a",
            f"{result.seconds:.1f}",
        )
    return table


def demo_summary(out_dir: str | Path) -> Table:
    """Quick version of every experiment (well under a minute); saves each into out_dir/NAME."""
    start = time.perf_counter()
    results = {}
    for name in EXPERIMENTS:
        results[name] = run_experiment(name, quick=True)
        results[name].save(Path(out_dir) / name)
    return summary_table(
        results,
        f"attnsvm theory lab, quick run ({time.perf_counter() - start:.0f} s; small seed counts)",
        quick=True,
    )
