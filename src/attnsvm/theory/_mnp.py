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

At scale (``(n, T, d) = (1000, 50, 64)``: 49,000 features, 4,026 in the final corral) the walk
adds about twice as many points as it keeps, and every departure is a factor update. Two things
keep that cheap: a minor cycle drops every point that leaves at once (one factor update instead
of one per point), and the corral is refactorised with its smallest weights last whenever the
points about to leave sit so deep in the factor that deleting them would cost more
(:class:`~attnsvm.theory._cholesky.CorralFactor`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import LinAlgError
from scipy.linalg.blas import dsyrk

from attnsvm.theory._cholesky import PIVOT_TOL, CorralFactor

#: Stop when the primal ``W = u/||u||^2`` violates no margin by more than this (relative).
DEFAULT_TOL = 1e-12
#: ``||u|| <= INFEASIBLE_NORM * max ||f_k||`` (unprojected) counts as 0 in the hull (||W|| > 1e9).
INFEASIBLE_NORM = 1e-9
#: Hull weights at or below this are dropped from the corral (Wolfe's zero tolerance).
WEIGHT_TOL = 1e-13
#: Most points added to the corral in one major cycle (the BLAS-3 append reads R once for all).
MAX_BATCH = 64
#: The corral's smallest weights, the points most likely to leave next: on the (1000, 50, 64)
#: benchmark instance the 5 % smallest hold 90 % of the next major cycle's departures.
WEAK_FRACTION = 0.05
#: Time of a deletion's QR update of an m-point tail, in Cholesky flops per m^2 (memory-bound
#: row panels against a refactorisation's BLAS-3; tuned on the (1000, 50, 64) instance).
DELETION_FLOPS_PER_TAIL_ENTRY = 80.0
#: Corrals up to this size take Wolfe's exact minor cycle and are never reordered: their
#: deletions cost less than the bookkeeping of the bulk ones.
LARGE_CORRAL = 256


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

    def gram_upper(self, rows: np.ndarray, shift: float) -> np.ndarray:
        """The upper triangle, in Fortran order, of ``block(rows, rows) + shift``: products of
        symmetric rank-d updates (half the flops of :meth:`block`), all that a Cholesky
        factorisation reads; the lower triangle holds garbage."""
        gram = dsyrk(1.0, self.delta[rows])
        gram *= dsyrk(1.0, self.query[rows])
        if self.equalities is not None:
            gram = dsyrk(-1.0, self._h[rows], beta=1.0, c=gram, overwrite_c=1)
        gram += shift
        return gram

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
    corral = np.array([first])
    mu = np.ones(1)
    factor = CorralFactor()
    factor.append_block(np.zeros((0, 1)), np.array([[kernel.sqnorms[first] + shift]]))
    zero_norm = INFEASIBLE_NORM**2 * scale
    previous = np.inf
    single = True  # the first step, and any step after a batch that made no progress
    retry = False  # a batch was affinely dependent: retry the same point with a single step
    iteration = 0
    while iteration < 100 * kernel.size + 1000:
        iteration += 1
        point = kernel.combine(corral, mu)
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
        corral, mu = _weakest_last(kernel, factor, corral, mu, shift)
        if not factor.append_block(
            kernel.block(corral, new) + shift, kernel.block(new, new) + shift
        ):
            if len(new) == 1:
                break
            single = retry = True
            continue
        corral = np.concatenate([corral, new])
        mu = np.append(mu, np.zeros(len(new)))
        corral, mu = _minor_cycle(kernel, factor, corral, mu, shift, sqnorm)
    point = kernel.combine(corral, mu)
    full = np.zeros(kernel.size)
    full[corral] = mu
    return MinNormPoint(
        mu=full,
        corral=corral,
        point=point,
        zero_in_hull=bool(np.sum(point * point) <= zero_norm),
        iterations=iteration,
    )


def _weakest_last(kernel: ProductKernel, factor: CorralFactor, corral, mu, shift: float):
    """``(corral, mu)``, refactorised in the order of decreasing weight when deleting the
    ``WEAK_FRACTION`` smallest weights where they sit would cost more than refactorising: the
    points about to leave then sit at the end, where deletions are cheap."""
    size = len(corral)
    if size <= LARGE_CORRAL or not _refactor_pays(size, _weakest(mu)):
        return corral, mu
    order = np.argsort(-mu, kind="stable")
    try:
        factor.refactor(kernel.gram_upper(corral[order], shift))
    except LinAlgError:  # nearly dependent: keep the incrementally built factor and its order
        return corral, mu
    return corral[order], mu[order]


def _weakest(weights: np.ndarray) -> np.ndarray:
    """Positions of the ``WEAK_FRACTION`` smallest weights: the points most likely to leave."""
    count = max(1, int(WEAK_FRACTION * len(weights)))
    return np.argpartition(weights, count - 1)[:count]


def _refactor_pays(size: int, positions: np.ndarray) -> bool:
    """Whether deleting the points at ``positions`` where they sit costs more than a
    refactorisation (``size^3 / 3`` flops)."""
    tails = (size - positions).astype(np.float64)
    return DELETION_FLOPS_PER_TAIL_ENTRY * float(tails @ tails) > size**3 / 3


def _drop(kernel: ProductKernel, factor: CorralFactor, corral, weights, drop, shift: float):
    """``corral`` without the points ``drop``: deleted from the factor, or, where deleting them
    and the next weakest where they sit would cost more, refactorised without them in the order
    of decreasing weight (a deep departure then pays for the reordering the next ones need)."""
    positions = np.flatnonzero(drop)
    kept = corral[~drop]
    size = len(corral)
    if size > LARGE_CORRAL and _refactor_pays(size, np.union1d(positions, _weakest(weights))):
        order = np.argsort(-weights[~drop], kind="stable")
        try:
            factor.refactor(kernel.gram_upper(kept[order], shift))
            return kept[order]
        except LinAlgError:  # nearly dependent: delete from the incrementally built factor
            pass
    factor.delete(positions)
    return kept


def _minor_cycle(kernel: ProductKernel, factor: CorralFactor, corral, mu, shift: float, bound):
    """Wolfe's minor cycle after a batch entered: ``(corral, mu)`` with ``||u||^2 < bound``.

    Every point of non-positive affine weight leaves at once (one factor update), until the
    affine minimum has positive weights: the points Wolfe's one-at-a-time cycle drops are
    nearly always those of negative weight at its start (648 of 667 on a (500, 50, 64)
    instance). The result is a corral; if its norm is not below the last one, Wolfe's exact
    cycle runs instead, from the start of this one, so every major cycle still strictly
    decreases ``||u||`` and the method stays finite. (Where the corral is too nearly dependent
    to refactorise for that, the result stands, and the caller's progress check decides.)
    """
    if len(corral) <= LARGE_CORRAL:
        return _wolfe_minor_cycle(factor, corral, mu)
    start_corral, start_mu = corral, mu
    while True:
        affine = factor.inverse_ones()
        affine /= affine.sum()
        if affine.min() > WEIGHT_TOL:
            break
        corral = _drop(kernel, factor, corral, affine, affine <= WEIGHT_TOL, shift)
    if len(corral) == len(start_corral):
        return corral, affine
    point = kernel.combine(corral, affine)
    if float(np.sum(point * point)) < bound:
        return corral, affine
    try:
        factor.refactor(kernel.gram_upper(start_corral, shift))
    except LinAlgError:
        return corral, affine
    return _wolfe_minor_cycle(factor, start_corral, start_mu)


def _wolfe_minor_cycle(factor: CorralFactor, corral, mu):
    """Wolfe's exact minor cycle: move to the affine minimum, dropping the points that leave the
    hull on the way, one step at a time."""
    while True:
        affine = factor.inverse_ones()
        affine /= affine.sum()
        if affine.min() > WEIGHT_TOL:
            return corral, affine
        leaving = (affine <= WEIGHT_TOL) & (mu > affine)
        step = np.min(mu[leaving] / (mu[leaving] - affine[leaving]), initial=1.0)
        mu = mu + step * (affine - mu)
        drop = (mu <= WEIGHT_TOL) & (affine <= WEIGHT_TOL)
        if drop.any():
            factor.delete(np.flatnonzero(drop))
            corral = corral[~drop]
            mu = np.maximum(mu[~drop], 0.0)
        mu /= mu.sum()
