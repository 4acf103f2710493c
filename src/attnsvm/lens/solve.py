"""The Att-SVM of a head's token selection (theory.md §2), hard margin or soft, in both norms.

Sequences have different lengths, so the Att-SVM of a selection ``alpha`` is posed in its pair
form: every constraint ``(x_{iα_i} − x_it)ᵀ W z_i ≥ 1`` (t a real token ≠ α_i) becomes a
two-token sequence ``[x_{iα_i}, x_it]`` with query ``z_i`` and selection 0. That is the same
problem (the same constraints, the same objective), solved by ``attnsvm.theory.svm`` (the
Frobenius norm) and the theory lab's interior point ``attnsvm.theory._sdp`` (the nuclear norm,
on a working set of constraints).

When no ``W`` meets every margin (the theory's solvers return ``infeasible`` with a
certificate), the soft-margin variant ``min ||W|| + C Σ_k ξ_k`` s.t. margins ``≥ 1 − ξ_k``,
``ξ ≥ 0`` is solved instead (cvxpy: Clarabel, or SCS for the larger nuclear-norm problems),
with ``C = SOFT_MARGIN_C`` unless stated.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import cvxpy as cp
import numpy as np

from attnsvm.theory import _sdp, svm
from attnsvm.theory.tokens import NEIGHBOR_TOL

#: Weight of the slack in the soft-margin Att-SVM ``min ||W|| + C Σ ξ`` (per violated unit).
SOFT_MARGIN_C = 1.0
#: Largest dimension whose conic nuclear-norm program (``conic_svm``: a soft margin, or a round
#: where the interior point stalled) Clarabel solves; SCS solves the larger ones.
ACCURATE_NUCLEAR_DIM = 12
#: SCS tolerance for those larger programs (correlations good to about 1e-5).
SCS_EPS = 1e-7
#: Relative singular-value cut-off for the ranks reported (theory.md §3.5).
RANK_RTOL = svm.RANK_RTOL
NORMS = ("frobenius", "nuclear")


@dataclass(frozen=True)
class Pairs:
    """The Att-SVM constraints of a selection: sequence ``seq[k]``, rival token ``tok[k]``."""

    seq: np.ndarray  # (N,)
    tok: np.ndarray  # (N,)
    X: np.ndarray  # (N, 2, p): [x_{iα_i}, x_it]
    Z: np.ndarray  # (N, p)

    @classmethod
    def build(cls, X: np.ndarray, Z: np.ndarray, valid: np.ndarray, alpha: np.ndarray) -> Pairs:
        L = X.shape[1]
        rival = valid & (np.arange(L)[None, :] != alpha[:, None])
        seq, tok = np.nonzero(rival)  # row-major: sequence by sequence, tokens in order
        pairs = np.stack([X[seq, alpha[seq]], X[seq, tok]], axis=1)
        return cls(seq, tok, pairs, Z[seq])

    def __len__(self) -> int:
        return len(self.seq)

    def subset(self, keep: np.ndarray) -> Pairs:
        return Pairs(self.seq[keep], self.tok[keep], self.X[keep], self.Z[keep])

    def margins(self, W: np.ndarray) -> np.ndarray:
        """``(x_{iα_i} − x_it)ᵀ W z_i`` of every constraint."""
        delta = self.X[:, 0] - self.X[:, 1]
        return np.einsum("kp,kp->k", delta, self.Z @ W.T)


@dataclass
class Solution:
    """One Att-SVM (hard, or soft when the hard one is infeasible) of one selection and norm."""

    norm: str
    kind: str  # "hard" | "soft"
    W: np.ndarray
    objective: float  # ||W||_F or ||W||_* (soft: + C Σ ξ is in ``soft``)
    seconds: float
    margins: np.ndarray  # (N,) constraint margins under W
    soft: dict[str, float] = field(default_factory=dict)  # C, slack sum, violated count
    solver: str = ""
    rounds: int = 1  # working-set rounds (see ``solve``)
    working_set: int = 0  # constraints in the final working set
    dual: np.ndarray | None = None  # (N,) multipliers, where the solver gives them

    def neighbours(self, pairs: Pairs, shape: tuple[int, int]) -> np.ndarray:
        """``(n, L)`` SVM-neighbours: tokens whose margin is at most ``1 + NEIGHBOR_TOL``."""
        mask = np.zeros(shape, dtype=bool)
        active = self.margins <= 1.0 + NEIGHBOR_TOL
        mask[pairs.seq[active], pairs.tok[active]] = True
        return mask

    def summary(self, model_W: np.ndarray) -> dict:
        sigma = np.linalg.svd(self.W, compute_uv=False)
        return {
            "kind": self.kind,
            "objective": self.objective,
            "rank": int(np.sum(sigma > RANK_RTOL * sigma[0])) if sigma[0] > 0 else 0,
            "correlation": svm.correlation(model_W, self.W),
            "spectrum": (sigma / sigma[0]).tolist() if sigma[0] > 0 else sigma.tolist(),
            "seconds": self.seconds,
            "solver": self.solver,
            "min_margin": float(self.margins.min()),
            "working_set": self.working_set,
            "rounds": self.rounds,
            **({"soft_margin": self.soft} if self.soft else {}),
        }


def conic_svm(pairs: Pairs, norm: str, C: float | None = SOFT_MARGIN_C) -> Solution:
    """The Att-SVM as one conic program: soft margin ``min ||W|| + C Σ ξ`` s.t. ``margin_k ≥
    1 − ξ_k``, ``ξ ≥ 0``, or hard margin with ``C=None`` (for a selection known feasible).

    ``P = W Zᵀ`` is its own variable, so each margin touches ``p`` numbers instead of ``p²``.
    Clarabel solves it, except nuclear norms above ``ACCURATE_NUCLEAR_DIM`` dimensions: their
    interior-point SDP costs minutes, so SCS (first order, ``eps = SCS_EPS``) does.
    """
    start = time.perf_counter()
    queries, first = np.unique(pairs.seq, return_inverse=True)
    Z = pairs.Z[np.searchsorted(pairs.seq, queries)]
    delta = pairs.X[:, 0] - pairs.X[:, 1]
    p = delta.shape[1]
    # W = U_δ M U_zᵀ with U_δ, U_z orthonormal bases of the differences' and queries' spans:
    # the margins see only that block, and projecting onto it shrinks both norms, so the
    # optimum lies there; a smaller cone for the same problem (2× faster on a 64-wide model)
    U_delta, U_z = _span(delta), _span(Z)
    M = cp.Variable((U_delta.shape[1], U_z.shape[1]))
    P = cp.Variable((U_delta.shape[1], len(queries)))
    margins = cp.sum(cp.multiply(delta @ U_delta, P.T[first]), axis=1)
    objective = cp.norm(M, "fro") if norm == "frobenius" else cp.normNuc(M)
    constraints = [P == M @ (Z @ U_z).T]
    if C is None:
        constraints.append(margins >= 1)
    else:
        slack = cp.Variable(len(pairs), nonneg=True)
        objective = objective + C * cp.sum(slack)
        constraints.append(margins >= 1 - slack)
    problem = cp.Problem(cp.Minimize(objective), constraints)
    if norm == "nuclear" and p > ACCURATE_NUCLEAR_DIM:
        solver, options = "SCS", {"eps_abs": SCS_EPS, "eps_rel": SCS_EPS, "max_iters": 20000}
    else:
        solver, options = "CLARABEL", {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "inaccurate": the margins are re-checked
        problem.solve(solver=solver, **options)
    if M.value is None:
        raise RuntimeError(f"Att-SVM ({norm}): {solver} returned {problem.status}")
    value = U_delta @ M.value @ U_z.T
    margin_values = pairs.margins(value)
    if C is None:  # restore exact feasibility; changes the norm by a factor 1 + O(eps)
        value = value / min(1.0, float(margin_values.min()))
        margin_values = pairs.margins(value)
    ksi = np.maximum(1.0 - margin_values, 0.0)
    size = float(
        np.linalg.norm(value)
        if norm == "frobenius"
        else np.linalg.svd(value, compute_uv=False).sum()
    )
    soft = (
        {}
        if C is None
        else {"C": C, "slack_sum": float(ksi.sum()), "violated": int(np.sum(ksi > 1e-6))}
    )
    return Solution(
        norm,
        "hard" if C is None else "soft",
        value,
        size,
        time.perf_counter() - start,
        margin_values,
        soft,
        solver=f"{solver} ({problem.status})",
    )


def _span(rows: np.ndarray) -> np.ndarray:
    """``(p, r)`` orthonormal basis of the span of ``rows`` (relative cut-off 1e-10)."""
    U, sigma, _ = np.linalg.svd(rows.T, full_matrices=False)
    keep = sigma > 1e-10 * sigma[0] if sigma.size and sigma[0] > 0 else sigma > 0
    return U[:, keep] if keep.any() else U[:, :1]


#: Rivals per sequence in the first soft-margin working set (smallest margins under a guide).
WORKING_RIVALS = 6
#: Working-set rounds before giving up (each adds every constraint the solution violates).
MAX_ROUNDS = 50


def _grow(pairs: Pairs, working: np.ndarray, solve_working: Callable[[Pairs], Solution]):
    """Solve on ``working``, add every constraint the solution violates, until none is."""
    for rounds in range(1, MAX_ROUNDS + 1):
        solution = solve_working(pairs.subset(working))
        margins = pairs.margins(solution.W)
        violated = (margins < 1.0 - 1e-7) & ~working
        if not violated.any():
            solution.margins = margins
            solution.rounds, solution.working_set = rounds, int(working.sum())
            return solution
        working = working | violated
    raise RuntimeError(f"Att-SVM working set did not settle in {MAX_ROUNDS} rounds")


#: A constraint outside the working set joins it below this margin (the interior point meets
#: the working constraints to about 1e-10 when it converges; SCS, where it stands in, 1e-7).
VIOLATION_TOL = 1e-7
#: An interior-point round that stalls at the precision limit (relative gaps near 1e-9 on
#: histories that repeat items) is kept when its residuals are below this, the accuracy of the
#: SCS solutions it replaced; a worse one is solved by ``conic_svm``.
STALLED_RESIDUAL = 1e-7


def _nuclear_hard(pairs: Pairs, frobenius: Solution) -> Solution:
    """The hard-margin nuclear-norm Att-SVM of a feasible selection.

    Solved on a working set that starts with the Frobenius solution's SVM-neighbours (the two
    norms share most active constraints) and grows by every constraint the solution violates,
    so every solve sees a few hundred constraints instead of thousands, on the span of the
    differences and queries (see ``conic_svm``). Each working set is solved by the theory lab's
    interior point (``attnsvm.theory._sdp``), which keeps every working constraint
    (``protected``): its rule for dropping inactive ones dropped constraints that its final
    iterate then violated, on a small SASRec+ layer nearly all of them (4,723 of 4,724 violated
    after the first round, and the working set became everything). A round where it stalls
    short of ``STALLED_RESIDUAL`` is solved by ``conic_svm`` instead. ``dual`` holds the
    interior point's multipliers (zero outside the final working set): with the margins they
    certify the optimum (KKT).
    """
    start = time.perf_counter()
    delta = pairs.X[:, 0] - pairs.X[:, 1]
    U_delta, U_z = _span(delta), _span(pairs.Z)
    delta_span, z_span = delta @ U_delta, pairs.Z @ U_z
    working = frobenius.margins <= 1.0 + NEIGHBOR_TOL
    for rounds in range(1, MAX_ROUNDS + 1):
        rows = np.flatnonzero(working)
        result = _sdp.solve(
            delta_span[rows], z_span[rows], protected=np.ones(len(rows), dtype=bool)
        )
        residual = max(result.residuals.values(), default=np.inf)
        if result.converged or residual <= STALLED_RESIDUAL:
            W, solver = U_delta @ result.B @ U_z.T, "interior point"
            dual = np.zeros(len(pairs))
            dual[rows] = result.y
        else:
            fallback = conic_svm(pairs.subset(working), "nuclear", None)
            W, solver, dual = fallback.W, fallback.solver, None
        margins = pairs.margins(W)
        # working constraints hold to the solver's accuracy, and the scaling below makes them
        # exact; a stalled round may miss some by more than VIOLATION_TOL, and re-solving the
        # same working set would change nothing
        violated = (margins < 1.0 - VIOLATION_TOL) & ~working
        if violated.any():
            working |= violated
            continue
        W = W / min(1.0, float(margins.min()))  # exact feasibility; the norm moves by 1 + O(tol)
        return Solution(
            "nuclear",
            "hard",
            W,
            float(np.linalg.svd(W, compute_uv=False).sum()),
            time.perf_counter() - start,
            pairs.margins(W),
            solver=solver,
            rounds=rounds,
            working_set=len(rows),
            dual=dual,
        )
    raise RuntimeError(f"Att-SVM working set did not settle in {MAX_ROUNDS} rounds")


def solve(
    pairs: Pairs, C: float = SOFT_MARGIN_C, guide: np.ndarray | None = None
) -> dict[str, Solution]:
    """``{norm: solution}``: the hard-margin Att-SVMs, or their soft-margin variants where the
    hard ones are infeasible (the constraint set, hence feasibility, is the same for both norms).

    Feasibility and the Frobenius solution come from the exact min-norm-point solver on every
    constraint at once. The nuclear and the soft-margin problems are solved on a working set of
    constraints, grown by every constraint the solution violates (margin below 1) until none
    is: a constraint met with margin ≥ 1 would add nothing (no slack, no binding), so the result
    solves the full problem. The first soft-margin working set holds, per sequence, the
    ``WORKING_RIVALS`` rivals with the smallest margins under ``guide`` (the model's own ``W``),
    since they are the likely support.
    """
    start = time.perf_counter()
    result = svm.solve_frobenius(pairs.X, pairs.Z, np.zeros(len(pairs), dtype=np.int64))
    if result.feasible:
        frobenius = Solution(
            "frobenius",
            "hard",
            result.W,
            result.objective,
            result.seconds,
            pairs.margins(result.W),
            solver=result.solver,
        )
        solutions = {"frobenius": frobenius, "nuclear": _nuclear_hard(pairs, frobenius)}
        solutions["nuclear"].seconds = time.perf_counter() - start - result.seconds
        return solutions
    margins = pairs.margins(guide) if guide is not None else np.zeros(len(pairs))
    order = np.lexsort((margins, pairs.seq))  # by sequence, then by margin (stable)
    first = np.searchsorted(pairs.seq[order], pairs.seq[order], side="left")
    working = np.zeros(len(pairs), dtype=bool)
    working[order[np.arange(len(pairs)) - first < WORKING_RIVALS]] = True
    solutions = {}
    for norm in NORMS:
        norm_start = time.perf_counter()
        solutions[norm] = _grow(pairs, working, lambda w, norm=norm: conic_svm(w, norm, C))
        solutions[norm].seconds = time.perf_counter() - norm_start
    solutions["frobenius"].seconds += result.seconds
    return solutions
