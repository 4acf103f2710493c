"""The Cholesky factor of Wolfe's corral (:mod:`attnsvm.theory._mnp`): grown at the end, shrunk
anywhere, refactorised in a new order.

Wolfe's method appends the points that enter the corral and deletes the ones that leave it. An
append costs one triangular solve against the whole factor. A deletion at position ``p`` costs a
QR update of the ``(size - p)``-square tail, so deleting the corral's oldest points (the ones that
leave most often) is as dear as a refactorisation; :meth:`CorralFactor.refactor` lets the caller
move the points about to leave to the end first.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.linalg import LinAlgError, cholesky
from scipy.linalg.blas import dtrsm, dtrsv
from scipy.linalg.lapack import dpotrf, dtpqrt

#: A new point whose Cholesky pivot is below this (relative) is affinely dependent on the corral.
PIVOT_TOL = 1e-14
#: Spare rows and columns of the buffer, so that appends seldom reallocate it.
SLACK = 128
#: Panel height of LAPACK's triangular-pentagonal QR in deletions: panels of rows keep its
#: accesses to the column-major factor contiguous (a height of 1 is 2-8x slower, measured).
DELETE_PANEL = 16


class CorralFactor:
    """Upper-triangular ``R`` with ``R^T R = M`` (a corral's shifted Gram matrix), and
    ``R^-T 1``: Wolfe's method only ever solves ``M x = 1``, so each update extends or repairs
    the forward half of that solve where it changed, and :meth:`inverse_ones` is one
    back-substitution.

    ``R`` lives in the top-left corner of a Fortran-ordered buffer padded with the identity, so
    BLAS solves the whole buffer in place: with zero-padded right-hand sides the padding leaves
    the first ``size`` entries exact. (A ``[:size, :size]`` view is not contiguous and would be
    copied on every call, several times the cost of the solve itself.) The padding costs solves
    ``(capacity / size)^2``, so the buffer shrinks again when a deletion leaves it oversized.
    """

    def __init__(self, capacity: int = SLACK):
        self.buffer = np.eye(capacity, order="F")
        self.size = 0
        self.forward = np.zeros(0)  # R^-T 1

    def _reallocate(self, capacity: int) -> None:
        size = self.size
        buffer = np.zeros((capacity, capacity), order="F")
        buffer[np.arange(size, capacity), np.arange(size, capacity)] = 1.0
        buffer[:size, :size] = self.buffer[:size, :size]
        self.buffer = buffer

    def inverse_ones(self) -> np.ndarray:
        """``M^-1 1``: the affine weights of the corral's minimum-norm point, up to scale."""
        padded = np.zeros(len(self.buffer))
        padded[: self.size] = self.forward
        return dtrsv(self.buffer, padded, lower=0, trans=0, overwrite_x=1)[: self.size]

    def append_block(self, cols: np.ndarray, block: np.ndarray) -> bool:
        """Append k points at once (``cols``: their ``size x k`` cross terms, ``block``: their
        ``k x k`` Gram matrix): one BLAS-3 solve reads ``R`` once for all of them. False (nothing
        appended) if they are affinely dependent on the corral or on each other."""
        size, k = self.size, block.shape[0]
        if size + k > len(self.buffer):
            self._reallocate(size + k + SLACK)
        padded = np.zeros((len(self.buffer), k), order="F")
        padded[:size] = cols
        cross = dtrsm(1.0, self.buffer, padded, lower=0, trans_a=1, overwrite_b=1)[:size]
        try:
            corner = cholesky(block - cross.T @ cross)
        except LinAlgError:
            return False
        if np.min(np.diag(corner)) ** 2 <= PIVOT_TOL * np.max(np.diag(block)):
            return False
        self.buffer[:size, size : size + k] = cross
        self.buffer[size : size + k, size : size + k] = corner
        extension = 1.0 - cross.T @ self.forward
        self.forward = np.concatenate([self.forward, dtrsv(corner, extension, lower=0, trans=1)])
        self.size = size + k
        return True

    def delete(self, positions: np.ndarray) -> None:
        """Drop the rows and columns ``positions`` (sorted, distinct) of ``M`` at once.

        With ``K`` the kept points after the first deleted one and ``P`` the deleted ones,
        ``M_KK = R_KK^T R_KK + R_PK^T R_PK``: the tail's new factor is the triangle of the QR of
        ``[R_KK; R_PK]``, which LAPACK's ``dtpqrt`` computes in ``2 |P| |K|^2`` flops. Rows above
        the first deleted point only lose columns. The copies, not the flops, dominate: about
        ``4 |K|^2 + first |K|`` nanoseconds (measured), so one call for all points beats one each.
        """
        R, size = self.buffer, self.size
        first = int(positions[0])
        ends = np.append(positions, size)
        segments = [(int(a) + 1, int(b)) for a, b in itertools.pairwise(ends) if b > a + 1]
        kept = sum(b - a for a, b in segments)
        if kept:
            tail = np.concatenate([np.arange(a, b) for a, b in segments])
            rows = np.asfortranarray(R[np.ix_(positions, tail)])
            # the kept columns of the tail, then their kept rows: contiguous slice copies
            columns = np.empty((size - first, kept), order="F")
            triangle = np.empty((kept, kept), order="F")
            # the forward solve's tail needs R[:first, tail]^T forward[:first]: taken from each
            # segment while it is in cache for the shift, not in another pass over all of them
            above = np.empty(kept)
            start = 0
            for a, b in segments:
                columns[:, start : start + b - a] = R[first:size, a:b]
                above[start : start + b - a] = R[:first, a:b].T @ self.forward[:first]
                R[:first, first + start : first + start + b - a] = R[:first, a:b]
                start += b - a
            start = 0
            for a, b in segments:
                triangle[start : start + b - a] = columns[a - first : b - first]
                start += b - a
            panel = min(DELETE_PANEL, kept)
            triangle = dtpqrt(0, panel, triangle, rows, overwrite_a=1, overwrite_b=1)[0]
            R[first : first + kept, first : first + kept] = triangle
            self.forward = np.concatenate(
                [self.forward[:first], dtrsv(triangle, 1.0 - above, lower=0, trans=1)]
            )
        else:
            self.forward = self.forward[:first]
        end = first + kept
        R[:size, end:size] = 0.0
        R[end:size, :end] = 0.0
        R[np.arange(end, size), np.arange(end, size)] = 1.0
        self.size = end
        if len(R) > end + 2 * SLACK:
            self._reallocate(end + SLACK)

    def refactor(self, M: np.ndarray) -> None:
        """Replace the factor by the Cholesky factor of ``M`` (the corral in a new order; only
        its upper triangle is read, and overwritten); a LinAlgError, with the factor unchanged,
        if ``M`` is not numerically positive definite."""
        size = len(M)
        triangle, info = dpotrf(M, lower=0, clean=1, overwrite_a=1)
        if info:
            raise LinAlgError(f"the corral's Gram matrix is not positive definite (pivot {info})")
        if not size <= len(self.buffer) <= size + 2 * SLACK:
            self.buffer = np.zeros((size + SLACK, size + SLACK), order="F")
        R = self.buffer
        R[:size, :size] = triangle
        R[:size, size:] = 0.0
        R[size:, :] = 0.0
        R[np.arange(size, len(R)), np.arange(size, len(R))] = 1.0
        self.size = size
        padded = np.ones(len(R))
        padded[size:] = 0.0
        self.forward = dtrsv(R, padded, lower=0, trans=1)[:size]
