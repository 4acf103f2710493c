"""Interactions: id maps, stable order, filters (k-core against brute force), stats, cache."""

from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.interactions import Interactions

events = st.lists(
    st.tuples(st.integers(0, 5), st.integers(10, 17), st.integers(0, 3)), min_size=1, max_size=40
)


def table(rows, with_time=True):
    user, item, time = (np.array(c) for c in zip(*rows, strict=True))
    return Interactions.from_columns(user, item, time if with_time else None)


def test_ids_are_ascending_external_ids_and_zero_is_padding():
    data = Interactions.from_columns(np.array([30, 10, 30]), np.array([7, 5, 9]))
    assert data.user_ids.tolist() == [10, 30]
    assert data.item_ids[1:].tolist() == [5, 7, 9]
    assert data.user.tolist() == [0, 1, 1]
    assert data.item.tolist() == [1, 2, 3]  # user 10: item 5; user 30: items 7 then 9


def test_string_ids_are_kept_as_strings():
    data = Interactions.from_columns(np.array(["b", "a"]), np.array(["x", "y"]))
    assert data.user_ids.tolist() == ["a", "b"]
    assert data.item_ids[1:].tolist() == ["x", "y"]


@given(events)
def test_rows_are_sorted_by_user_then_time_and_ties_keep_file_order(rows):
    data = table(rows)
    expected = sorted(range(len(rows)), key=lambda k: (rows[k][0], rows[k][2], k))
    assert data.user_ids[data.user].tolist() == [rows[k][0] for k in expected]
    assert data.item_ids[data.item].tolist() == [rows[k][1] for k in expected]
    assert data.timestamp.tolist() == [rows[k][2] for k in expected]


def brute_force_core(rows, user_min, item_min):
    """The largest (users, items) vertex set whose induced events meet both thresholds."""
    users = sorted({u for u, _, _ in rows})
    items = sorted({i for _, i, _ in rows})
    best = set()
    for nu in range(len(users), -1, -1):
        for keep_users in combinations(users, nu):
            for ni in range(len(items), -1, -1):
                for keep_items in combinations(items, ni):
                    kept = [
                        k for k, (u, i, _) in enumerate(rows) if u in keep_users and i in keep_items
                    ]
                    uc = {u: sum(rows[k][0] == u for k in kept) for u in keep_users}
                    ic = {i: sum(rows[k][1] == i for k in kept) for i in keep_items}
                    if (
                        all(c >= user_min for c in uc.values())
                        and all(c >= item_min for c in ic.values())
                        and len(kept) > len(best)
                    ):
                        best = set(kept)
    return best


@settings(max_examples=40)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.just(0)), min_size=1, max_size=14),
    st.integers(1, 3),
    st.integers(1, 3),
)
def test_k_core_is_the_largest_core(rows, user_min, item_min):
    data = table(rows, with_time=False)
    best = brute_force_core(rows, user_min, item_min)
    if not best:
        with pytest.raises(DataFormatError, match="removes every interaction"):
            data.k_core(user_min, item_min)
        return
    core = data.k_core(user_min, item_min)
    assert np.bincount(core.user).min() >= user_min
    assert np.bincount(core.item)[1:].min() >= item_min
    assert len(core) == len(best)
    got = sorted(
        zip(core.user_ids[core.user].tolist(), core.item_ids[core.item].tolist(), strict=True)
    )
    assert got == sorted((rows[k][0], rows[k][1]) for k in best)


def test_one_pass_core_counts_once():
    # item 20 has 1 event: one pass drops just that row
    data = Interactions.from_columns(np.array([0, 0, 1, 1, 1]), np.array([10, 20, 10, 11, 11]))
    one = data.k_core(2, 2, iterative=False)
    assert sorted(one.item_ids[one.item].tolist()) == [10, 10, 11, 11]
    iterated = data.k_core(2, 2)  # then user 0 has 1 event left, then item 10 has one
    assert iterated.item_ids[iterated.item].tolist() == [11, 11]


def test_dedup_policies():
    data = Interactions.from_columns(np.zeros(5, int), np.array([1, 1, 2, 1, 2]))

    def items(d):
        return d.item_ids[d.item].tolist()

    assert items(data.dedup("keep")) == [1, 1, 2, 1, 2]
    assert items(data.dedup("consecutive")) == [1, 2, 1, 2]
    assert items(data.dedup("all")) == [1, 2]
    with pytest.raises(ValueError, match="dedup policy"):
        data.dedup("sometimes")


def test_rating_and_length_filters():
    data = Interactions.from_columns(
        np.array([0, 0, 1]), np.array([1, 2, 3]), rating=np.array([5.0, 2.0, 4.0])
    )
    assert len(data.filter_min_rating(4)) == 2
    assert data.filter_min_length(2).user_ids.tolist() == [0]
    with pytest.raises(DataFormatError, match="has no ratings"):
        Interactions.from_columns(np.array([0]), np.array([1])).filter_min_rating(3)


def test_stats_and_sequences():
    data = Interactions.from_columns(np.array([0, 0, 0, 1]), np.array([5, 6, 5, 6]))
    stats = data.stats("toy")
    assert (stats.users, stats.items, stats.interactions) == (2, 2, 4)
    assert stats.density == 1.0
    assert (stats.length_min, stats.length_max, stats.length_mean) == (1, 3, 2.0)
    assert data.to_sequences().to_lists() == [[1, 2, 1], [2]]


def test_save_load_round_trip_without_pickles(tmp_path):
    data = Interactions.from_columns(
        np.array(["u1", "u2"]),
        np.array([3, 4]),
        timestamp=np.array([1.5, 2.5]),
        rating=np.array([1.0, 2.0]),
        source="x.csv",
    )
    path = data.save(tmp_path / "cache" / "t.npz", {"k": 1})
    back = Interactions.load(path)
    for name in ("user", "item", "user_ids", "item_ids", "timestamp", "rating"):
        assert np.array_equal(getattr(back, name), getattr(data, name))
    assert back.source == "x.csv"
    assert [p.name for p in path.parent.iterdir()] == ["t.npz"]


def test_load_of_a_damaged_cache_names_the_file(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(DataFormatError, match=r"bad\.npz"):
        Interactions.load(bad)


@given(st.lists(st.integers(-5, 3000), min_size=1, max_size=50))
def test_id_maps_equal_numpy_unique(ids):
    values = np.array(ids)
    data = Interactions.from_columns(values, values)
    assert data.user_ids.tolist() == np.unique(values).tolist()
    assert data.user_ids[data.user].tolist() == sorted(ids)
