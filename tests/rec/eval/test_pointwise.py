"""Pointwise metrics against hand-computed and brute-force values; labelled events against a
direct reading of the rated events after each temporal cut."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from attnsvm.errors import InvalidRequest
from attnsvm.rec.data.datasets import load_dataset
from attnsvm.rec.data.sequences import EvalTask, Sequences
from attnsvm.rec.data.splits import temporal_split
from attnsvm.rec.eval.pointwise import (
    f1_score,
    labelled_events,
    log_loss,
    pointwise_metrics,
    roc_auc,
)

SHARED = Path(__file__).resolve().parents[4] / "shared" / "data"


def logit(p: float) -> float:
    return math.log(p / (1 - p))


def test_log_loss_by_hand():
    # p = 0.5 for a liked event, p = 0.75 for a disliked one: (ln 2 + ln 4) / 2
    assert log_loss(np.array([1, 0]), np.array([0.0, logit(0.75)])) == pytest.approx(
        (math.log(2) + math.log(4)) / 2, rel=1e-12
    )
    # a confident wrong prediction costs its log loss (≈ the logit), not infinity
    assert log_loss(np.array([1]), np.array([-800.0])) == pytest.approx(800.0)


def test_f1_by_hand_with_the_decision_at_one_half():
    labels = np.array([1, 1, 0, 0, 1])
    logits = np.array([logit(p) for p in (0.9, 0.4, 0.6, 0.1)] + [0.0])  # p = 0.5 → positive
    # predicted 1 0 1 0 1: TP 2, FP 1, FN 1 → 2·2 / (2·2 + 2)
    assert f1_score(labels, logits) == pytest.approx(4 / 6)
    assert f1_score(labels, logits, decision=0.95) == 0.0  # nothing predicted positive
    assert f1_score(labels, logits, decision=0.05) == pytest.approx(6 / 8)  # all positive


def brute_force_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    pairs = [
        1.0 if p > n else 0.5 if p == n else 0.0
        for p, n in itertools.product(scores[labels == 1], scores[labels == 0])
    ]
    return float(np.mean(pairs))


def test_auc_by_hand_and_against_every_pair_with_ties():
    # (0.8 vs 0.8: ½) + (0.8 vs 0.1: 1) + (0.3 vs 0.8: 0) + (0.3 vs 0.1: 1) = 2.5 of 4
    assert roc_auc(np.array([1, 0, 1, 0]), np.array([0.8, 0.8, 0.3, 0.1])) == 0.625
    rng = np.random.default_rng(0)
    for _ in range(20):
        labels = rng.integers(0, 2, size=40)
        labels[:2] = (0, 1)
        scores = np.round(rng.normal(size=40), 1)  # many ties
        assert roc_auc(labels, scores) == pytest.approx(brute_force_auc(labels, scores))


def test_metrics_together_and_bad_input():
    metrics = pointwise_metrics(np.array([1, 0, 1]), np.array([2.0, -1.0, 0.5]))
    assert metrics["AUC"] == 1.0 and metrics["F1"] == 1.0
    assert (metrics["events"], metrics["liked"]) == (3, 2)
    with pytest.raises(InvalidRequest, match="both liked and disliked"):
        roc_auc(np.array([1, 1]), np.array([0.1, 0.2]))
    with pytest.raises(InvalidRequest, match="labels must be 0 or 1"):
        log_loss(np.array([2, 0]), np.array([0.1, 0.2]))
    with pytest.raises(InvalidRequest, match="finite"):
        log_loss(np.array([1, 0]), np.array([np.nan, 0.2]))
    with pytest.raises(InvalidRequest, match="non-empty 1-D"):
        f1_score(np.array([1, 0]), np.array([0.1]))
    with pytest.raises(InvalidRequest, match=r"decision threshold must lie in \(0, 1\)"):
        f1_score(np.array([1, 0]), np.array([0.1, 0.2]), decision=1.0)


# -- labelled events ---------------------------------------------------------------------------


def rated(rows: list[list[tuple[int, float]]]) -> Sequences:
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    items = [item for row in rows for item, _ in row]
    ratings = [rating for row in rows for _, rating in row]
    return Sequences(offsets, np.array(items), np.arange(len(rows)), None, np.array(ratings))


def test_each_target_gets_the_rating_of_its_first_occurrence_after_the_history():
    full = rated([[(1, 5), (2, 1), (3, 4), (2, 5)], [(4, 3), (5, 2), (6, 4)]])
    history = Sequences(np.array([0, 1, 2]), np.array([1, 4]), np.array([0, 1]))
    targets = Sequences(np.array([0, 2, 4]), np.array([2, 3, 6, 5]), np.array([0, 1]))
    task = EvalTask(np.array([0, 1]), history, targets, history)
    events = labelled_events(full, task, threshold=4.0)
    assert events.rows.tolist() == [0, 0, 1, 1]
    assert events.items.tolist() == [2, 3, 6, 5]
    assert events.ratings.tolist() == [1.0, 4.0, 4.0, 2.0]  # item 2: the first, not the later 5
    assert events.labels.tolist() == [False, True, True, False]


def test_a_history_that_is_not_a_prefix_or_data_without_ratings_is_refused():
    full = rated([[(1, 5), (2, 1), (3, 4)]])
    history = Sequences(np.array([0, 1]), np.array([2]), np.array([0]))
    targets = Sequences(np.array([0, 1]), np.array([3]), np.array([0]))
    with pytest.raises(InvalidRequest, match="not prefixes"):
        labelled_events(full, EvalTask(np.array([0]), history, targets, history), 4.0)
    bare = Sequences(full.offsets, full.items, full.users)
    with pytest.raises(InvalidRequest, match="needs ratings and this dataset has none"):
        labelled_events(bare, EvalTask(np.array([0]), history, targets, history), 4.0)


@pytest.mark.parametrize("dataset", ["ml-100k", "ml-latest-small"])
def test_temporal_test_events_are_the_rated_events_after_the_cut(dataset):
    if not (SHARED / dataset).is_dir():
        pytest.skip(f"{SHARED / dataset} is absent")
    data = load_dataset(dataset, root=str(SHARED))
    split = temporal_split(data, 0.8, 0.9)
    events = labelled_events(data.to_sequences(), split.test, 4.0)
    # directly: every (user, item, rating) at or after the test cut, for the task's users and
    # items seen before the cut (the split's "drop" policy)
    cut = np.quantile(data.timestamp, 0.9)
    full = data.to_sequences()
    user_of = np.repeat(full.users, full.lengths)
    after = data.timestamp >= cut
    seen = np.zeros(data.num_items + 1, dtype=bool)
    seen[full.items[~after]] = True
    kept = after & seen[full.items] & np.isin(user_of, split.test.users)
    expected = sorted(zip(user_of[kept], full.items[kept], full.ratings[kept], strict=True))
    got = sorted(zip(split.test.users[events.rows], events.items, events.ratings, strict=True))
    assert got == expected
    assert 0.3 < events.labels.mean() < 0.8
