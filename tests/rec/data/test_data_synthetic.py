"""The planted generator: the ground truth is what the sequences say it is."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsvm.rec.data.splits import leave_one_out
from attnsvm.rec.data.synthetic import make_planted


@settings(max_examples=30)
@given(
    st.integers(1, 40),
    st.integers(3, 25),
    st.integers(1, 5),
    st.floats(0.0, 1.0),
    st.integers(0, 10**6),
)
def test_ground_truth_matches_the_sequences(users, length, triggers, noise, seed):
    data, truth = make_planted(users, 2 * triggers + 12, length, triggers, noise=noise, seed=seed)
    seqs = data.to_sequences()
    rows = np.stack([seqs.row(r) for r in range(users)])
    assert rows.shape == (users, length)
    is_trigger = truth.trigger_to_target[rows] > 0
    assert (rows[np.arange(users), truth.trigger_position] == truth.trigger_item).all()
    assert (truth.trigger_to_target[truth.trigger_item] == truth.target_item).all()
    assert ((rows[:, -1] == truth.target_item) == truth.planted).all()
    # the selected trigger is the last trigger before the end: nothing later can explain it
    for u in range(users):
        later = is_trigger[u, truth.trigger_position[u] + 1 : -1]
        assert not later.any()
    targets = set(truth.trigger_to_target[truth.trigger_to_target > 0].tolist())
    noise_positions = ~is_trigger & ~np.isin(rows, list(targets))
    assert (rows[noise_positions] >= 1).all()
    if noise == 0.0:
        assert truth.planted.all()


def test_leave_one_out_targets_are_planted_and_training_holds_episodes():
    data, truth = make_planted(seed=7)
    split = leave_one_out(data)
    assert (split.test.targets.items == truth.target_item).all()
    assert split.num_items == 300 and split.num_users == 2000
    train_targets = np.isin(split.train.items, truth.trigger_to_target[truth.trigger_to_target > 0])
    assert train_targets.sum() > 1000  # earlier episodes teach the map


def test_seed_fixes_everything_and_arguments_are_checked():
    a, ta = make_planted(50, 60, 10, 4, seed=3)
    b, tb = make_planted(50, 60, 10, 4, seed=3)
    assert (a.item == b.item).all() and (ta.trigger_position == tb.trigger_position).all()
    c, _ = make_planted(50, 60, 10, 4, seed=4)
    assert not (a.item == c.item).all()
    with pytest.raises(ValueError, match="num_items"):
        make_planted(10, 5, 10, 4)
    with pytest.raises(ValueError, match="length"):
        make_planted(10, 50, 2, 4)
