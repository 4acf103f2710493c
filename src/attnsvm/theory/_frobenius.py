"""Solver engineering of the Frobenius Att-SVM (theory.md §2.2): the kernel hard-margin SVM.

:func:`solve_kernel_svm` runs Wolfe's min-norm point (:mod:`attnsvm.theory._mnp`) on a
:class:`~attnsvm.theory._mnp.ProductKernel`, polishes its multipliers by solving the equality
system on the support exactly, falls back to Lawson & Hanson's least-distance NNLS where Wolfe's
method stalls, and restores exact feasibility by scaling. :func:`kkt` gives the residuals that
:class:`~attnsvm.theory.svm.SVMResult` reports. The same solve decides feasibility for the
nuclear-norm problem and finds the direction of the SVM-equivalence (§2.8).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve
from scipy.optimize import nnls

from attnsvm.theory import _mnp

#: Working-set rounds of the least-distance fallback (each adds every violated constraint).
LDP_MAX_ROUNDS = 50


def margin_residuals(dual, margins) -> dict[str, float]:
    """The residuals both norms share: ``primal`` (max margin violation), ``dual`` (max negative
    multiplier), ``complementarity`` (max ``lambda_k |margin_k - 1|`` over ``max(1, max lambda)``).
    """
    return {
        "primal": max(0.0, 1.0 - float(margins.min())),
        "dual": max(0.0, -float(dual.min())),
        "complementarity": float(np.max(np.abs(dual * (margins - 1.0))))
        / max(1.0, float(dual.max())),
    }


def kkt(kernel: _mnp.ProductKernel, W, dual, margins) -> dict[str, float]:
    """:func:`margin_residuals`, ``stationarity`` ``||W - sum lambda_k a_k|| / ||W||`` and the
    relative duality ``gap`` ``|sum lambda - ||W||^2| / ||W||^2``."""
    sqnorm = float(np.sum(W * W))
    rows = np.flatnonzero(dual)
    residual = W - kernel.combine(rows, dual[rows])
    return {
        **margin_residuals(dual, margins),
        "stationarity": float(np.linalg.norm(residual)) / max(float(np.sqrt(sqnorm)), 1e-300),
        "gap": abs(float(dual.sum()) - sqnorm) / max(sqnorm, 1e-300),
    }


def _polish(kernel: _mnp.ProductKernel, rows: np.ndarray) -> np.ndarray | None:
    """Multipliers with every support margin exactly 1: solve ``G_SS lambda_S = 1``."""
    try:
        factor = cho_factor(kernel.block(rows, rows))
    except LinAlgError:
        return None
    lam = cho_solve(factor, np.ones(len(rows)))
    W = kernel.combine(rows, lam)
    lam = lam + cho_solve(factor, 1.0 - kernel.inner(W)[rows])  # one refinement step
    return lam if lam.min() > 0 else None


def _least_distance(kernel: _mnp.ProductKernel, rows: np.ndarray) -> np.ndarray | None:
    """Dual multipliers of the hard-margin SVM by Lawson & Hanson's least-distance programming.

    ``min ||W|| s.t. <W, f_k> >= 1`` is the NNLS problem ``min ||E u - e||, u >= 0`` with
    ``E = [F; 1^T]``, ``e = (0, ..., 0, 1)``, and ``lambda = u / (1 - sum u)``; ``F`` enters only
    through a square root of the working set's Gram matrix. The QR-based NNLS works with that
    root, whose condition number is the square root of the Gram matrix's, so it reaches the
    solutions where Wolfe's method stalls on nearly dependent features. Solved on a working set
    grown by every violated constraint; None if the hull holds 0 (``sum u = 1``).
    """
    working = np.zeros(kernel.size, dtype=bool)
    working[rows] = True
    for _ in range(LDP_MAX_ROUNDS):
        idx = np.flatnonzero(working)
        evals, evecs = np.linalg.eigh(kernel.block(idx, idx))
        keep = evals > _mnp.PIVOT_TOL * max(float(evals.max()), 0.0)
        root = np.sqrt(evals[keep])[:, None] * evecs[:, keep].T
        E = np.vstack([root, np.ones((1, len(idx)))])
        target = np.zeros(len(E))
        target[-1] = 1.0
        u, _ = nnls(E, target, maxiter=50 * len(idx))
        slack = 1.0 - float(u.sum())
        if slack <= _mnp.INFEASIBLE_NORM:
            return None
        lam = np.zeros(kernel.size)
        lam[idx] = u / slack
        margins = kernel.inner(kernel.combine(idx, lam[idx]))
        violated = (margins < 1.0 - 1e-12) & ~working
        if not violated.any():
            return lam
        working |= violated
    return None


def solve_kernel_svm(kernel: _mnp.ProductKernel, tol: float):
    """Hard-margin SVM on the kernel's features: ``((W, dual, margins), mnp)``, or
    ``(None, mnp)`` with the certificate ``mnp.mu`` if 0 lies in the features' hull.

    Wolfe's min-norm point first; where it stalls at the precision limit short of the margins,
    Lawson & Hanson's least-distance NNLS finishes from its corral (``mnp.fallback``).
    """
    mnp = _mnp.min_norm_point(kernel, tol=tol)
    if mnp.zero_in_hull:
        return None, mnp
    sqnorm = float(np.sum(mnp.point * mnp.point))
    rows = mnp.corral
    lam = _polish(kernel, rows)
    if lam is None:
        lam = mnp.mu[rows] / sqnorm
    W = kernel.combine(rows, lam)
    margins = kernel.inner(W)
    smallest = float(margins.min())
    dual = np.zeros(kernel.size)
    dual[rows] = lam
    if smallest < 1.0 - 1e-9:
        ldp = _least_distance(kernel, rows)
        if ldp is None:
            raise RuntimeError(
                f"min_norm_point stopped after {mnp.iterations} iterations with a margin of "
                f"{smallest:.9f} and the least-distance fallback failed; please report this "
                "instance"
            )
        support = np.flatnonzero(ldp > 0)
        polished = _polish(kernel, support)
        dual = np.zeros(kernel.size)
        dual[support] = ldp[support] if polished is None else polished
        W = kernel.combine(support, dual[support])
        margins = kernel.inner(W)
        smallest = float(margins.min())
        mnp.fallback = "least-distance NNLS"
    if smallest < 1.0 - 1e-6:
        raise RuntimeError(
            f"the Frobenius Att-SVM solve ended with a margin of {smallest:.3e} after "
            f"{mnp.iterations} min-norm-point iterations; please report this instance"
        )
    if smallest < 1.0:  # restore exact feasibility; changes ||W|| by a factor 1 + O(tol)
        W, dual, margins = W / smallest, dual / smallest, margins / smallest
    return (W, dual, margins), mnp
