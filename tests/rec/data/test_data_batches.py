"""Sliding windows and negative samplers: every target covered, no padding negatives, exact
exclusion, determinism. (The examples and batches of each objective: test_data_examples.py.)"""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attnsvm.rec.data.batches import sliding_windows
from attnsvm.rec.data.samplers import PopularitySampler, UniformSampler, in_batch_sampler
from attnsvm.rec.data.sequences import Sequences

lengths = st.lists(st.integers(1, 12), min_size=1, max_size=12)


def distinct_rows(row_lengths, seed=0):
    """Rows whose items are all different, so an item value identifies its event."""
    total = sum(row_lengths)
    items = np.random.default_rng(seed).permutation(total) + 1
    offsets = np.concatenate([[0], np.cumsum(row_lengths)])
    return Sequences(offsets, items, np.arange(len(row_lengths)) + 100)


@given(lengths, st.integers(2, 6), st.integers(1, 5))
def test_sliding_windows_cover_every_target(row_lengths, window, stride):
    if stride >= window:
        with pytest.raises(ValueError, match="stride < window"):
            sliding_windows(distinct_rows(row_lengths), window, stride)
        return
    seqs = distinct_rows(row_lengths)
    windows = sliding_windows(seqs, window, stride)
    covered = set()
    for r in range(len(windows)):
        piece = windows.row(r).tolist()
        row = seqs.row(windows.users[r] - 100).tolist()
        start = row.index(piece[0])
        assert piece == row[start : start + len(piece)] and len(piece) <= window
        covered |= set(piece[1:])
    for r in range(len(seqs)):
        row = seqs.row(r).tolist()
        assert set(row[1:]) <= covered
        last = [windows.row(w).tolist() for w in range(len(windows)) if windows.users[w] == r + 100]
        assert last[-1][-1] == row[-1]


positives = st.lists(st.integers(0, 7), min_size=1, max_size=30)


@given(positives, st.integers(1, 4), st.booleans())
def test_uniform_sampler(pos, k, exclude):
    negatives = UniformSampler(7, seed=0).sample(torch.tensor(pos), k, exclude)
    assert negatives.shape == (len(pos), k) and negatives.dtype == torch.long
    assert negatives.min() >= 1 and negatives.max() <= 7
    if exclude:
        assert not (negatives == torch.tensor(pos)[:, None])[torch.tensor(pos) > 0].any()


@given(positives, st.integers(1, 4))
def test_popularity_and_in_batch_samplers(pos, k):
    counts = np.array([9, 5, 0, 1, 3, 0, 2, 8])
    sampler = PopularitySampler(counts, seed=0)
    negatives = sampler.sample(np.array(pos), k, exclude_positive=True).numpy()
    assert negatives.min() >= 1
    assert not np.isin(negatives, [0, 2, 5]).any()  # padding and zero-count items never
    assert not (negatives == np.array(pos)[:, None]).any()
    real = np.array(pos)[np.array(pos) > 0]
    if np.unique(real).size >= 2:
        drawn = in_batch_sampler(real, 7, seed=1).sample(real, k).numpy()
        assert np.isin(drawn, real).all() and not (drawn == real[:, None]).any()


def test_samplers_draw_the_right_distributions():
    n = 200_000
    uniform = UniformSampler(4, seed=0).sample(np.full(n, 2), 1).numpy().ravel()
    freq = np.bincount(uniform, minlength=5) / n
    assert freq[0] == 0 and freq[2] == 0
    assert np.allclose(freq[[1, 3, 4]], 1 / 3, atol=0.01)
    counts = np.array([0, 6, 3, 1])
    popular = PopularitySampler(counts, seed=0).sample(np.full(n, 1), 1).numpy().ravel()
    freq = np.bincount(popular, minlength=4) / n  # conditioned on "not item 1": 3:1
    assert np.allclose(freq, [0, 0, 0.75, 0.25], atol=0.01)
    alpha = PopularitySampler(counts, alpha=0.0, seed=0).sample(np.zeros(n, int), 1).numpy()
    assert np.allclose(np.bincount(alpha.ravel(), minlength=4)[1:] / n, 1 / 3, atol=0.01)


def test_samplers_refuse_impossible_requests():
    with pytest.raises(ValueError, match="at least 2 items"):
        UniformSampler(1)
    with pytest.raises(ValueError, match="at least 2 items"):
        PopularitySampler(np.array([5, 3, 0]))
