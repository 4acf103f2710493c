"""Att-SVM solves for every seed of a batch, with one solve per distinct selection."""

from __future__ import annotations

import numpy as np

from attnsvm.theory.instances import Instances
from attnsvm.theory.svm import SVMResult, solve_frobenius, solve_nuclear

#: Nuclear solves whose interior point stalled at the precision limit and were finished by
#: Clarabel inside ``solve_nuclear`` (reported in each experiment's metrics).
FALLBACKS = {"nuclear_ipm_to_clarabel": 0}


def nuclear(X, Z, alpha) -> SVMResult:
    """``solve_nuclear`` (interior point, Clarabel where it stalls), counting the stalls."""
    result = solve_nuclear(X, Z, alpha)
    if "cvxpy_solver" in result.info:
        FALLBACKS["nuclear_ipm_to_clarabel"] += 1
    return result


SOLVERS = {"fro": solve_frobenius, "nuc": nuclear}


class SVMCache:
    """``get(s, alpha, norm)``: the Att-SVM of seed index ``s`` for ``alpha`` (solved once)."""

    def __init__(self, inst: Instances):
        self.inst = inst
        self._solved: dict[tuple, SVMResult] = {}

    def get(self, s: int, alpha, norm: str) -> SVMResult:
        key = (s, tuple(int(a) for a in alpha), norm)
        if key not in self._solved:
            self._solved[key] = SOLVERS[norm](self.inst.X[s], self.inst.Z[s], np.asarray(alpha))
        return self._solved[key]

    def directions(self, alphas: np.ndarray, norm: str) -> np.ndarray:
        """``(S, d, d)`` solutions for per-seed ``alphas``; NaN matrices where infeasible."""
        d = self.inst.X.shape[-1]
        out = np.full((len(alphas), d, d), np.nan)
        for s, alpha in enumerate(alphas):
            result = self.get(s, alpha, norm)
            if result.feasible:
                out[s] = result.W
        return out
