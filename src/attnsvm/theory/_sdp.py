"""A primal-dual interior-point method for the nuclear-norm Att-SVM (theory.md §2.3, §5 item 3).

    min ||B||_*  s.t.  delta_k^T B zeta_k >= 1   (k = 1..N;  B is p x q)

is the SDP  min 1/2 tr Y  s.t.  <Y, F_k> - x_k = 1,  Y = [[P, B], [B^T, Q]] >= 0,  x >= 0, with
``F_k = 1/2 (u_k v_k^T + v_k u_k^T)``, ``u_k = (delta_k, 0)``, ``v_k = (0, zeta_k)``. Its dual is
``max 1^T y  s.t.  ||sum_k y_k delta_k zeta_k^T||_op <= 1, y >= 0``: ``y`` are the multipliers.

Every ``F_k`` has rank two, so the HKM Schur matrix ``M_kl = <F_k, Y F_l S^-1> + delta_kl x_k/s_k``
is a sum of four Hadamard products of ``N x N`` matrices built from ``(N x p)`` and ``(N x q)``
blocks, ``O(N^2 (p + q))`` work, instead of the ``(p + q)^2``-sized dense blocks a generic conic
solver factors. Mehrotra predictor-corrector steps, infeasible start, as in SDPT3.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve, eigvalsh
from scipy.linalg.blas import dsyrk

#: Stop when the relative primal and dual infeasibilities and the relative gap are below this.
TOL = 1e-10
MAX_ITER = 100
STEP_FRACTION = 0.98
#: A constraint with slack ``x_k`` above ``INACTIVE_SLACK`` and multiplier below
#: ``INACTIVE_RATIO x_k`` leaves the problem as inactive, and the Schur system of the remaining
#: iterations shrinks to the others: at (150, 50, 64) the rule picked 912 of the 941 inactive
#: constraints by the 16th of 24 iterations, and no active one (a looser 1e-3 / 1e-3 rule
#: dropped an active one at (100, 50, 64), which cost the working set a round).
INACTIVE_SLACK = 1e-2
INACTIVE_RATIO = 1e-4


@dataclass
class SDPSolution:
    """``B`` (p x q), the multipliers ``y`` (N,), the iterations, the final residuals, and
    ``kept``: the constraints still in the problem at the end (the others left it as inactive,
    with multiplier 0; a caller checks their margins)."""

    B: np.ndarray
    y: np.ndarray
    iterations: int
    residuals: dict[str, float]
    converged: bool
    kept: np.ndarray


def _max_step(X: np.ndarray, dX: np.ndarray) -> float:
    """The largest ``a <= 1`` with ``X + a dX`` positive semidefinite (X positive definite)."""
    L = np.linalg.cholesky(X)
    Linv = np.linalg.inv(L)
    smallest = eigvalsh(Linv @ dX @ Linv.T, subset_by_index=[0, 0])[0]
    return 1.0 if smallest >= 0 else min(1.0, -1.0 / smallest)


def _max_step_lp(x: np.ndarray, dx: np.ndarray) -> float:
    neg = dx < 0
    return min(1.0, float(np.min(-x[neg] / dx[neg]))) if neg.any() else 1.0


class _Operator:
    """The constraint map ``A(Y, x)_k = delta_k^T Y_12 zeta_k - x_k`` and its adjoint."""

    def __init__(self, delta: np.ndarray, zeta: np.ndarray):
        self.delta, self.zeta = delta, zeta
        self.p, self.q = delta.shape[1], zeta.shape[1]

    def apply(self, Y: np.ndarray, x: np.ndarray) -> np.ndarray:
        Y12 = 0.5 * (Y[: self.p, self.p :] + Y[self.p :, : self.p].T)
        return np.einsum("kp,pq,kq->k", self.delta, Y12, self.zeta, optimize=True) - x

    def adjoint(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``sum_k y_k A_k``: the SDP block ``1/2 [[0, M], [M^T, 0]]`` and the LP block ``-y``."""
        M = (self.delta * y[:, None]).T @ self.zeta
        block = np.zeros((self.p + self.q, self.p + self.q))
        block[: self.p, self.p :] = 0.5 * M
        block[self.p :, : self.p] = 0.5 * M.T
        return block, -y

    def schur(self, Y: np.ndarray, Sinv: np.ndarray, x: np.ndarray, s: np.ndarray) -> np.ndarray:
        """``M_kl = <F_k, Y F_l S^-1> + delta_kl x_k / s_k`` (HKM direction), upper triangle.

        ``M = 1/4 (yvv o tuu + yuu o tvv + C + C^T)`` with ``C = yuv o tuv^T`` and ``yuu``,
        ``tuu``, ... the blocks of ``Y`` and ``S^-1`` seen through ``delta`` and ``zeta``. The
        four symmetric ones are rank-p updates, half the flops of general products, and only the
        upper triangle, all the Cholesky factorisation reads, is formed; products in place.
        """
        p, D, E = self.p, self.delta, self.zeta
        M = _congruence(E, Y[p:, p:])
        M *= _congruence(D, Sinv[:p, :p])
        cross = _congruence(D, Y[:p, :p])
        cross *= _congruence(E, Sinv[p:, p:])
        M += cross
        cross = (D @ Y[:p, p:]) @ E.T
        cross *= (E @ Sinv[p:, :p]) @ D.T
        M += cross
        M += cross.T
        M *= 0.25
        M[np.diag_indices_from(M)] += x / s
        return M


def _congruence(rows: np.ndarray, A: np.ndarray) -> np.ndarray:
    """The upper triangle of ``rows A rows^T`` for symmetric positive semidefinite ``A``:
    ``(rows L)(rows L)^T`` with ``L L^T = A`` from its eigendecomposition (``A`` may be
    numerically singular: the iterates lose rank as they converge to a low-rank solution)."""
    evals, evecs = np.linalg.eigh(A)
    return dsyrk(1.0, rows @ (evecs * np.sqrt(np.maximum(evals, 0.0))))


class _Newton:
    """One linearisation at ``(Y, x, y, S, s)``: the factored Schur matrix and the residuals."""

    def __init__(self, op: _Operator, Y, x, S, s, Sinv, rp, Rd, rd):
        self.op, self.Y, self.x, self.S, self.s, self.Sinv = op, Y, x, S, s, Sinv
        self.rp, self.Rd, self.rd = rp, Rd, rd
        self.factor = cho_factor(op.schur(Y, Sinv, x, s))

    def direction(self, H, h):
        """Step with ``dY + Y dS S^-1 = H`` (SDP block) and ``dx + x ds / s = h`` (LP block)."""
        op, Y, x, s, Sinv = self.op, self.Y, self.x, self.s, self.Sinv
        G = H - Y @ self.Rd @ Sinv
        g = h - x * self.rd / s
        dy = cho_solve(self.factor, self.rp - op.apply(0.5 * (G + G.T), g))
        AtdY, Atdy = op.adjoint(dy)
        dS, ds = self.Rd - AtdY, self.rd - Atdy
        dY = H - Y @ dS @ Sinv
        return 0.5 * (dY + dY.T), h - x * ds / s, dy, dS, ds

    def steps(self, dY, dx, dS, ds) -> tuple[float, float]:
        """The largest primal and dual step lengths (at most 1) that stay semidefinite."""
        primal = min(_max_step(self.Y, dY), _max_step_lp(self.x, dx))
        dual = min(_max_step(self.S, dS), _max_step_lp(self.s, ds))
        return primal, dual


def _iterate(op: _Operator, Y, x, y, S, s, rp, Rd, rd, mu):
    """One Mehrotra predictor-corrector step; raises LinAlgError at the precision limit."""
    m, N = len(Y), len(x)
    Sinv = np.linalg.inv(S)
    Sinv = 0.5 * (Sinv + Sinv.T)
    newton = _Newton(op, Y, x, S, s, Sinv, rp, Rd, rd)
    # predictor (affine scaling), then Mehrotra's centring and second-order correction
    dY, dx, dy, dS, ds = newton.direction(-Y, -x)
    ap, ad = newton.steps(dY, dx, dS, ds)
    mu_aff = (np.sum((Y + ap * dY) * (S + ad * dS)) + (x + ap * dx) @ (s + ad * ds)) / (m + N)
    sigma = min(1.0, (mu_aff / mu) ** 3)
    H = sigma * mu * Sinv - Y - dY @ dS @ Sinv
    h = sigma * mu / s - x - dx * ds / s
    dY, dx, dy, dS, ds = newton.direction(H, h)
    ap, ad = newton.steps(dY, dx, dS, ds)
    ap, ad = min(1.0, STEP_FRACTION * ap), min(1.0, STEP_FRACTION * ad)
    Y, x = Y + ap * dY, x + ap * dx
    y, S, s = y + ad * dy, S + ad * dS, s + ad * ds
    return 0.5 * (Y + Y.T), x, y, 0.5 * (S + S.T), s


def solve(
    delta: np.ndarray, zeta: np.ndarray, *, tol: float = TOL, protected: np.ndarray | None = None
) -> SDPSolution:
    """The nuclear-norm SVM on the reduced data ``delta (N, p)``, ``zeta (N, q)``; the
    constraints of the ``protected`` mask never leave the problem as inactive."""
    op = _Operator(delta, zeta)
    N, m = len(delta), op.p + op.q
    kept = np.arange(N)
    protected = np.zeros(N, dtype=bool) if protected is None else protected
    C = 0.5 * np.eye(m)
    # start: Y a multiple of I, the dual strictly feasible at a small y (||M(y)||_op = 1/4)
    scale = np.linalg.norm(op.adjoint(np.ones(N))[0], 2) * 2.0
    Y, x = np.eye(m) * max(1.0, N / scale), np.ones(N)
    y = np.full(N, 0.5 / scale)
    S, s = C - op.adjoint(y)[0], y.copy()
    converged, residuals, iteration = False, {}, 0
    while iteration < MAX_ITER:
        iteration += 1
        AtY, Aty = op.adjoint(y)
        rp = 1.0 - op.apply(Y, x)
        Rd, rd = C - AtY - S, -Aty - s  # dual residual: SDP block and LP block (0 - (-y) - s)
        pobj, dobj = 0.5 * np.trace(Y), float(y.sum())
        mu = (np.sum(Y * S) + x @ s) / (m + N)
        residuals = {
            "primal": float(np.linalg.norm(rp)) / (1.0 + np.sqrt(N)),
            "dual": float(np.sqrt(np.sum(Rd * Rd) + rd @ rd)) / (1.0 + np.sqrt(m)),
            "gap": abs(pobj - dobj) / (1.0 + abs(pobj) + abs(dobj)),
        }
        if max(residuals.values()) <= tol:
            converged = True
            break
        try:
            Y, x, y, S, s = _iterate(op, Y, x, y, S, s, rp, Rd, rd, mu)
        except LinAlgError:
            # Y or S (or the Schur matrix) lost definiteness in floating point: the iterates
            # stalled at the precision limit; return them unconverged (callers fall back)
            break
        inactive = (x > INACTIVE_SLACK) & (s < INACTIVE_RATIO * x) & ~protected
        if inactive.any() and not inactive.all():
            active = ~inactive
            kept, x, y, s = kept[active], x[active], y[active], s[active]
            protected = protected[active]
            op = _Operator(op.delta[active], op.zeta[active])
            N = len(kept)
    B = 0.5 * (Y[: op.p, op.p :] + Y[op.p :, : op.p].T)
    multipliers = np.zeros(len(delta))
    multipliers[kept] = y
    return SDPSolution(
        B=B,
        y=multipliers,
        iterations=iteration,
        residuals=residuals,
        converged=converged,
        kept=kept,
    )
