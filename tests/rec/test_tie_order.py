"""``benchmarks/tie_order.py``: tie orders move only same-second events, and the tie share;
``write_per_user`` writes what ``read_per_user`` reads."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from attnsvm.rec.data.interactions import Interactions
from attnsvm.rec.data.readers import read_per_user, write_per_user

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _tie_order():
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("tie_order", BENCHMARKS / "tie_order.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tie_orders_permute_only_same_second_events(tmp_path):
    tie_order = _tie_order()
    # user 1: items 9, 3 at t=1, then 7, 5 at t=2 (the test item tied with the validation one)
    # user 2: 4 at t=1, 8 at t=2, 6 at t=3 (no tie at the end)
    data = Interactions.from_columns(
        np.array([1, 1, 2, 1, 1, 2, 2]),
        np.array([9, 3, 4, 7, 5, 8, 6]),
        np.array([1, 1, 1, 2, 2, 2, 3]),
    )
    assert tie_order.tied_test_share(data) == 0.5
    reordered = {variant: tie_order.reorder_ties(data, variant) for variant in tie_order.VARIANTS}
    external = {v: d.item_ids[d.item].tolist() for v, d in reordered.items()}
    assert external["file"] == [9, 3, 7, 5, 4, 8, 6]
    assert external["item id"] == [3, 9, 5, 7, 4, 8, 6]
    for items in external.values():  # the time order between seconds never changes
        assert sorted(items[:2]) == [3, 9] and sorted(items[2:4]) == [5, 7]
        assert items[4:] == [4, 8, 6]
    path = tmp_path / "seq.txt"
    write_per_user(reordered["item id"], path)
    assert path.read_text() == "1 3 9 5 7\n2 4 8 6\n"
    again = read_per_user(path)
    assert again.item_ids[again.item].tolist() == [3, 9, 5, 7, 4, 8, 6]


def test_write_per_user_round_trips_external_ids(tmp_path):
    data = Interactions.from_columns(np.array([7, 3, 7, 3, 7]), np.array([50, 40, 60, 41, 50]))
    path = write_per_user(data, tmp_path / "seq.txt")
    assert path.read_text() == "3 40 41\n7 50 60 50\n"
    again = read_per_user(path)
    assert again.user_ids.tolist() == [3, 7]
    assert again.item_ids[again.item].tolist() == [40, 41, 50, 60, 50]
    assert [p.name for p in tmp_path.iterdir()] == ["seq.txt"]  # no temporary file left
