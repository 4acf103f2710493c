"""Metrics from top-k lists: hand-computed cases, the brute-force reference, edge cases."""

import math

import numpy as np
import pytest
from eval_reference import reference_metrics
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsvm.rec.data.sequences import Sequences
from attnsvm.rec.eval import metrics_from_topk


@pytest.mark.parametrize("rank", [1, 2, 3, 7, 10])
def test_one_target_at_rank_r(rank):
    topk = np.array([[100 + j for j in range(10)]])
    topk[0, rank - 1] = 5
    metrics, _ = metrics_from_topk(topk, Sequences.from_lists([[5]]), ks=(1, 5, 10))
    assert metrics["NDCG@10"] == pytest.approx(1 / math.log2(rank + 1))
    assert metrics["MRR@10"] == pytest.approx(1 / rank)
    for k in (1, 5, 10):
        assert metrics[f"HR@{k}"] == float(rank <= k)
        assert metrics[f"Recall@{k}"] == metrics[f"HR@{k}"]
    assert metrics["NDCG@5"] == (pytest.approx(1 / math.log2(rank + 1)) if rank <= 5 else 0.0)


def test_two_targets_hand_computed():
    # targets {2, 5}; ranked 5, 1, 2: hits at ranks 1 and 3
    metrics, per_user = metrics_from_topk(
        np.array([[5, 1, 2], [7, 8, 9]]), Sequences.from_lists([[2, 5], [9]]), ks=(1, 3)
    )
    assert per_user["HR@1"].tolist() == [1.0, 0.0]
    assert per_user["Recall@1"].tolist() == [1.0, 0.0]  # 1 hit / min(1, 2)
    assert per_user["Recall@3"].tolist() == [1.0, 1.0]
    assert per_user["NDCG@3"][0] == pytest.approx((1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3)))
    assert per_user["NDCG@3"][1] == pytest.approx(1 / math.log2(4))
    assert per_user["MRR@3"].tolist() == [1.0, pytest.approx(1 / 3)]
    assert metrics["MRR@3"] == pytest.approx((1 + 1 / 3) / 2)


def test_repeated_target_counts_once():
    _, per_user = metrics_from_topk(np.array([[4, 1]]), Sequences.from_lists([[4, 4]]), ks=(2,))
    assert per_user["Recall@2"].tolist() == [1.0]
    assert per_user["NDCG@2"].tolist() == [1.0]


def test_padding_zero_is_never_a_hit_and_not_covered():
    topk = np.array([[3, 0, 0], [1, 2, 0]])
    metrics, per_user = metrics_from_topk(
        topk,
        Sequences.from_lists([[2], [2]]),
        ks=(3,),
        num_items=4,
        item_popularity=np.array([0.0, 10.0, 20.0, 30.0, 40.0]),
    )
    assert per_user["HR@3"].tolist() == [0.0, 1.0]
    assert metrics["coverage@3"] == pytest.approx(3 / 4)
    assert per_user["popularity@3"].tolist() == [30.0, 15.0]
    assert metrics["popularity@3"] == pytest.approx(22.5)


def test_metric_names_cover_every_cutoff():
    metrics, per_user = metrics_from_topk(
        np.array([[1, 2]]), Sequences.from_lists([[2]]), ks=(1, 2), num_items=3
    )
    names = [f"{m}@{k}" for m in ("HR", "NDCG", "MRR", "Recall") for k in (1, 2)]
    assert list(metrics) == [*names, "coverage@1", "coverage@2"]
    assert list(per_user) == names


def test_rows_without_targets_are_rejected():
    with pytest.raises(ValueError, match="1 rows have no target"):
        metrics_from_topk(np.array([[1], [2]]), Sequences.from_lists([[1], []]), ks=(1,))


def test_cutoff_wider_than_the_lists_is_rejected():
    with pytest.raises(ValueError, match=r"cut-offs \[5\] are outside 1..3"):
        metrics_from_topk(np.array([[1, 2, 3]]), Sequences.from_lists([[1]]), ks=(1, 5))


@st.composite
def ranked_lists(draw):
    num_items = draw(st.integers(1, 25))
    width = draw(st.integers(1, num_items))
    n_users = draw(st.integers(1, 6))
    topk, targets = [], []
    for _ in range(n_users):
        ranked = draw(st.permutations(range(1, num_items + 1)))[:width]
        n_short = draw(st.integers(0, width - 1))  # a tail of 0 = fewer items were rankable
        topk.append(list(ranked[: width - n_short]) + [0] * n_short)
        targets.append(draw(st.lists(st.integers(1, num_items), min_size=1, max_size=4)))
    ks = draw(st.lists(st.integers(1, width), min_size=1, max_size=3, unique=True))
    return np.array(topk, dtype=np.int64), targets, ks


@settings(max_examples=150)
@given(ranked_lists())
def test_matches_brute_force_reference(case):
    topk, targets, ks = case
    metrics, per_user = metrics_from_topk(topk, Sequences.from_lists(targets), ks)
    expected = reference_metrics(topk, targets, ks)
    assert set(per_user) == set(expected)
    for name, values in expected.items():
        np.testing.assert_allclose(per_user[name], values, rtol=1e-12, atol=0)
        assert metrics[name] == pytest.approx(values.mean(), rel=1e-12)
