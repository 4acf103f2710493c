"""The Att-SVM problems (theory.md §2.2, §2.3, §2.8): Frobenius, nuclear norm, SVM-equivalence.

For selected indices ``alpha`` the constraints are, for every sequence ``i`` and token
``t != alpha_i`` (row-major over ``(i, t)``; :func:`pair_indices` gives that order),

    <W, a_it> >= 1,   a_it = (x_{i,alpha_i} - x_it) z_i^T,

and ``W^mm`` minimises ``||W||_F`` (:func:`solve_frobenius`) or ``||W||_*``
(:func:`solve_nuclear`) over them. The Frobenius problem is solved in its dual with the product
kernel ``<a_k, a_l> = <Delta_k, Delta_l> <z_k, z_l>`` by Wolfe's min-norm-point algorithm
(:mod:`attnsvm.theory._mnp`); its dual vector ``lambda`` gives ``W = sum_k lambda_k a_k``.
Both problems share the constraint set, so the Frobenius solve decides feasibility for both, and
an infeasible problem comes back with ``status="infeasible"`` and a certificate, never solved.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import cvxpy as cp
import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve
from scipy.optimize import nnls

from attnsvm.theory import _mnp, _sdp
from attnsvm.theory.tokens import NEIGHBOR_TOL, check_indices, check_matrix, check_tokens

#: Clarabel settings for "accurate" conic solves (its defaults stop at 1e-8 relative gaps).
CLARABEL_ACCURATE = {
    "tol_gap_abs": 1e-11,
    "tol_gap_rel": 1e-11,
    "tol_feas": 1e-11,
    "tol_ktratio": 1e-9,
    "max_iter": 500,
}
#: Relative rank tolerance: singular values above ``RANK_RTOL * sigma_1`` count (theory.md §3.5).
RANK_RTOL = 1e-6


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


def _validated(X, Z, alpha):
    X, Z = check_tokens(X, Z)
    alpha = check_indices(alpha, X.shape[0], X.shape[1])
    return X, Z, alpha


def _selection_kernel(X, Z, alpha) -> _mnp.ProductKernel:
    seq, token = pair_indices(alpha, X.shape[1])
    return _mnp.ProductKernel(X, Z, seq, alpha[seq], token)


def _support(kernel: _mnp.ProductKernel, margins: np.ndarray, shape) -> np.ndarray:
    support = np.zeros(shape, dtype=bool)
    support[kernel.seq, kernel.minus] = margins <= 1.0 + NEIGHBOR_TOL
    return support


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


def _complementarity(dual, margins) -> float:
    """``max_k lambda_k |margin_k - 1|``, relative to ``max(1, max lambda)``."""
    return float(np.max(np.abs(dual * (margins - 1.0)))) / max(1.0, float(dual.max()))


def _frobenius_kkt(kernel, W, dual, margins) -> dict[str, float]:
    sqnorm = float(np.sum(W * W))
    rows = np.flatnonzero(dual)
    residual = W - kernel.combine(rows, dual[rows])
    return {
        "primal": max(0.0, 1.0 - float(margins.min())),
        "dual": max(0.0, -float(dual.min())),
        "complementarity": _complementarity(dual, margins),
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


#: Working-set rounds of the least-distance fallback (each adds every violated constraint).
LDP_MAX_ROUNDS = 50


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


def _solve_kernel_svm(kernel: _mnp.ProductKernel, tol: float):
    """Hard-margin SVM on the kernel's features: ``(W, dual, margins)`` or the certificate.

    Wolfe's min-norm point first; where it stalls at the precision limit short of the margins,
    Lawson & Hanson's least-distance NNLS finishes from its corral (``info["fallback"]``).
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
    solution, mnp = _solve_kernel_svm(kernel, tol)
    info = {"iterations": mnp.iterations, "corral": len(mnp.corral)}
    if mnp.fallback:
        info["fallback"] = mnp.fallback
    if solution is None:
        return _infeasible(mnp.mu, "wolfe-mnp", start, info)
    W, dual, margins = solution
    return SVMResult(
        status="optimal",
        W=W,
        objective=float(np.linalg.norm(W)),
        dual=dual,
        support=_support(kernel, margins, X.shape[:2]),
        kkt=_frobenius_kkt(kernel, W, dual, margins),
        certificate=None,
        solver="wolfe-mnp",
        seconds=time.perf_counter() - start,
        info=info,
    )


def _nuclear_kkt(kernel, W, dual, margins) -> dict[str, float]:
    nuclear = float(np.linalg.svd(W, compute_uv=False).sum())
    rows = np.flatnonzero(dual > 0)
    subgradient = kernel.combine(rows, dual[rows])
    return {
        "primal": max(0.0, 1.0 - float(margins.min())),
        "dual": max(0.0, -float(dual.min())),
        "complementarity": _complementarity(dual, margins),
        "stationarity": max(0.0, float(np.linalg.norm(subgradient, 2)) - 1.0),
        "gap": abs(float(dual.sum()) - nuclear) / nuclear,
    }


def _orthonormal_basis(rows: np.ndarray) -> np.ndarray:
    """Columns: an orthonormal basis of the span of ``rows`` (relative cut-off 1e-12)."""
    _, sigma, vt = np.linalg.svd(rows, full_matrices=False)
    return vt[sigma > 1e-12 * sigma[0]].T


def _solve_options(solver: str) -> dict:
    return dict(CLARABEL_ACCURATE) if solver == "CLARABEL" else {}


def _nuclear_cvxpy(delta, zeta, solver: str):
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


#: Working-set rounds of the interior-point solve before giving up (each adds violated margins).
MAX_ROUNDS = 30


def _nuclear_ipm(delta, zeta, frobenius_margins):
    """Interior point on a working set of constraints, grown by the violated ones.

    The nuclear and Frobenius solutions share most active constraints, so the working set
    starts with the Frobenius SVM-neighbours. A round whose interior point stalls at the
    precision limit is solved by Clarabel on the same working set, so memory stays that of the
    working set, never of all constraints. Returns ``(B, y, info)``, or None if the working set
    does not settle.
    """
    working = frobenius_margins <= 1.0 + NEIGHBOR_TOL
    clarabel_rounds = 0
    for rounds in range(1, MAX_ROUNDS + 1):
        rows = np.flatnonzero(working)
        solution = _sdp.solve(delta[rows], zeta[rows])
        if solution.converged:
            B, y_rows = solution.B, solution.y
        else:
            B, y_rows, _ = _nuclear_cvxpy(delta[rows], zeta[rows], "CLARABEL")
            clarabel_rounds += 1
        margins = np.einsum("kp,pq,kq->k", delta, B, zeta, optimize=True)
        violated = (margins < 1.0 - 1e-9) & ~working
        if not violated.any():
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
        working |= violated
    return None


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
    solution, mnp = _solve_kernel_svm(kernel, 1e-10)
    if solution is None:
        return _infeasible(mnp.mu, solver, start)
    d = X.shape[2]
    U = _orthonormal_basis(kernel.delta) if reduce else np.eye(d)
    V = _orthonormal_basis(Z) if reduce else np.eye(d)
    delta, zeta = kernel.delta @ U, kernel.query @ V
    info = {"sdp_size": U.shape[1] + V.shape[1]}
    result = _nuclear_ipm(delta, zeta, solution[2]) if solver == "ipm" else None
    if result is None:  # a cvxpy solver was asked for, or the working set did not settle
        name = "CLARABEL" if solver == "ipm" else solver
        B, dual, status = _nuclear_cvxpy(delta, zeta, name)
        info.update(cvxpy_status=status, cvxpy_solver=name)
    else:
        B, dual, ipm_info = result
        info.update(ipm_info)
    W = U @ B @ V.T
    margins = kernel.inner(W)
    smallest = float(margins.min())
    if smallest < 1.0:  # restore exact feasibility; changes ||W||_* by a factor 1 + O(tol)
        W, margins = W / smallest, margins / smallest
    return SVMResult(
        status="optimal",
        W=W,
        objective=float(np.linalg.svd(W, compute_uv=False).sum()),
        dual=dual,
        support=_support(kernel, margins, X.shape[:2]),
        kkt=_nuclear_kkt(kernel, W, dual, margins),
        certificate=None,
        solver=solver,
        seconds=time.perf_counter() - start,
        info=info,
    )


def _features(kernel: _mnp.ProductKernel) -> np.ndarray:
    """The explicit ``(N, d*d)`` features ``vec(Delta_k z_k^T)`` (row-major, as ``W.ravel()``)."""
    return np.einsum("kd,ke->kde", kernel.delta, kernel.query).reshape(kernel.size, -1)


def _reference_result(kernel, W, dual, status, fro, solver, start, shape) -> SVMResult:
    if W is None:
        return _infeasible(None, solver, start, {"cvxpy_status": status})
    margins = kernel.inner(W)
    kkt = (_frobenius_kkt if fro else _nuclear_kkt)(kernel, W, dual, margins)
    objective = np.linalg.norm(W) if fro else np.linalg.svd(W, compute_uv=False).sum()
    return SVMResult(
        status="optimal",
        W=W,
        objective=float(objective),
        dual=dual,
        support=_support(kernel, margins, shape),
        kkt=kkt,
        certificate=None,
        solver=solver,
        seconds=time.perf_counter() - start,
        info={"cvxpy_status": status},
    )


def solve_frobenius_cvxpy(X, Z, alpha) -> SVMResult:
    """Reference Frobenius solve: the primal QP in cvxpy, one vectorised constraint, Clarabel."""
    start = time.perf_counter()
    X, Z, alpha = _validated(X, Z, alpha)
    kernel = _selection_kernel(X, Z, alpha)
    d = X.shape[2]
    W = cp.Variable((d, d))
    constraint = _features(kernel) @ cp.vec(W, order="C") >= 1
    problem = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(W)), [constraint])
    problem.solve(solver="CLARABEL", **CLARABEL_ACCURATE)
    if W.value is None:
        return _reference_result(
            kernel, None, None, problem.status, True, "cvxpy-CLARABEL", start, X.shape[:2]
        )
    dual = np.asarray(constraint.dual_value, dtype=np.float64).reshape(-1)
    return _reference_result(
        kernel, W.value, dual, problem.status, True, "cvxpy-CLARABEL", start, X.shape[:2]
    )


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
    problem = cp.Problem(cp.Minimize(cp.norm(W, "fro" if fro else "nuc")), constraints)
    problem.solve() if solver is None else problem.solve(solver=solver)
    name = f"official-{problem.solver_stats.solver_name}"
    kernel = _selection_kernel(X, Z, alpha)
    if W.value is None:
        return _reference_result(kernel, None, None, problem.status, fro, name, start, (n, T))
    dual = np.array([float(np.squeeze(c.dual_value)) for c in constraints])
    if fro:  # cvxpy's multipliers belong to ||W||_F; the dual of 1/2 ||W||^2 is ||W|| times them
        dual = dual * np.linalg.norm(W.value)
    return _reference_result(kernel, W.value, dual, problem.status, fro, name, start, (n, T))


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
    solution, mnp = _solve_kernel_svm(kernel, 1e-12)
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
    kkt = _frobenius_kkt(kernel, W_dir, dual, margins)
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
