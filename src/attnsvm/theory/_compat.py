"""Notebook compatibility: the official code's Att-SVM formulation, for benchmarks and the
notebook-compatible mode of the rank experiment (theory.md §3.5). The exact solvers are in
:mod:`attnsvm.theory.svm`; this one reproduces the notebooks' numbers, solver defaults included.
"""

from __future__ import annotations

import time

import cvxpy as cp
import numpy as np

from attnsvm.theory.svm import SVMResult, _infeasible, _optimal, _selection_kernel, _validated


def solve_official_style(X, Z, alpha, fro: bool = True, solver: str | None = None) -> SVMResult:
    """The official base.py ``W_svm_solver``: one cvxpy constraint per pair, ``cp.norm(W, mode)``,
    cvxpy's default solver unless ``solver`` is given (cvxpy 1.9.3: CLARABEL for ``fro``, SCS for
    the nuclear SDP). For benchmarks and the notebook-compatible mode only."""
    start = time.perf_counter()
    X, Z, alpha = _validated(X, Z, alpha)
    n, T, d = X.shape
    W = cp.Variable((d, d))
    constraints = []
    for i in range(n):
        for j in range(T):
            if j == alpha[i]:
                continue
            constraints += [
                ((X[i, j] - X[i, alpha[i]]).reshape(1, -1) @ W @ Z[i].reshape(-1, 1)) <= -1
            ]
    norm = "fro" if fro else "nuc"
    problem = cp.Problem(cp.Minimize(cp.norm(W, norm)), constraints)
    problem.solve() if solver is None else problem.solve(solver=solver)
    name, info = f"official-{problem.solver_stats.solver_name}", {"cvxpy_status": problem.status}
    if W.value is None:
        return _infeasible(None, name, start, info)
    kernel = _selection_kernel(X, Z, alpha)
    dual = np.array([float(np.squeeze(c.dual_value)) for c in constraints])
    if fro:  # cvxpy's multipliers belong to ||W||_F; the dual of 1/2 ||W||^2 is ||W|| times them
        dual = dual * np.linalg.norm(W.value)
    return _optimal(kernel, W.value, dual, kernel.inner(W.value), norm, name, start, info)
