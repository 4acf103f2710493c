"""Sampled metrics: labels, what the negatives may be, determinism, the ranking among candidates."""

import numpy as np
import pytest
import torch
from eval_reference import reference_metrics
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from attnsvm.rec.data.sequences import EvalTask, Sequences
from attnsvm.rec.eval import sample_negatives, sampled_evaluate


def make_task(history, targets):
    history = Sequences.from_lists(history)
    return EvalTask(np.arange(len(history)), history, Sequences.from_lists(targets), history)


def random_task(rng, n_users, num_items, history_len):
    history = [
        rng.choice(np.arange(1, num_items + 1), history_len, replace=False).tolist()
        for _ in range(n_users)
    ]
    targets = [[int(rng.choice(np.setdiff1d(np.arange(1, num_items + 1), h)))] for h in history]
    return make_task(history, targets)


def test_every_metric_name_carries_the_protocol_label():
    rng = np.random.default_rng(0)
    task = random_task(rng, 12, 200, 30)
    scores = torch.from_numpy(rng.normal(size=(12, 201)))
    result = sampled_evaluate(
        lambda rows: scores[rows].clone(), task, 200, 100, "uniform", ks=(1, 10)
    )
    assert list(result.metrics) == [
        f"{m}@{k} (sampled: 100 uniform)" for m in ("HR", "NDCG", "MRR", "Recall") for k in (1, 10)
    ]
    assert list(result.per_user) == list(result.metrics)
    assert result.protocol.startswith("sampled: 100 uniform negatives")


def test_negatives_are_distinct_unseen_non_targets_and_seed_determined():
    rng = np.random.default_rng(1)
    num_items = 60
    task = random_task(rng, 40, num_items, 25)
    negatives = sample_negatives(task, num_items, 30, seed=7, batch_size=16)
    for r in range(len(task)):
        row = negatives[r].tolist()
        assert len(set(row)) == 30
        assert set(row) <= set(range(1, num_items + 1))
        assert not set(row) & (
            set(task.exclude.row(r).tolist()) | set(task.targets.row(r).tolist())
        )
    np.testing.assert_array_equal(
        negatives, sample_negatives(task, num_items, 30, seed=7, batch_size=5)
    )
    assert not np.array_equal(negatives, sample_negatives(task, num_items, 30, seed=8))


def test_uniform_sampler_is_uniform_over_the_unseen_items():
    task = make_task([[1, 2]] * 4000, [[3]] * 4000)  # 7 candidates: items 4..10
    negatives = sample_negatives(task, 10, 1, seed=0)
    counts = np.bincount(negatives[:, 0], minlength=11)
    assert counts[:4].sum() == 0
    assert stats.chisquare(counts[4:]).pvalue > 1e-3


def test_popularity_sampler_follows_popularity_and_skips_unpopular_items():
    popularity = np.array([0, 50, 0, 10, 20, 30, 40], dtype=np.float64)
    task = make_task([[1]] * 5000, [[6]] * 5000)  # candidates 2..5, item 2 never popular
    negatives = sample_negatives(task, 6, 1, "popularity", seed=3, item_popularity=popularity)
    counts = np.bincount(negatives[:, 0], minlength=7)
    assert counts[[0, 1, 2, 6]].sum() == 0
    expected = popularity[3:6] / popularity[3:6].sum() * len(task)
    assert stats.chisquare(counts[3:6], expected).pvalue > 1e-3


def test_popularity_sampling_without_replacement_reaches_rare_items():
    popularity = np.array([0, 1000, 1, 1, 1000], dtype=np.float64)
    negatives = sample_negatives(
        make_task([[]], [[1]]), 4, 3, "popularity", item_popularity=popularity
    )
    assert sorted(negatives[0].tolist()) == [2, 3, 4]


@st.composite
def sampled_cases(draw):
    num_items = draw(st.integers(3, 25))
    n_users = draw(st.integers(1, 6))
    history = [
        draw(st.lists(st.integers(1, num_items), max_size=num_items - 2, unique=True))
        for _ in range(n_users)
    ]
    targets = [
        [draw(st.sampled_from(sorted(set(range(1, num_items + 1)) - set(h))))] for h in history
    ]
    free = min(num_items - len(h) - 1 for h in history)
    n_negatives = draw(st.integers(1, free))
    scores = draw(
        st.lists(
            st.lists(st.integers(-2, 2).map(float), min_size=num_items + 1, max_size=num_items + 1),
            min_size=n_users,
            max_size=n_users,
        )
    )
    return history, targets, n_negatives, np.array(scores), draw(st.integers(0, 2**31))


@settings(max_examples=100)
@given(sampled_cases())
def test_sampled_metrics_match_a_brute_force_ranking_of_the_candidates(case):
    history, targets, n_negatives, scores, seed = case
    num_items = scores.shape[1] - 1
    task = make_task(history, targets)
    negatives = sample_negatives(task, num_items, n_negatives, seed=seed)
    k = n_negatives + 1
    topk = []
    for r in range(len(task)):
        candidates = sorted({*targets[r], *negatives[r].tolist()}, key=lambda i: (-scores[r, i], i))
        topk.append(candidates[:k])
    expected = reference_metrics(np.array(topk), targets, (1, k))
    score_t = torch.from_numpy(scores)
    result = sampled_evaluate(
        lambda rows: score_t[rows].clone(),
        task,
        num_items,
        n_negatives,
        seed=seed,
        ks=(1, k),
        batch_size=2,
    )
    label = f" (sampled: {n_negatives} uniform)"
    for name, values in expected.items():
        np.testing.assert_allclose(result.per_user[name + label], values)


def test_bad_requests_get_a_clear_error():
    task = make_task([[1, 2, 3]], [[4]])
    ones = lambda rows: torch.ones(len(rows), 6)  # noqa: E731
    with pytest.raises(ValueError, match="task row 0 has only 1 items to sample from"):
        sampled_evaluate(ones, task, 5, 2, ks=(1,))
    with pytest.raises(ValueError, match="unknown sampler 'zipf'"):
        sampled_evaluate(ones, task, 5, 1, "zipf", ks=(1,))
    with pytest.raises(ValueError, match="needs item_popularity"):
        sampled_evaluate(ones, task, 5, 1, "popularity", ks=(1,))
    with pytest.raises(ValueError, match=r"n_negatives=5 must be in 1..4"):
        sampled_evaluate(ones, task, 5, 5, ks=(1,))
