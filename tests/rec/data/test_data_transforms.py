"""Training-row transforms, the synthetic-prefix artefact, and nearest examples by item sets."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsvm.rec.config import DataConfig
from attnsvm.rec.config_base import ConfigError
from attnsvm.rec.data.batches import Examples, make_examples
from attnsvm.rec.data.pairs import _Search, nearest_examples, window_sets
from attnsvm.rec.data.sequences import Sequences
from attnsvm.rec.data.splits import Split
from attnsvm.rec.data.transforms import (
    HEADER,
    prepend_synthetic,
    read_synthetic_prefix,
    reverse_rows,
    training_rows,
    write_synthetic_prefix,
)


def rows_with_times() -> Sequences:
    rows = Sequences.from_lists([[1, 2, 3], [4], [5, 6]], users=[0, 1, 2])
    times = np.arange(rows.items.size, dtype=np.float64) * 10
    return Sequences(rows.offsets, rows.items, rows.users, times, times + 1)


def fake_split(train: Sequences, num_items: int = 12) -> Split:
    """A split whose external ids differ from the internal ones (items "i1".., users "u0"..)."""
    item_ids = np.array(["pad", *[f"i{i}" for i in range(1, num_items + 1)]])
    user_ids = np.array([f"u{u}" for u in range(len(train))])
    return Split(train, None, None, num_items, len(train), item_ids, user_ids, "test")


def test_reversal_keeps_rows_users_times_and_ratings_aligned():
    rows = rows_with_times()
    reversed_rows = reverse_rows(rows)
    assert reversed_rows.to_lists() == [[3, 2, 1], [4], [6, 5]]
    np.testing.assert_array_equal(reversed_rows.times, [20, 10, 0, 30, 50, 40])
    np.testing.assert_array_equal(reversed_rows.ratings, reversed_rows.times + 1)
    assert reverse_rows(reversed_rows).to_lists() == rows.to_lists()


def write_prefix(folder, users, per_user, mode="no_leak"):
    offsets = np.concatenate([[0], np.cumsum([len(items) for items in per_user])])
    items = [item for user_items in per_user for item in user_items]
    write_synthetic_prefix(folder, np.array(users), offsets, np.array(items), {"mode": mode})


def test_prepending_takes_the_items_nearest_the_row_first_within_both_limits(tmp_path):
    rows = rows_with_times()
    split = fake_split(rows)
    # u0's generated items, in generation order: i7 just before its first item, then i8, i9
    write_prefix(tmp_path, ["u0", "u2", "nobody"], [["i7", "i8", "i9"], ["i10", "i11"], ["i1"]])
    prefix = read_synthetic_prefix(tmp_path)
    assert prefix.header["synthetic"] is True and prefix.header["mode"] == "no_leak"
    every = prepend_synthetic(rows, prefix, split)
    assert every.to_lists() == [[9, 8, 7, 1, 2, 3], [4], [11, 10, 5, 6]]
    np.testing.assert_array_equal(every.users, rows.users)
    # synthetic events get the row's first time and rating 0; real ones keep theirs
    np.testing.assert_array_equal(every.times, [0, 0, 0, 0, 10, 20, 30, 40, 40, 40, 50])
    np.testing.assert_array_equal(every.ratings, [0, 0, 0, 1, 11, 21, 31, 0, 0, 41, 51])
    limited = prepend_synthetic(rows, prefix, split, limit=1)
    assert limited.to_lists() == [[7, 1, 2, 3], [4], [10, 5, 6]]
    below = prepend_synthetic(rows, prefix, split, below=4)  # rows grow to 4 items at most
    assert below.to_lists() == [[7, 1, 2, 3], [4], [11, 10, 5, 6]]
    config = DataConfig(synthetic_prefix=str(tmp_path), synthetic_items=2, reverse_train=True)
    assert training_rows(split, config).to_lists() == [[3, 2, 1, 7, 8], [4], [6, 5, 10, 11]]


def test_the_artefact_is_versioned_and_speaks_the_catalogue(tmp_path):
    rows = rows_with_times()
    write_prefix(tmp_path, ["u0"], [["i99"]])
    with pytest.raises(ConfigError, match="not in this data's catalogue"):
        prepend_synthetic(rows, read_synthetic_prefix(tmp_path), fake_split(rows))
    header = json.loads((tmp_path / HEADER).read_text())
    (tmp_path / HEADER).write_text(json.dumps({**header, "version": 99}))
    with pytest.raises(ConfigError, match="version 99"):
        read_synthetic_prefix(tmp_path)
    with pytest.raises(ConfigError, match="not a readable artefact"):
        read_synthetic_prefix(tmp_path / "missing")


def brute_force_neighbours(rows: Sequences, examples, max_len: int, k: int) -> np.ndarray:
    sets = []
    for row, end in zip(examples.rows, examples.ends, strict=True):
        sets.append(set(rows.row(int(row))[:end][-max_len:].tolist()))
    out = []
    for a in sets:
        distance = [len(a) + len(b) - 2 * len(a & b) for b in sets]
        out.append(sorted(range(len(sets)), key=lambda j: (distance[j], j))[:k])
    return np.array(out)


@pytest.mark.parametrize("budget", [10**9, 30])
def test_nearest_examples_match_an_exhaustive_search(budget):
    rng = np.random.default_rng(0)
    rows = Sequences.from_lists(
        [rng.choice(np.arange(1, 16), size=rng.integers(2, 9)).tolist() for _ in range(15)]
    )
    examples = make_examples(rows, "last")
    found = nearest_examples(rows, examples, 4, 15, k=5, budget=budget)
    np.testing.assert_array_equal(found, brute_force_neighbours(rows, examples, 4, 5))
    sets = window_sets(rows, examples, 4, 15)
    assert sets.shape == (len(examples), 16) and set(np.unique(sets.data)) == {1}


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    longest=st.integers(3, 40),
    max_len=st.integers(1, 50),
    k=st.integers(1, 8),
    repeats=st.floats(0, 1),
    subset=st.booleans(),
    budget=st.sampled_from([30, 10**9]),
)
def test_nearest_examples_match_an_exhaustive_search_on_long_rows(
    seed, longest, max_len, k, repeats, subset, budget
):
    """Rows long against the window (most queries then search only the rows holding enough of
    their items) or short (a window that reaches past every row), some repeating items, any
    subset of the examples in any order."""
    rng = np.random.default_rng(seed)
    catalogue = int(rng.integers(5, 40))
    lists = []
    for _ in range(int(rng.integers(2, 10))):
        length = int(rng.integers(2, longest))
        distinct = length <= catalogue and rng.random() >= repeats
        lists.append(rng.choice(np.arange(1, catalogue + 1), length, replace=not distinct))
    rows = Sequences.from_lists([row.tolist() for row in lists])
    examples = make_examples(rows, "last")
    if subset:
        chosen = rng.permutation(len(examples))[: max(1, len(examples) // 2)]
        examples = Examples(examples.rows[chosen], examples.ends[chosen])
    found = nearest_examples(rows, examples, max_len, catalogue, k, budget=budget)
    wanted = brute_force_neighbours(rows, examples, max_len, min(k, len(examples)))
    np.testing.assert_array_equal(found, wanted)


def test_a_long_rows_windows_search_the_rows_holding_their_items():
    """Where rows are long and repeat nothing, nearly every window is bounded by its own row's
    neighbours and searched by rows; the search must then still find windows of other rows."""
    rng = np.random.default_rng(1)
    base = rng.permutation(np.arange(1, 61))
    copy = base.copy()
    copy[[5, 40]] = copy[[40, 5]]  # another user with the same items, two swapped
    rows = Sequences.from_lists([base.tolist(), copy.tolist(), rng.permutation(60)[:30] + 1])
    examples = make_examples(rows, "last")
    search = _Search(rows, examples, 10, 60, 4)
    assert (search.sizes > search.reach()).mean() > 0.8
    found = nearest_examples(rows, examples, 10, 60, 4)
    np.testing.assert_array_equal(found, brute_force_neighbours(rows, examples, 10, 4))
    assert (examples.rows[found[examples.rows == 0]] == 1).any()  # the other user's windows
