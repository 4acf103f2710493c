"""Split properties on random tables (hypothesis) and hand-checked small cases."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.interactions import Interactions
from attnsvm.rec.data.splits import leave_one_out, session_split, temporal_split

tables = st.lists(
    st.tuples(st.integers(0, 6), st.integers(1, 9), st.integers(0, 5)), min_size=1, max_size=60
)


def build(rows):
    user, item, time = (np.array(c) for c in zip(*rows, strict=True))
    return Interactions.from_columns(user, item, time.astype(float))


def rows_by_user(data):
    """user → list of (item, time) in table order (the stable chronological order)."""
    out = {}
    for u, i, t in zip(
        data.user.tolist(), data.item.tolist(), data.timestamp.tolist(), strict=True
    ):
        out.setdefault(u, []).append((i, t))
    return out


@given(tables)
def test_leave_one_out(rows):
    data = build(rows)
    if np.bincount(data.user).max() < 3:
        with pytest.raises(DataFormatError, match="3 events"):
            leave_one_out(data)
        return
    split = leave_one_out(data)
    per_user = rows_by_user(data)
    evaluated = [u for u, events in per_user.items() if len(events) >= 3]
    assert split.test.users.tolist() == evaluated == split.valid.users.tolist()
    for r, u in enumerate(split.test.users.tolist()):
        items = [i for i, _ in per_user[u]]
        assert split.test.targets.row(r).tolist() == [items[-1]]  # last event is the test
        assert split.valid.targets.row(r).tolist() == [items[-2]]
        assert split.train.row(u).tolist() == items[:-2]  # nothing after validation in train
        assert split.valid.history.row(r).tolist() == items[:-2]
        assert split.test.history.row(r).tolist() == items[:-1]
        for task in (split.valid, split.test):
            target = set(task.targets.row(r).tolist())
            assert task.exclude.row(r).tolist() == sorted(
                set(task.history.row(r).tolist()) - target
            )
    for u, events in per_user.items():  # short users are train only
        if len(events) < 3:
            assert split.train.row(u).tolist() == [i for i, _ in events]
    assert split.num_items == data.num_items and split.protocol == "leave-one-out"


@given(tables, st.floats(0.1, 0.9), st.floats(0.0, 0.5), st.sampled_from(["drop", "keep"]))
def test_temporal_split(rows, valid_q, gap, policy):
    data = build(rows)
    test_q = min(valid_q + gap, 0.95)
    split = temporal_split(data, valid_q, test_q, unseen_policy=policy)
    valid_cut, test_cut = np.quantile(data.timestamp, [valid_q, test_q])
    per_user = rows_by_user(data)
    for u, events in per_user.items():  # no event at or after the cut in train
        assert split.train.row(u).tolist() == [i for i, t in events if t < valid_cut]
    for task, lo, hi in ((split.valid, valid_cut, test_cut), (split.test, test_cut, np.inf)):
        for r, u in enumerate(task.users.tolist()):
            history = [i for i, t in per_user[u] if t < lo]
            assert task.history.row(r).tolist() == history
            window = list(dict.fromkeys(i for i, t in per_user[u] if lo <= t < hi))
            if policy == "drop":
                seen = {i for evs in per_user.values() for i, t in evs if t < lo}
                window = [i for i in window if i in seen]
                assert history
            assert task.targets.row(r).tolist() == window and window
            assert set(task.exclude.row(r).tolist()) == set(history) - set(window)


def test_temporal_needs_timestamps():
    data = Interactions.from_columns(np.array([0, 0]), np.array([1, 2]))
    with pytest.raises(DataFormatError, match="no timestamps"):
        temporal_split(data)


def test_temporal_drop_policy_by_hand():
    # times 0..9; cuts at quantiles 0.5/0.8 → 4.5 and 7.2
    user = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 2])
    item = np.array([1, 2, 3, 4, 9, 1, 2, 5, 3, 1])
    time = np.array([0, 1, 2, 3, 5, 4, 6, 7, 8, 9.0])
    split = temporal_split(Interactions.from_columns(user, item, time), 0.5, 0.8)
    assert split.valid.users.tolist() == [1]  # user 0's item 9 is cold, user 2 has no history
    assert split.valid.targets.to_lists() == [[2]]  # item 5 (t=7) is cold before 4.5
    assert split.test.users.tolist() == [1]  # user 2 has no history before 7.2
    assert split.test.targets.to_lists() == [[3]]
    assert split.test.exclude.to_lists() == [[1, 2, 5]]


@given(
    st.lists(st.lists(st.integers(1, 6), min_size=1, max_size=6), min_size=3, max_size=20),
    st.sampled_from(["drop", "keep"]),
)
def test_session_split(sessions, policy):
    session = np.repeat(np.arange(len(sessions)), [len(s) for s in sessions])
    items = np.concatenate(sessions)
    data = Interactions.from_columns(session, items, timestamp=session.astype(float))
    split = session_split(data, 0.2, 0.2, unseen_policy=policy)
    ext = split.item_ids
    train_items = set(ext[split.train.items].tolist())
    n = len(sessions)
    n_test = max(1, round(n * 0.2))
    n_valid = round(n * 0.2)
    assert split.train.users.tolist() == list(range(n - n_test - n_valid))
    expected = []
    for s in range(n - n_test, n):
        clicks = [i for i in sessions[s] if policy == "keep" or i in train_items]
        expected += [(s, clicks[:k], clicks[k]) for k in range(1, len(clicks))]
    got = [
        (u, ext[split.test.history.row(r)].tolist(), ext[split.test.targets.row(r)].item())
        for r, u in enumerate(split.test.users.tolist())
    ]
    assert got == expected
    assert split.test.exclude.items.size == 0
