"""Training examples per objective against a per-row Python reference; negatives; log q."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsvm.rec.data.batches import NoTrainingData, make_batch, make_examples
from attnsvm.rec.data.samplers import avoid_row_items, log_q, negative_sampler
from attnsvm.rec.data.sequences import Sequences

rows_strategy = st.lists(
    st.lists(st.integers(1, 9), min_size=0, max_size=12), min_size=1, max_size=8
)


def left_pad(items: list[int], max_len: int) -> list[int]:
    kept = items[-max_len:] if items else []
    return [0] * (max_len - len(kept)) + kept


@settings(max_examples=60)
@given(rows_strategy, st.integers(1, 6))
def test_causal_batches_shift_by_one(rows, max_len):
    train = Sequences.from_lists(rows)
    if max(map(len, rows)) < 2:
        with pytest.raises(NoTrainingData):
            make_examples(train, "causal")
        return
    examples = make_examples(train, "causal")
    batch = make_batch(train, examples, np.arange(len(examples)), "causal", max_len)
    usable = [row for row in rows if len(row) >= 2]
    assert batch.inputs.tolist() == [left_pad(row[:-1], max_len) for row in usable]
    assert batch.targets.tolist() == [left_pad(row[1:], max_len) for row in usable]
    # position t's target is the item after position t: never inside its own input window
    real = batch.inputs != 0
    assert torch.equal(real, batch.targets != 0)


@settings(max_examples=60)
@given(rows_strategy, st.integers(1, 6))
def test_last_position_uses_every_prefix(rows, max_len):
    train = Sequences.from_lists(rows)
    if max(map(len, rows)) < 2:
        return
    examples = make_examples(train, "last")
    batch = make_batch(train, examples, np.arange(len(examples)), "last", max_len)
    expected = [
        (left_pad(row[:end], max_len), row[end])
        for row in rows
        if len(row) >= 2
        for end in range(1, len(row))
    ]
    assert list(zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True)) == expected


def test_cloze_windows_hold_the_whole_row():
    train = Sequences.from_lists([[1, 2, 3, 4], [5], [6, 7]])
    examples = make_examples(train, "cloze")
    batch = make_batch(train, examples, np.arange(len(examples)), "cloze", 3)
    assert batch.inputs.tolist() == [[2, 3, 4], [0, 6, 7]]


def test_no_training_pair_is_a_clear_error():
    with pytest.raises(NoTrainingData, match=r"no user has 2 or more training interactions"):
        make_examples(Sequences.from_lists([[3], [4], [5]]), "causal")


@pytest.mark.parametrize("kind", ["uniform", "popularity"])
def test_negatives_are_real_items_and_never_the_positive(kind):
    popularity = np.array([0, 50, 1, 1, 30, 2, 0, 7])  # item 6 never occurs in training
    sampler = negative_sampler(kind, popularity, seed=3)
    positives = torch.tensor([1, 4, 4, 7, 2] * 40)
    negatives = sampler.sample(positives, 16)
    assert negatives.shape == (200, 16)
    assert negatives.min() >= 1 and negatives.max() <= 7
    assert not (negatives == positives[:, None]).any()
    if kind == "popularity":
        assert not (negatives == 6).any()
    q = log_q(kind, popularity).exp()
    assert q[0] == 0 and torch.isclose(q.sum(), torch.tensor(1.0))


@pytest.mark.parametrize("kind", ["uniform", "popularity"])
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_negatives_avoid_every_item_of_their_row(kind, data):
    num_items = data.draw(st.integers(4, 12))
    num_rows = data.draw(st.integers(1, 5))
    popularity = np.array([0] + [data.draw(st.integers(1, 9)) for _ in range(num_items)])
    # each row holds at most num_items - 1 distinct items, so every row has something to draw
    row_items = np.array(
        [
            data.draw(st.lists(st.integers(0, num_items), min_size=6, max_size=6))
            for _ in range(num_rows)
        ]
    )
    for row in row_items:
        if len(set(row) - {0}) == num_items:
            row[row == row.max()] = 0
    rows = np.array(data.draw(st.lists(st.integers(0, num_rows - 1), min_size=1, max_size=20)))
    sampler = negative_sampler(kind, popularity, seed=data.draw(st.integers(0, 99)))
    negatives = sampler.sample(torch.ones(len(rows), dtype=torch.long), 7)
    negatives = avoid_row_items(negatives, rows, row_items, sampler)
    assert negatives.shape == (len(rows), 7)
    for target, row in enumerate(rows):
        assert not set(negatives[target].tolist()) & set(row_items[row].tolist())
        assert negatives[target].min() >= 1 and negatives[target].max() <= num_items


def test_row_avoiding_negatives_are_uniform_over_the_rest():
    sampler = negative_sampler("uniform", np.ones(9), seed=0)  # items 1..8
    row_items = np.array([[0, 2, 5, 7]])
    negatives = sampler.sample(torch.full((20_000,), 2), 1)
    negatives = avoid_row_items(negatives, np.zeros(20_000, dtype=int), row_items, sampler)
    counts = np.bincount(negatives.numpy().ravel(), minlength=9)
    assert counts[[0, 2, 5, 7]].sum() == 0
    # 5 items left, 4,000 expected each; 5 sigma ≈ 280
    assert np.abs(counts[[1, 3, 4, 6, 8]] - 4000).max() < 300


def test_a_row_holding_every_item_is_a_clear_error():
    sampler = negative_sampler("uniform", np.ones(4), seed=0)  # items 1..3
    with pytest.raises(ValueError, match="training row 1 holds every item"):
        avoid_row_items(
            torch.ones(2, 1, dtype=torch.long),
            np.array([0, 1]),
            np.array([[1, 0, 0], [1, 2, 3]]),
            sampler,
        )
