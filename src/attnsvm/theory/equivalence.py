"""The SVM-equivalence of theory.md §2.8 (the official base_nonlinear.py semantics).

For softmax probabilities ``probs`` of a trained attention, the selected sets
``O_i = {t : probs_it >= threshold}`` split ``W`` into a direction ``W_dir = W^mm(O)`` (the
Att-SVM with inequalities between selected and masked tokens and equalities among the selected
ones) and a finite part ``W_fin`` reproducing the log-ratios inside each ``O_i``. The direction
is the Frobenius solve of :mod:`attnsvm.theory._frobenius` on the features projected onto the
equalities' orthogonal complement.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from attnsvm.theory import _frobenius, _mnp
from attnsvm.theory._threads import one_blas_thread
from attnsvm.theory.svm import SVMResult, _infeasible
from attnsvm.theory.tokens import check_matrix, check_tokens


@dataclass
class SVMEquivalence:
    """The SVM-equivalence of theory.md §2.8 for the selected sets ``O`` (``(n, T)`` bool).

    ``W_dir = W^mm(O)``, ``W_fin`` the min-norm matrix reproducing the log-ratios inside each
    ``O_i``, ``R`` the least-squares scale and ``W_eq = W_fin + R W_dir``. ``direction`` is the
    solve of ``W^mm(O)`` (its dual/certificate follow :func:`equivalence_pairs`).
    """

    status: str
    O: np.ndarray
    W_dir: np.ndarray | None
    W_fin: np.ndarray | None
    R: float
    W_eq: np.ndarray | None
    direction: SVMResult


def equivalence_pairs(O: np.ndarray):
    """Constraint index arrays of §2.8: inequalities ``(i, t in O_i, tau not in O_i)`` row-major,
    and equalities ``(i, t, t0)`` for ``t in O_i`` after the first selected token ``t0``."""
    T = O.shape[1]
    i, t, tau = np.nonzero(O[:, :, None] & ~O[:, None, :])
    first = np.argmax(O, axis=1)
    eq_i, eq_t = np.nonzero(O & (np.arange(T)[None, :] != first[:, None]))
    return (i, t, tau), (eq_i, eq_t, first[eq_i])


@one_blas_thread
def solve_svm_equivalence(X, Z, probs, W_gd, *, threshold: float = 1e-3) -> SVMEquivalence:
    """SVM-equivalence (theory.md §2.8, base_nonlinear.py semantics) for softmax ``probs``.

    ``O_i = {t : probs_it >= threshold}``. Infeasible ``W^mm(O)`` or inconsistent log-ratio
    equalities give ``status="infeasible"``. A ValueError if no token falls below the threshold
    (the direction problem would have no inequality) or some sequence selects none.
    """
    start = time.perf_counter()
    X, Z = check_tokens(X, Z)
    n, T, d = X.shape
    probs = np.asarray(probs, dtype=np.float64)
    if probs.shape != (n, T) or not np.all(np.isfinite(probs)) or probs.min() < 0:
        raise ValueError(
            f"probs: expected non-negative finite {(n, T)} probabilities, got shape {probs.shape}"
        )
    W_gd = check_matrix(W_gd, d, "W_gd")
    if not 0 < threshold < 1:
        raise ValueError(f"threshold: expected a value in (0, 1), got {threshold}")
    O = probs >= threshold
    if not O.any(axis=1).all():
        raise ValueError(
            f"probs: sequence {int(np.argmin(O.any(axis=1)))} has no token with "
            f"probability >= threshold {threshold}"
        )
    if O.all():
        raise ValueError(
            f"probs: no token has probability below threshold {threshold}; the "
            "SVM-equivalence needs at least one masked token"
        )
    (i, t, tau), (eq_i, eq_t, eq_ref) = equivalence_pairs(O)
    equalities = _mnp.ProductKernel(X, Z, eq_i, eq_t, eq_ref)
    kernel = _mnp.ProductKernel(X, Z, i, t, tau, equalities=equalities)
    solution, mnp = _frobenius.solve_kernel_svm(kernel, 1e-12)
    failed = SVMEquivalence(
        "infeasible", O, None, None, float("nan"), None, _infeasible(mnp.mu, "wolfe-mnp", start)
    )
    if solution is None:
        return failed
    W_dir, dual, margins = solution
    W_fin = np.zeros((d, d))
    if equalities.size:
        log_ratio = np.log(probs[eq_i, eq_t] / probs[eq_i, eq_ref])
        coords = np.linalg.lstsq(equalities.gram(), log_ratio, rcond=None)[0]
        W_fin = equalities.combine(np.arange(equalities.size), coords)
        mismatch = np.max(np.abs(equalities.inner(W_fin) - log_ratio))
        if mismatch > 1e-8 * (1 + np.abs(log_ratio).max()):  # log-ratios no W can reproduce
            return failed
    R = float(np.sum((W_gd - W_fin) * W_dir) / np.sum(W_dir * W_dir))
    kkt = _frobenius.kkt(kernel, W_dir, dual, margins)
    kkt["equality"] = float(np.max(np.abs(equalities.inner(W_dir)), initial=0.0))
    direction = SVMResult(
        status="optimal",
        W=W_dir,
        objective=float(np.linalg.norm(W_dir)),
        dual=dual,
        support=None,
        kkt=kkt,
        certificate=None,
        solver="wolfe-mnp",
        seconds=time.perf_counter() - start,
        info={"iterations": mnp.iterations},
    )
    return SVMEquivalence("optimal", O, W_dir, W_fin, R, W_fin + R * W_dir, direction)
