"""Wolfe's minimum-norm-point algorithm in kernel form: the engine of the Frobenius Att-SVM.

The hard-margin SVM without bias, ``min ||W||_F s.t. <W, f_k> >= 1``, is the minimum-norm
point ``u*`` of the convex hull of the features ``f_k``: ``W = u*/||u*||^2`` and the dual
multipliers are ``lambda = mu/||u*||^2`` for the hull weights ``mu`` (theory.md §2.2).
``||u*|| = 0`` means 0 lies in the hull, and ``mu`` is then the certificate that no ``W`` meets
the margins.

Wolfe (1976) walks through "corrals" (affinely independent subsets whose affine minimum-norm
point lies inside their hull). It is exact and finite, and only touches features through a
:class:`ProductKernel`: inner products with a ``(d, d)`` matrix and blocks of the Gram matrix,
each ``O(n T d + n d^2)`` or ``O(|S| d)``, so the ``d^2``-dimensional features are never built.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import LinAlgError, cholesky
from scipy.linalg.blas import dtrsm, dtrsv

#: Stop when the primal ``W = u/||u||^2`` violates no margin by more than this (relative).
DEFAULT_TOL = 1e-12
#: ``||u|| <= INFEASIBLE_NORM * max ||f_k||`` (unprojected) counts as 0 in the hull (||W|| > 1e9).
INFEASIBLE_NORM = 1e-9
#: Hull weights at or below this are dropped from the corral (Wolfe's zero tolerance).
WEIGHT_TOL = 1e-13
#: A new point whose Cholesky pivot is below this (relative) is affinely dependent on the corral.
PIVOT_TOL = 1e-14
#: Most points added to the corral in one major cycle (the BLAS-3 append reads R once for all).
MAX_BATCH = 64


class ProductKernel:
    """Features ``f_k = (x_{s_k p_k} - x_{s_k m_k}) z_{s_k}^T`` with the product kernel
    ``<f_j, f_k> = <Delta_j, Delta_k> <z_{s_j}, z_{s_k}>``, optionally projected onto the
    orthogonal complement of equality features ``e_l`` built the same way (theory.md §2.8).

    Arrays: ``X (n, T, d)``, ``Z (n, d)``; ``seq, plus, minus`` are ``(N,)`` int arrays.
    """

    def __init__(self, X, Z, seq, plus, minus, equalities=None):
        self.X, self.Z = X, Z
        self.seq, self.plus, self.minus = seq, plus, minus
        self.delta = X[seq, plus] - X[seq, minus]
        self.query = Z[seq]
        self.size = len(seq)
        self.sqnorms = np.einsum("kd,kd->k", self.delta, self.delta) * np.einsum(
            "kd,kd->k", self.query, self.query
        )
        # round-off is relative to the unprojected features: projected ones may all be ~0
        self.scale = float(self.sqnorms.max(initial=0.0))
        self.equalities = None
        if equalities is not None and equalities.size:
            self._set_equalities(equalities)

    def _set_equalities(self, equalities: ProductKernel) -> None:
        gram = equalities.gram()
        evals, evecs = np.linalg.eigh(gram)
        keep = evals > PIVOT_TOL * max(evals.max(), 0.0) if evals.size else evals > 0
        # whitening: columns span the equality features, orthonormal in the Frobenius product
        self._whiten = evecs[:, keep] / np.sqrt(evals[keep])
        self.equalities = equalities
        # h_k = coordinates of the projection of f_k onto span{e_l} in that orthonormal basis
        self._h = self.cross_gram(equalities) @ self._whiten
        self.sqnorms = np.maximum(self.sqnorms - np.einsum("kr,kr->k", self._h, self._h), 0.0)

    def gram(self, rows=None) -> np.ndarray:
        """The (unprojected) Gram matrix of the features ``rows`` (all by default)."""
        rows = slice(None) if rows is None else rows
        delta, query = self.delta[rows], self.query[rows]
        return (delta @ delta.T) * (query @ query.T)

    def cross_gram(self, other: ProductKernel) -> np.ndarray:
        """``<f_k, g_l>`` for the features of ``self`` (rows) and ``other`` (columns)."""
        return (self.delta @ other.delta.T) * (self.query @ other.query.T)

    def block(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """``<f_k, f_l>`` for ``k in rows``, ``l in cols``, projected if there are equalities."""
        block = (self.delta[rows] @ self.delta[cols].T) * (self.query[rows] @ self.query[cols].T)
        if self.equalities is not None:
            block = block - self._h[rows] @ self._h[cols].T
        return block

    def combine(self, rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """The ``(d, d)`` matrix ``P(sum_k weights_k f_k)`` (P: the equality projection)."""
        W = (self.delta[rows] * weights[:, None]).T @ self.query[rows]
        if self.equalities is not None:
            coords = (weights @ self._h[rows]) @ self._whiten.T
            W = W - self.equalities.combine(np.arange(self.equalities.size), coords)
        return W

    def inner(self, W: np.ndarray) -> np.ndarray:
        """``<W, f_k>`` for all k: the margins ``(x_{sp} - x_{sm})^T W z_s``."""
        logits = np.einsum("itd,id->it", self.X, self.Z @ W.T)
        return logits[self.seq, self.plus] - logits[self.seq, self.minus]


class _Cholesky:
    """Upper-triangular ``R`` with ``R^T R = M``, grown by a column and shrunk at any index.

    ``R`` lives in the top-left corner of a C-ordered buffer padded with the identity, so
    ``buffer.T`` is a Fortran-ordered triangle that BLAS (``dtrsv``, ``dtrsm``) solves in place:
    with zero-padded right-hand sides the padding leaves the first ``size`` entries exact.
    (``scipy.linalg.solve_triangular`` on the ``[:s, :s]`` view copies ``s^2`` numbers per call,
    several times the cost of the solve itself.)
    """

    def __init__(self, capacity: int):
        self.buffer = np.eye(capacity)
        self.size = 0

    def _solve(self, b: np.ndarray, transposed: bool) -> np.ndarray:
        """``R^-T b`` (``transposed``) or ``R^-1 b``, for ``b`` of length ``size``."""
        padded = np.zeros(len(self.buffer))
        padded[: self.size] = b
        lower = self.buffer.T  # Fortran-ordered R^T, no copy
        return dtrsv(lower, padded, lower=1, trans=0 if transposed else 1)[: self.size]

    def append_block(self, cols: np.ndarray, block: np.ndarray) -> bool:
        """Append k columns at once (``cols``: s x k cross terms, ``block``: their k x k Gram).

        One BLAS-3 triangular solve reads ``R`` once for all k columns; False (nothing appended)
        if the new points are affinely dependent on the corral or on each other.
        """
        s, k = self.size, block.shape[0]
        padded = np.zeros((len(self.buffer), k), order="F")
        padded[:s] = cols
        cross = dtrsm(1.0, self.buffer.T, padded, lower=1)[:s]
        schur = block - cross.T @ cross
        try:
            corner = cholesky(schur)
        except LinAlgError:
            return False
        if np.min(np.diag(corner)) ** 2 <= PIVOT_TOL * np.max(np.diag(block)):
            return False
        if s + k > len(self.buffer):
            grown = np.eye(max(2 * len(self.buffer), s + k))
            grown[:s, :s] = self.buffer[:s, :s]
            self.buffer = grown
        self.buffer[:s, s : s + k] = cross
        self.buffer[s : s + k, s : s + k] = corner
        self.size = s + k
        return True

    def delete(self, p: int) -> None:
        """Drop row and column ``p`` of ``M``: shift, then a rank-one update of the tail."""
        R, s = self.buffer, self.size
        R[:p, p : s - 1] = R[:p, p + 1 : s]
        x = R[p, p + 1 : s].copy()
        tail = R[p + 1 : s, p + 1 : s].copy()
        for k in range(len(x)):
            r = np.hypot(tail[k, k], x[k])
            c, sn = r / tail[k, k], x[k] / tail[k, k]
            tail[k, k] = r
            tail[k, k + 1 :] = (tail[k, k + 1 :] + sn * x[k + 1 :]) / c
            x[k + 1 :] = c * x[k + 1 :] - sn * tail[k, k + 1 :]
        R[p : s - 1, p : s - 1] = tail
        R[s - 1, :s] = 0.0
        R[:s, s - 1] = 0.0
        R[s - 1, s - 1] = 1.0
        self.size = s - 1

    def solve(self, b: np.ndarray) -> np.ndarray:
        """``M^-1 b``."""
        return self._solve(self._solve(b, transposed=True), transposed=False)


@dataclass
class MinNormPoint:
    """Result of :func:`min_norm_point`: hull weights ``mu`` (length N, sum 1), the corral
    indices, ``u = sum mu_k f_k`` as a ``(d, d)`` matrix, and whether 0 is in the hull."""

    mu: np.ndarray
    corral: np.ndarray
    point: np.ndarray
    zero_in_hull: bool
    iterations: int
    #: set by the caller when another method had to finish the solve
    fallback: str | None = None


def min_norm_point(kernel: ProductKernel, *, tol: float = DEFAULT_TOL) -> MinNormPoint:
    """Wolfe's algorithm: the minimum-norm point of ``conv{f_k}``, exact up to ``tol``.

    Stops when every feature satisfies ``<u, f_k> >= (1 - tol) ||u||^2`` (so ``u/||u||^2`` meets
    every margin to ``tol``) or when ``||u||`` falls below ``INFEASIBLE_NORM * max ||f_k||``.
    Violated points enter in batches of up to ``MAX_BATCH`` (the most violated point of each
    sequence first), so large problems take tens of major cycles instead of one per support
    vector; a batch that brings no progress is followed by Wolfe's single step, which always does.
    """
    scale = kernel.scale
    shift = scale if scale > 0 else 1.0  # M = G + shift 11^T is positive definite on a corral
    first = int(np.argmin(kernel.sqnorms))
    corral = [first]
    mu = np.ones(1)
    chol = _Cholesky(capacity=64)
    chol.append_block(np.zeros((0, 1)), np.array([[kernel.sqnorms[first] + shift]]))
    zero_norm = INFEASIBLE_NORM**2 * scale
    previous = np.inf
    single = True  # the first step, and any step after a batch that made no progress
    retry = False  # a batch was affinely dependent: retry the same point with a single step
    iteration = 0
    while iteration < 100 * kernel.size + 1000:
        iteration += 1
        point = kernel.combine(np.asarray(corral), mu)
        sqnorm = float(np.sum(point * point))
        if sqnorm <= zero_norm:  # 0 in the hull
            break
        if not retry:
            if sqnorm >= previous:
                if single:  # no more progress at the precision limit
                    break
                single = True
            else:
                single = False
        retry = False
        previous = min(previous, sqnorm)
        inner = kernel.inner(point)
        inner[corral] = np.inf
        violated = np.flatnonzero(inner < (1.0 - tol) * sqnorm)
        if not violated.size:
            break
        # the most violated first; a batch of them once the corral is large enough to pay
        batch = 1 if single else int(np.clip(len(corral) // 4, 1, MAX_BATCH))
        violated = violated[np.argsort(inner[violated], kind="stable")]
        if violated.size > batch:  # the most violated constraint of each sequence, then others
            _, first = np.unique(kernel.seq[violated], return_index=True)
            spread = violated[np.sort(first)]
            violated = spread if spread.size >= batch else violated
        new = violated[:batch]
        rows = np.asarray(corral)
        if not chol.append_block(kernel.block(rows, new) + shift, kernel.block(new, new) + shift):
            if len(new) == 1:
                break
            single = retry = True
            continue
        corral.extend(int(j) for j in new)
        mu = np.append(mu, np.zeros(len(new)))
        while True:  # minor cycle: move to the affine minimum, dropping points that leave the hull
            affine = chol.solve(np.ones(len(corral)))
            affine /= affine.sum()
            if affine.min() > WEIGHT_TOL:
                mu = affine
                break
            leaving = (affine <= WEIGHT_TOL) & (mu > affine)
            step = np.min(mu[leaving] / (mu[leaving] - affine[leaving]), initial=1.0)
            mu = mu + step * (affine - mu)
            drop = (mu <= WEIGHT_TOL) & (affine <= WEIGHT_TOL)
            for p in np.flatnonzero(drop)[::-1]:
                chol.delete(int(p))
                del corral[p]
            mu = np.maximum(mu[~drop], 0.0)
            mu /= mu.sum()
    corral_idx = np.asarray(corral)
    point = kernel.combine(corral_idx, mu)
    full = np.zeros(kernel.size)
    full[corral_idx] = mu
    return MinNormPoint(
        mu=full,
        corral=corral_idx,
        point=point,
        zero_in_hull=bool(np.sum(point * point) <= zero_norm),
        iterations=iteration,
    )
