"""Solver engineering of the nuclear-norm Att-SVM (theory.md §2.3, §5 item 3).

On the reduced problem ``min ||B||_* s.t. delta_k^T B zeta_k >= 1`` (the features expressed in
orthonormal bases from :func:`orthonormal_basis`), :func:`solve` runs our interior point
(:mod:`attnsvm.theory._sdp`) on a working set of constraints, with Clarabel through cvxpy where
it stalls or where a cvxpy solver is asked for. :func:`kkt` gives the residuals that
:class:`~attnsvm.theory.svm.SVMResult` reports.
"""

from __future__ import annotations

import warnings

import cvxpy as cp
import numpy as np

from attnsvm.theory import _mnp, _sdp
from attnsvm.theory._frobenius import margin_residuals
from attnsvm.theory.tokens import NEIGHBOR_TOL

#: Clarabel settings for "accurate" conic solves (its defaults stop at 1e-8 relative gaps).
CLARABEL_ACCURATE = {
    "tol_gap_abs": 1e-11,
    "tol_gap_rel": 1e-11,
    "tol_feas": 1e-11,
    "tol_ktratio": 1e-9,
    "max_iter": 500,
}
#: Working-set rounds of the interior-point solve before giving up (each adds violated margins).
MAX_ROUNDS = 30
#: Accuracy of the first working set's solve: it only decides which constraints to add (16
#: instead of 22 iterations at (300, 50, 64)).
EXPLORE_TOL = 1e-6
#: Constraints this close to the margin join the working set with the violated ones: the next
#: rounds' additions mostly come from there (within 0.018 of it after the first tight round at
#: (150, 50, 64)); at (300, 50, 64) the rounds went from 5 to 4, with fewer tight ones.
NEAR_MARGIN = 0.05


def kkt(kernel: _mnp.ProductKernel, W, dual, margins) -> dict[str, float]:
    """:func:`~attnsvm.theory._frobenius.margin_residuals`, ``stationarity``
    ``max(0, ||sum lambda_k a_k||_op - 1)`` and the relative duality ``gap``
    ``|sum lambda - ||W||_*| / ||W||_*``."""
    nuclear = float(np.linalg.svd(W, compute_uv=False).sum())
    rows = np.flatnonzero(dual > 0)
    subgradient = kernel.combine(rows, dual[rows])
    return {
        **margin_residuals(dual, margins),
        "stationarity": max(0.0, float(np.linalg.norm(subgradient, 2)) - 1.0),
        "gap": abs(float(dual.sum()) - nuclear) / nuclear,
    }


def orthonormal_basis(rows: np.ndarray) -> np.ndarray:
    """Columns: an orthonormal basis of the span of ``rows`` (relative cut-off 1e-12)."""
    _, sigma, vt = np.linalg.svd(rows, full_matrices=False)
    return vt[sigma > 1e-12 * sigma[0]].T


def solve(delta, zeta, frobenius_margins, solver: str):
    """The reduced problem by ``solver`` (``"ipm"`` or a cvxpy solver name): ``(B, y, info)``.

    ``"ipm"`` falls back to Clarabel on all constraints if the working set does not settle.
    """
    result = _working_set_ipm(delta, zeta, frobenius_margins) if solver == "ipm" else None
    if result is None:  # a cvxpy solver was asked for, or the working set did not settle
        name = "CLARABEL" if solver == "ipm" else solver
        B, dual, status = _cvxpy(delta, zeta, name)
        return B, dual, {"cvxpy_status": status, "cvxpy_solver": name}
    return result


def _solve_options(solver: str) -> dict:
    return dict(CLARABEL_ACCURATE) if solver == "CLARABEL" else {}


def _cvxpy(delta, zeta, solver: str):
    """The reduced nuclear-norm SVM in cvxpy, one vectorised constraint: ``(B, y, status)``."""
    B = cp.Variable((delta.shape[1], zeta.shape[1]))
    constraint = cp.sum(cp.multiply(delta @ B, zeta), axis=1) >= 1
    problem = cp.Problem(cp.Minimize(cp.normNuc(B)), [constraint])
    with warnings.catch_warnings():
        # "optimal_inaccurate": Clarabel stalls near 1e-9 gaps on this SDP; kkt reports the gap
        warnings.simplefilter("ignore", UserWarning)
        problem.solve(solver=solver, **_solve_options(solver))
    if B.value is None:
        raise RuntimeError(
            f"solve_nuclear: {solver} returned {problem.status} on a feasible problem"
        )
    return B.value, np.asarray(constraint.dual_value, dtype=np.float64).reshape(-1), problem.status


def _working_set_ipm(delta, zeta, frobenius_margins):
    """Interior point on a working set of constraints, grown by the violated ones.

    The nuclear and Frobenius solutions share most active constraints, so the working set
    starts with the Frobenius SVM-neighbours; that first solve only decides what to add, so it
    stops at ``EXPLORE_TOL``. Each round adds the violated constraints and those within
    ``NEAR_MARGIN`` of the margin, where the next rounds' would come from; the interior point
    drops the working set's inactive constraints as it identifies them, and a working
    constraint it dropped that ends up violated stays in from the next round on. A round whose
    interior point stalls at the precision limit is solved by Clarabel on the same working set,
    so memory stays that of the working set, never of all constraints. Returns
    ``(B, y, info)``, or None if the working set does not settle.
    """
    working = frobenius_margins <= 1.0 + NEIGHBOR_TOL
    protected = np.zeros(len(delta), dtype=bool)  # dropped once, then violated: keep them
    clarabel_rounds = 0
    for rounds in range(1, MAX_ROUNDS + 1):
        rows = np.flatnonzero(working)
        tight = rounds > 1
        solution = _sdp.solve(
            delta[rows],
            zeta[rows],
            tol=_sdp.TOL if tight else EXPLORE_TOL,
            protected=protected[rows],
        )
        solved = np.zeros(len(delta), dtype=bool)
        if solution.converged:
            B, y_rows = solution.B, solution.y
            solved[rows[solution.kept]] = True
        else:
            B, y_rows, _ = _cvxpy(delta[rows], zeta[rows], "CLARABEL")
            solved[rows] = True
            clarabel_rounds += 1
        margins = np.einsum("kp,pq,kq->k", delta, B, zeta, optimize=True)
        # those the solve kept meet their margins to its tolerance; the others are checked here
        violated = (margins < 1.0 - 1e-9) & ~solved
        if tight and not violated.any():
            y = np.zeros(len(delta))
            y[rows] = y_rows
            info = {
                "rounds": rounds,
                "working_set": len(rows),
                "ipm_iterations": solution.iterations,
            }
            if clarabel_rounds:
                info.update(cvxpy_solver="CLARABEL", clarabel_rounds=clarabel_rounds)
            return B, y, info
        protected |= violated & working
        working |= margins < 1.0 + NEAR_MARGIN
    return None
