"""Paired significance tests against scipy and hand-computed effect sizes."""

import math

import numpy as np
import pytest
from scipy import stats

from attnsvm.rec.eval import EvalResult, compare, compare_results


def test_known_inputs_against_scipy_and_hand_computed_cohens_d():
    a = np.array([1.0, 2.0, 3.0, 4.0, 0.5])
    b = np.array([0.0, 2.0, 1.0, 1.0, 1.0])
    out = compare({"NDCG@10": a}, {"NDCG@10": b}, "NDCG@10")
    diff = a - b  # 1, 0, 2, 3, -0.5: mean 1.1, sd sqrt(8.2 / 4)
    assert out["n"] == 5
    assert out["mean_difference"] == pytest.approx(1.1)
    assert out["cohens_d"] == pytest.approx(1.1 / math.sqrt(8.2 / 4))
    assert out["mean_a"] == pytest.approx(2.1)
    assert out["mean_b"] == pytest.approx(1.0)
    t = stats.ttest_rel(a, b)
    assert out["t_statistic"] == pytest.approx(1.1 / (diff.std(ddof=1) / math.sqrt(5)))
    assert (out["t_statistic"], out["t_pvalue"]) == pytest.approx((t.statistic, t.pvalue))
    w = stats.wilcoxon(a, b)
    assert (out["wilcoxon_statistic"], out["wilcoxon_pvalue"]) == pytest.approx(
        (w.statistic, w.pvalue)
    )
    assert (
        out["wilcoxon_statistic"] == 1.0
    )  # zero dropped; |diff| 1, 2, 3, 0.5 rank 2, 3, 4, 1; W- = 1


def test_identical_runs_have_no_difference():
    a = np.array([0.0, 1.0, 0.5])
    out = compare({"HR@10": a}, {"HR@10": a.copy()}, "HR@10")
    assert out["mean_difference"] == 0.0
    assert out["cohens_d"] == 0.0
    assert out["t_pvalue"] == 1.0
    assert out["wilcoxon_pvalue"] == 1.0


def test_missing_metric_and_unpaired_arrays_are_rejected():
    with pytest.raises(KeyError, match="run b has no per-user 'HR@10'"):
        compare({"HR@10": np.ones(3)}, {"HR@5": np.ones(3)}, "HR@10")
    with pytest.raises(ValueError, match=r"differ in shape: \(3,\) vs \(4,\)"):
        compare({"HR@10": np.ones(3)}, {"HR@10": np.ones(4)}, "HR@10")


def test_compare_results_requires_the_same_users_and_protocol():
    per_user = {"HR@10": np.array([0.0, 1.0, 1.0])}
    a = EvalResult({"HR@10": 2 / 3}, per_user, "full ranking, seen items excluded", np.arange(3))
    b = EvalResult(
        {"HR@10": 2 / 3}, per_user, "full ranking, seen items excluded", np.array([2, 1, 0])
    )
    with pytest.raises(ValueError, match="different users"):
        compare_results(a, b, "HR@10")
    c = EvalResult({"HR@10": 2 / 3}, per_user, "full ranking, seen items kept", np.arange(3))
    with pytest.raises(ValueError, match="protocols differ"):
        compare_results(a, c, "HR@10")
    assert compare_results(a, a, "HR@10")["n"] == 3
