"""The Att-SVM problems (theory.md §2.2, §2.3): their definition, their result, their solvers.

For selected indices ``alpha`` the constraints are, for every sequence ``i`` and token
``t != alpha_i`` (row-major over ``(i, t)``; :func:`pair_indices` gives that order),

    <W, a_it> >= 1,   a_it = (x_{i,alpha_i} - x_it) z_i^T,

and ``W^mm`` minimises ``||W||_F`` (:func:`solve_frobenius`) or ``||W||_*``
(:func:`solve_nuclear`) over them. :func:`solve_frobenius_cvxpy` states the Frobenius problem as
written: the definition that the exact solvers are checked against. The Frobenius problem is
solved in its dual with the product kernel ``<a_k, a_l> = <Delta_k, Delta_l> <z_k, z_l>`` by
Wolfe's min-norm-point algorithm (:mod:`attnsvm.theory._frobenius`); its dual vector ``lambda``
gives ``W = sum_k lambda_k a_k``. Both problems share the constraint set, so the Frobenius solve
decides feasibility for both, and an infeasible problem comes back with ``status="infeasible"``
and a certificate, never solved. The nuclear-norm engineering lives in
:mod:`attnsvm.theory._nuclear`, the SVM-equivalence (§2.8) in :mod:`attnsvm.theory.equivalence`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import cvxpy as cp
import numpy as np

from attnsvm.theory import _frobenius, _mnp, _nuclear
from attnsvm.theory._nuclear import CLARABEL_ACCURATE
from attnsvm.theory._threads import one_blas_thread
from attnsvm.theory.tokens import NEIGHBOR_TOL, check_indices, check_tokens

#: Relative rank tolerance: singular values above ``RANK_RTOL * sigma_1`` count (theory.md §3.5).
RANK_RTOL = 1e-6


@one_blas_thread
def solve_frobenius_cvxpy(X, Z, alpha) -> SVMResult:
    """The Att-SVM as written: ``min ||W||_F s.t. (x_{i,alpha_i} - x_it)^T W z_i >= 1`` for all
    ``i`` and ``t != alpha_i``. The reference for :func:`solve_frobenius`: the primal QP
    (``1/2 ||W||_F^2``, the same minimiser) in cvxpy, one vectorised constraint, Clarabel."""
    start = time.perf_counter()
    X, Z, alpha = _validated(X, Z, alpha)
    kernel = _selection_kernel(X, Z, alpha)
    d = X.shape[2]
    W = cp.Variable((d, d))
    constraint = _features(kernel) @ cp.vec(W, order="C") >= 1
    problem = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(W)), [constraint])
    problem.solve(solver="CLARABEL", **CLARABEL_ACCURATE)
    solver, info = "cvxpy-CLARABEL", {"cvxpy_status": problem.status}
    if W.value is None:
        return _infeasible(None, solver, start, info)
    dual = np.asarray(constraint.dual_value, dtype=np.float64).reshape(-1)
    return _optimal(kernel, W.value, dual, kernel.inner(W.value), "fro", solver, start, info)


@dataclass
class SVMResult:
    """One Att-SVM solve. Vectors of length N follow the constraint order of :func:`pair_indices`.

    ``support`` is the ``(n, T)`` mask of SVM-neighbours (margin ``<= 1 + 1e-5``), ``kkt`` holds
    the residuals ``primal`` (max margin violation), ``dual`` (max negative multiplier),
    ``complementarity`` (max ``lambda_k |margin_k - 1|`` over ``max(1, max lambda)``),
    ``stationarity`` (Frobenius: ``||W - sum lambda_k a_k|| / ||W||``; nuclear:
    ``max(0, ||sum lambda_k a_k||_op - 1)``) and ``gap`` (relative duality gap). If infeasible,
    ``certificate`` holds ``mu >= 0`` with ``sum mu = 1`` and ``sum_k mu_k a_k = 0``: any W would
    give ``0 = sum mu_k <W, a_k> >= 1``.
    """

    status: str
    W: np.ndarray | None
    objective: float
    dual: np.ndarray | None
    support: np.ndarray | None
    kkt: dict[str, float]
    certificate: np.ndarray | None
    solver: str
    seconds: float
    info: dict[str, float] = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        return self.status == "optimal"

    def rank(self, rtol: float = RANK_RTOL) -> int:
        """``#{sigma_k > rtol * sigma_1}`` of ``W`` (a ValueError if the problem is infeasible)."""
        if self.W is None:
            raise ValueError(f"rank: the problem is {self.status}, there is no W")
        sigma = np.linalg.svd(self.W, compute_uv=False)
        return int(np.sum(sigma > rtol * sigma[0])) if sigma[0] > 0 else 0


@one_blas_thread
def solve_frobenius(X, Z, alpha, *, tol: float = 1e-10) -> SVMResult:
    """``W^mm_alpha = argmin ||W||_F`` s.t. the Att-SVM margins (theory.md §2.2), exactly.

    Wolfe's min-norm point on the product kernel to relative accuracy ``tol``, then the
    equality system on the support is solved exactly and feasibility is restored by scaling.
    """
    start = time.perf_counter()
    X, Z, alpha = _validated(X, Z, alpha)
    if not 0 < tol < 1e-2:
        raise ValueError(f"tol: expected a relative tolerance in (0, 1e-2), got {tol}")
    kernel = _selection_kernel(X, Z, alpha)
    solution, mnp = _frobenius.solve_kernel_svm(kernel, tol)
    info = {"iterations": mnp.iterations, "corral": len(mnp.corral)}
    if mnp.fallback:
        info["fallback"] = mnp.fallback
    if solution is None:
        return _infeasible(mnp.mu, "wolfe-mnp", start, info)
    W, dual, margins = solution
    return _optimal(kernel, W, dual, margins, "fro", "wolfe-mnp", start, info)


@one_blas_thread
def solve_nuclear(X, Z, alpha, *, reduce: bool = True, solver: str = "ipm") -> SVMResult:
    """``W^mm_*,alpha = argmin ||W||_*`` s.t. the Att-SVM margins (theory.md §2.3).

    With ``reduce``, ``W = U B V^T`` with ``U``, ``V`` orthonormal bases of ``span{Delta_k}`` and
    ``span{z_i}``: projecting keeps every margin and no unitarily invariant norm grows, so an
    optimum of this form exists and the SDP shrinks from ``2d`` to ``rank U + rank V`` (§5 item 3).
    ``solver="ipm"``: our interior-point method (:mod:`attnsvm.theory._sdp`) on a working set of
    constraints; any cvxpy solver name (``"CLARABEL"``: accurate settings; ``"SCS"``: defaults,
    as in the notebooks) solves the reduced problem with one vectorised constraint instead.
    Infeasibility is decided by the exact Frobenius solver (the constraint set is the same).
    """
    start = time.perf_counter()
    X, Z, alpha = _validated(X, Z, alpha)
    kernel = _selection_kernel(X, Z, alpha)
    solution, mnp = _frobenius.solve_kernel_svm(kernel, 1e-10)
    if solution is None:
        return _infeasible(mnp.mu, solver, start)
    d = X.shape[2]
    U = _nuclear.orthonormal_basis(kernel.delta) if reduce else np.eye(d)
    V = _nuclear.orthonormal_basis(Z) if reduce else np.eye(d)
    delta, zeta = kernel.delta @ U, kernel.query @ V
    B, dual, solve_info = _nuclear.solve(delta, zeta, solution[2], solver)
    info = {"sdp_size": U.shape[1] + V.shape[1], **solve_info}
    W = U @ B @ V.T
    margins = kernel.inner(W)
    smallest = float(margins.min())
    if smallest < 1.0:  # restore exact feasibility; changes ||W||_* by a factor 1 + O(tol)
        W, margins = W / smallest, margins / smallest
    return _optimal(kernel, W, dual, margins, "nuc", solver, start, info)


def correlation(W1, W2) -> float | np.ndarray:
    """``<W1, W2> / (||W1||_F ||W2||_F)`` over the last two axes (a float for plain matrices)."""
    W1, W2 = np.asarray(W1, dtype=np.float64), np.asarray(W2, dtype=np.float64)
    if W1.ndim < 2 or W1.shape[-2:] != W2.shape[-2:]:
        raise ValueError(f"W1, W2: expected matrices of one shape, got {W1.shape} and {W2.shape}")
    inner = np.sum(W1 * W2, axis=(-2, -1))
    norms = np.linalg.norm(W1, axis=(-2, -1)) * np.linalg.norm(W2, axis=(-2, -1))
    result = inner / norms
    return float(result) if np.ndim(result) == 0 else result


def pair_indices(alpha: np.ndarray, T: int) -> tuple[np.ndarray, np.ndarray]:
    """``(i, t)`` of each constraint: row-major over sequences and tokens, skipping ``alpha_i``."""
    mask = np.ones((len(alpha), T), dtype=bool)
    mask[np.arange(len(alpha)), alpha] = False
    seq, token = np.nonzero(mask)
    return seq, token


# Plumbing shared by the solvers here, attnsvm.theory.equivalence and attnsvm.theory._compat.


def _validated(X, Z, alpha):
    X, Z = check_tokens(X, Z)
    alpha = check_indices(alpha, X.shape[0], X.shape[1])
    return X, Z, alpha


def _selection_kernel(X, Z, alpha) -> _mnp.ProductKernel:
    seq, token = pair_indices(alpha, X.shape[1])
    return _mnp.ProductKernel(X, Z, seq, alpha[seq], token)


def _features(kernel: _mnp.ProductKernel) -> np.ndarray:
    """The explicit ``(N, d*d)`` features ``vec(Delta_k z_k^T)`` (row-major, as ``W.ravel()``)."""
    return np.einsum("kd,ke->kde", kernel.delta, kernel.query).reshape(kernel.size, -1)


def _infeasible(certificate, solver: str, start: float, info=None) -> SVMResult:
    return SVMResult(
        status="infeasible",
        W=None,
        objective=float("nan"),
        dual=None,
        support=None,
        kkt={},
        certificate=certificate,
        solver=solver,
        seconds=time.perf_counter() - start,
        info=info or {},
    )


def _optimal(kernel, W, dual, margins, norm: str, solver: str, start: float, info) -> SVMResult:
    """A solution of the Att-SVM over ``kernel`` in the ``norm`` ``"fro"`` or ``"nuc"``."""
    fro = norm == "fro"
    support = np.zeros(kernel.X.shape[:2], dtype=bool)
    support[kernel.seq, kernel.minus] = margins <= 1.0 + NEIGHBOR_TOL
    kkt = (_frobenius.kkt if fro else _nuclear.kkt)(kernel, W, dual, margins)
    objective = np.linalg.norm(W) if fro else np.linalg.svd(W, compute_uv=False).sum()
    return SVMResult(
        status="optimal",
        W=W,
        objective=float(objective),
        dual=dual,
        support=support,
        kkt=kkt,
        certificate=None,
        solver=solver,
        seconds=time.perf_counter() - start,
        info=info,
    )
