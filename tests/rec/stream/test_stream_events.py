"""The global event stream: time order, each event's own history, bad input, and the two real
streams of the benchmark."""

import numpy as np
import pytest

from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.interactions import Interactions
from attnsvm.rec.stream.events import EventStream, load_stream


def table(users, items, times):
    return Interactions.from_columns(
        np.array(users), np.array(items), timestamp=np.array(times, dtype=float)
    )


def test_events_go_in_time_order_and_ties_keep_the_tables_order():
    # user 1: a@5 b@5 (same second, file order a then b); user 2: c@1 d@5 e@9
    data = table([2, 1, 2, 1, 2], [30, 10, 40, 20, 50], [1, 5, 5, 5, 9])
    stream = EventStream.from_interactions(data)
    external = stream.item_ids[stream.item].tolist()
    assert external == [30, 10, 20, 40, 50]  # at t = 5: user 1 (a, b in file order), then 2
    assert stream.time.tolist() == [1, 5, 5, 5, 9]
    assert stream.previous.tolist() == [-1, -1, 1, 0, 3]


def test_histories_are_the_users_earlier_items_newest_last_never_the_event_itself():
    data = table([1, 1, 2, 1, 2, 1], [10, 20, 30, 40, 50, 60], [1, 2, 3, 4, 5, 6])
    stream = EventStream.from_interactions(data)
    ids = stream.item_ids
    histories = stream.histories(np.arange(len(stream)), 2)
    as_external = [[int(ids[i]) if i else 0 for i in row] for row in histories]
    assert as_external == [[0, 0], [0, 10], [0, 0], [10, 20], [0, 30], [20, 40]]


def test_chunks_cover_the_stream_in_order():
    stream = EventStream.from_interactions(table([1] * 7, list(range(1, 8)), list(range(7))))
    assert [(c.start, c.stop) for c in stream.chunks(3)] == [(0, 3), (3, 6), (6, 7)]
    assert [(c.start, c.stop) for c in stream.chunks(3, limit=5)] == [(0, 3), (3, 5)]


def test_bad_input_is_a_clear_error(tmp_path):
    empty = table([], [], [])
    with pytest.raises(DataFormatError, match="empty"):
        EventStream.from_interactions(empty)
    untimed = Interactions.from_columns(np.array([1, 1]), np.array([5, 6]))
    with pytest.raises(DataFormatError, match="no event times"):
        EventStream.from_interactions(untimed)
    missing = table([1, 2], [5, 6], [1.0, np.nan])
    with pytest.raises(DataFormatError, match="user 2 and item 6 has a missing or non-finite"):
        EventStream.from_interactions(missing)
    clicks = tmp_path / "clicks.txt"
    clicks.write_text("SessionId\tItemId\tTime\n1\t5\t10.0\n1\t6\tinf\n")
    with pytest.raises(DataFormatError, match=r"clicks.txt:3: .*not finite"):
        load_stream(str(clicks))
    clicks.write_text("SessionId\tItemId\tTime\n1\t5\t10.0\n1\t6\n")
    with pytest.raises(DataFormatError, match=r"clicks.txt:3"):
        load_stream(str(clicks))
    clicks.write_text("SessionId\tItemId\tTime\n")
    with pytest.raises(DataFormatError, match=r"clicks\.txt: has no data lines"):
        load_stream(str(clicks))
    with pytest.raises(DataFormatError, match=r"needs data\.root"):
        load_stream("yoochoose-100k")


@pytest.mark.data
def test_the_benchmark_streams(shared_data):
    movielens = load_stream("ml-100k", shared_data)
    assert len(movielens) == 100_000 and movielens.num_items == 1_682
    assert np.all(np.diff(movielens.time) >= 0)
    clicks = load_stream("yoochoose-100k", shared_data)
    assert len(clicks) == 70_278 + 13_568 and np.all(np.diff(clicks.time) >= 0)
    # the test file is the following day: its clicks come last
    assert clicks.time[-13_569] < 1_396_831_793.197 == clicks.time[-13_568]
    assert (clicks.previous < 0).sum() == 17_794 + 3_416  # one first click per session
