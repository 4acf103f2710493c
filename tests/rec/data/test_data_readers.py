"""Readers on small hand-written files: every format gives the same table."""

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnsvm.rec.data import readers


def events(data):
    """(external user, external item) pairs in the table's order."""
    return list(
        zip(data.user_ids[data.user].tolist(), data.item_ids[data.item].tolist(), strict=True)
    )


EXPECTED = [(1, 10), (1, 30), (1, 20), (2, 20)]  # user 1: 10 (t=5), 30 (t=7), 20 (t=7); 2: 20


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_movielens_dat(tmp_path):
    path = write(tmp_path, "ratings.dat", "1::30::4::7\n2::20::3::1\n1::10::5::5\n1::20::1::7\n")
    data = readers.read_movielens_dat(path)
    assert events(data) == EXPECTED  # the tie at t=7 keeps file order: 30 before 20
    assert data.rating.tolist() == [5.0, 4.0, 1.0, 3.0]
    assert data.timestamp.tolist() == [5.0, 7.0, 7.0, 1.0]


def test_movielens_udata(tmp_path):
    path = write(tmp_path, "u.data", "1\t30\t4\t7\n2\t20\t3\t1\n1\t10\t5\t5\n1\t20\t1\t7\n")
    assert events(readers.read_movielens_udata(path)) == EXPECTED


def test_movielens_csv_with_crlf_and_bom(tmp_path):
    path = tmp_path / "ratings.csv"
    path.write_bytes(
        "\ufeffuserId,movieId,rating,timestamp\r\n1,30,4.0,7\r\n2,20,3.5,1\r\n"
        "1,10,5.0,5\r\n1,20,1.0,7\r\n".encode()
    )
    assert events(readers.read_movielens_csv(path)) == EXPECTED


def test_per_user_and_pairs_and_blank_lines(tmp_path):
    per_user = write(tmp_path, "a.txt", "1 10 30 20\n\n2 20\n")
    pairs = write(tmp_path, "b.txt", "1 10\n1 30\n2 20\n1 20\n")
    assert events(readers.read_per_user(per_user)) == EXPECTED
    assert events(readers.read_pairs(pairs)) == EXPECTED
    assert readers.read_per_user(per_user).timestamp is None


def test_recbole_inter_with_string_tokens(tmp_path):
    path = write(
        tmp_path,
        "x.inter",
        "user_id:token\titem_id:token\ttimestamp:float\n"
        "u1\ti30\t7\nu2\ti20\t1\nu1\ti10\t5\nu1\ti20\t7\n",
    )
    data = readers.read_recbole_inter(path)
    assert events(data) == [("u1", "i10"), ("u1", "i30"), ("u1", "i20"), ("u2", "i20")]


def test_session_tsv_and_session_lines(tmp_path):
    tsv = write(
        tmp_path,
        "s.txt",
        "SessionId\tItemId\tTime\n1\t10\t5.5\n1\t30\t7.25\n2\t20\t1\n1\t20\t7.25\n",
    )
    assert events(readers.read_session_tsv(tsv)) == EXPECTED
    lines = write(tmp_path, "l.txt", "10 30 20\n20\n")
    assert events(readers.read_session_lines(lines)) == EXPECTED


def test_table_csv_tsv_and_parquet(tmp_path):
    csv = write(tmp_path, "t.csv", "who,what,when\n1,30,7\n2,20,1\n1,10,5\n1,20,7\n")
    assert events(readers.read_table(csv, user="who", item="what", timestamp="when")) == EXPECTED
    tsv = write(tmp_path, "t.tsv", "1\t30\t7\n2\t20\t1\n1\t10\t5\n1\t20\t7\n")
    data = readers.read_table(tsv, user=0, item=1, timestamp=2, header=False)
    assert events(data) == EXPECTED
    parquet = tmp_path / "t.parquet"
    pl.DataFrame({"u": [1, 2, 1, 1], "i": [30, 20, 10, 20], "t": [7, 1, 5, 7]}).write_parquet(
        parquet
    )
    assert events(readers.read_table(parquet, user="u", item="i", timestamp="t")) == EXPECTED


@pytest.mark.parametrize(
    ("name", "text", "reader"),
    [
        ("ratings.dat", "1::10::5::5\n", "read_movielens_dat"),
        ("u.data", "1\t10\t5\t5\n", "read_movielens_udata"),
        ("r.csv", "userId,movieId,rating,timestamp\n1,10,5,5\n", "read_movielens_csv"),
        ("x.inter", "user_id:token\titem_id:token\n1\t10\n", "read_recbole_inter"),
        ("s.txt", "SessionId\tItemId\tTime\n1\t10\t5\n", "read_session_tsv"),
        ("p.txt", "1 10\n1 11\n", "read_pairs"),
        ("q.txt", "1 10 11\n2 10\n", "read_per_user"),
    ],
)
def test_read_auto_picks_the_reader(tmp_path, name, text, reader):
    path = write(tmp_path, name, text)
    expected = getattr(readers, reader)(path)
    got = readers.read_auto(path)
    assert events(got) == events(expected)
    assert np.array_equal(got.user, expected.user)


rating_rows = st.lists(
    st.tuples(st.integers(-3, 40), st.integers(0, 2**40), st.integers(1, 5), st.integers(0, 10**9)),
    min_size=1,
    max_size=30,
)


@given(rating_rows, st.sampled_from(["::", "\t"]))
def test_fast_and_line_by_line_paths_agree(rows, sep):
    # CRLF line ends send the reader down the line-by-line path; LF ones through polars
    lines = [sep.join(map(str, row)) for row in rows]
    reader = readers.read_movielens_dat if sep == "::" else readers.read_movielens_udata
    fast = reader("ratings", "\n".join(lines).encode())
    slow = reader("ratings", "\r\n".join(lines).encode())
    for name in ("user", "item", "user_ids", "item_ids", "timestamp", "rating"):
        assert np.array_equal(getattr(fast, name), getattr(slow, name))
