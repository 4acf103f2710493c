"""Paired significance tests between two runs evaluated on the same users.

``compare`` pairs the per-user arrays row by row (``compare_results`` first checks that both
results list the same users in the same order) and reports the paired t-test, the Wilcoxon
signed-rank test (zero differences dropped, scipy's default), the mean difference a − b and
Cohen's d for paired samples, d_z = mean(a − b) / sd(a − b) with the n − 1 standard deviation.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from attnsvm.errors import InvalidRequest, UnknownName, shown
from attnsvm.rec.eval.ranking import EvalResult


def compare(
    per_user_a: dict[str, np.ndarray], per_user_b: dict[str, np.ndarray], metric: str
) -> dict[str, float | int | str]:
    """Paired tests of ``metric`` between runs a and b; p-values are two-sided."""
    for name, per_user in (("a", per_user_a), ("b", per_user_b)):
        if metric not in per_user:
            raise UnknownName(
                f"run {name} has no per-user {shown(metric)}; it has {sorted(per_user)}"
            )
    a = np.asarray(per_user_a[metric], dtype=np.float64)
    b = np.asarray(per_user_b[metric], dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise InvalidRequest(f"per-user {metric!r} arrays differ in shape: {a.shape} vs {b.shape}")
    if a.size < 2:
        raise InvalidRequest(f"paired tests need at least 2 users, got {a.size}")
    diff = a - b
    sd = float(diff.std(ddof=1))
    mean_difference = float(diff.mean())
    if sd > 0:
        t = stats.ttest_rel(a, b)
        t_statistic, t_pvalue = float(t.statistic), float(t.pvalue)
        cohens_d = mean_difference / sd
    else:  # every user moved by the same amount: no variance to test against
        t_statistic, t_pvalue = (0.0, 1.0) if mean_difference == 0 else (np.inf, 0.0)
        cohens_d = 0.0 if mean_difference == 0 else np.copysign(np.inf, mean_difference)
    if np.any(diff != 0):
        w = stats.wilcoxon(a, b)
        wilcoxon_statistic, wilcoxon_pvalue = float(w.statistic), float(w.pvalue)
    else:
        wilcoxon_statistic, wilcoxon_pvalue = 0.0, 1.0
    return {
        "metric": metric,
        "n": int(a.size),
        "mean_a": float(a.mean()),
        "mean_b": float(b.mean()),
        "mean_difference": mean_difference,
        "t_statistic": t_statistic,
        "t_pvalue": t_pvalue,
        "wilcoxon_statistic": wilcoxon_statistic,
        "wilcoxon_pvalue": wilcoxon_pvalue,
        "cohens_d": cohens_d,
    }


def compare_results(a: EvalResult, b: EvalResult, metric: str) -> dict[str, float | int | str]:
    """``compare`` after checking that both results cover the same users in the same order."""
    if a.protocol != b.protocol:
        raise InvalidRequest(f"protocols differ: {a.protocol!r} vs {b.protocol!r}")
    if not np.array_equal(a.users, b.users):
        raise InvalidRequest(
            f"the runs were evaluated on different users ({a.users.size} vs {b.users.size} rows, "
            "or a different order); paired tests need the same users"
        )
    return compare(a.per_user, b.per_user, metric)
