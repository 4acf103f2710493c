"""The readers' one parsing rule (``_tokens``), the same in every format: one hostile table read
as CSV, TSV, Parquet and a DataFrame gives the same dataset, or the same refusal at the same
row; integer times beyond 2**53 keep their order; where ids are numbers, a token Python's
``int()`` would read (``+1``, ``1_0``, ``١``) is refused; a header naming a mapped column twice,
and a Parquet column of lists or records, are refused naming the file and the column."""

import re

import numpy as np
import polars as pl
import pytest

from attnsvm.rec.data import read_frame
from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.readers import (
    read_movielens_udata,
    read_pairs,
    read_session_tsv,
    read_table,
)

FORMATS = ("csv", "tsv", "parquet", "frame")
BEYOND = 2**53  # float64 holds every integer up to here, and only every second one above
# users and items that Python's int() reads as 10 and 7: each an id of its own here
HOSTILE = {
    "user": ["10", "+10", "1_0", "١٠", "１０", "10"],
    "item": ["7", "7", "+7", "7", "７", "٧"],
    "time": ["1", "2", "3", "4", "5", "6"],
}


def read(tmp_path, kind: str, table: dict, unit: str = "s"):
    """``table`` written as ``kind`` (a DataFrame: not written) and read with one mapping, its
    times counted in ``unit``."""
    frame = pl.DataFrame(table)
    if kind == "frame":
        word = "time" if unit == "s" else f"time_{unit}"
        return read_frame(frame, f"user=user,item=item,{word}=time")
    path = tmp_path / f"hostile.{kind}"
    if kind == "parquet":
        frame.write_parquet(path)
    else:
        frame.write_csv(path, separator="," if kind == "csv" else "\t")
    return read_table(path, user="user", item="item", timestamp="time", time_unit=unit)


def refusal(error: DataFormatError) -> tuple[int, str]:
    """(the data row it names, what it says): a file's line counts its header, a Parquet
    file's or a DataFrame's row does not."""
    if error.line is not None:
        return error.line - 1, error.message
    row, message = re.fullmatch(r"row (\d+): (.*)", error.message).groups()
    return int(row), message


def test_a_hostile_table_reads_alike_in_every_format_and_merges_no_ids(tmp_path):
    tables = [read(tmp_path, kind, HOSTILE) for kind in FORMATS]
    first = tables[0]
    assert sorted(first.user_ids.tolist()) == sorted(set(HOSTILE["user"]))  # 5 users, not 1
    assert sorted(first.item_ids[1:].tolist()) == sorted(set(HOSTILE["item"]))  # 4 items
    for table in tables[1:]:
        for column in ("user_ids", "item_ids", "user", "item", "timestamp"):
            assert np.array_equal(getattr(table, column), getattr(first, column)), column
    # a '+' alone among integer ids: still two users, 10 and '+10'
    plus = {"user": ["10", "+10"], "item": ["7", "7"], "time": ["1", "2"]}
    for kind in FORMATS:
        assert read(tmp_path, kind, plus).user_ids.tolist() == ["+10", "10"], kind
    # a leading zero, or -0, is an id of its own too, given back as written
    zeros = {"user": ["7", "007", "0", "-0"], "item": ["1", "2", "3", "4"], "time": ["1"] * 4}
    for kind in FORMATS:
        assert read(tmp_path, kind, zeros).user_ids.tolist() == ["-0", "0", "007", "7"], kind
    plain = {"user": ["7", "-7", "0", "10"], "item": ["1", "2", "3", "4"], "time": ["1"] * 4}
    for kind in FORMATS:
        assert read(tmp_path, kind, plain).user_ids.tolist() == [-7, 0, 7, 10], kind


@pytest.mark.parametrize("time", ["1_0", "١٠", "１０", "1e1_0"])
def test_a_time_that_is_not_an_ascii_number_is_refused_alike_in_every_format(tmp_path, time):
    table = {**HOSTILE, "time": ["1", "2", time, "4", "5", "6"]}
    refusals = []
    for kind in FORMATS:
        with pytest.raises(DataFormatError) as raised:
            read(tmp_path, kind, table)
        refusals.append(refusal(raised.value))
    expected = f"timestamp {time!r} is not a number: numbers are written in ASCII digits"
    assert refusals[0][0] == 3 and refusals[0][1].startswith(expected), refusals[0]
    assert refusals == [refusals[0]] * len(FORMATS)


@pytest.mark.parametrize("kind", FORMATS)
@pytest.mark.parametrize(
    ("unit", "base"), [("s", BEYOND), ("ns", 1_700_000_000 * 10**9)]
)  # 2**53 + k seconds; and nanoseconds now, where float64 steps by 256
def test_integer_times_beyond_float64_keep_their_order(tmp_path, kind, unit, base):
    offsets = [3, 1, 2, 0] if unit == "s" else [300, 100, 200, 0]
    times = [base + k for k in offsets]
    table = {
        "user": ["1", "1", "1", "1"],
        "item": ["10", "11", "12", "13"],
        "time": times if kind in ("parquet", "frame") else [str(t) for t in times],
    }
    data = read(tmp_path, kind, table, unit)
    assert data.item_ids[data.item].tolist() == [13, 11, 12, 10]
    assert np.all(np.diff(data.timestamp) >= 0)
    if unit == "s":  # 2**53 + 1, + 2, + 3 as float64 seconds: apart and in order
        assert np.all(np.diff(data.timestamp[1:]) > 0), data.timestamp


def test_the_text_readers_order_integer_times_beyond_2_53_too(tmp_path):
    rows = [(10, BEYOND + 3), (11, BEYOND + 1), (12, BEYOND + 2), (13, BEYOND)]
    udata = "".join(f"1\t{item}\t5\t{time}\n" for item, time in rows)
    sessions = "SessionId\tItemId\tTime\n" + "".join(f"1\t{i}\t{t}\n" for i, t in rows)
    crlf = udata.replace("\n", "\r\n")  # not polars' fast path: read line by line
    for reader, text in [(read_movielens_udata, udata), (read_movielens_udata, crlf),
                         (read_session_tsv, sessions)]:  # fmt: skip
        data = reader(tmp_path / "f", text.encode())
        assert data.item_ids[data.item].tolist() == [13, 11, 12, 10], reader


@pytest.mark.parametrize("token", ["+1", "1_0", "١", "１"])
def test_where_ids_are_numbers_an_int_lookalike_is_refused_naming_line_and_value(tmp_path, token):
    path = tmp_path / "pairs.txt"
    path.write_text(f"1 5\n{token} 6\n2 7\n")
    message = rf"pairs.txt:2: user id {re.escape(repr(token))} is not an integer: ids are ASCII"
    with pytest.raises(DataFormatError, match=message):
        read_pairs(path)


@pytest.mark.parametrize("sep", [",", "\t"])
def test_a_header_naming_a_mapped_column_twice_is_refused(tmp_path, sep):
    path = tmp_path / "t.txt"
    path.write_text(sep.join(["user", "item", "item", "time"]) + "\n" + sep.join("1234") + "\n")
    with pytest.raises(DataFormatError, match=r"t.txt:1: has 2 columns named 'item' \(0-based"):
        read_table(path, user="user", item="item", sep=sep)
    # a column twice that is not read leaves nothing in doubt
    path.write_text(sep.join(["user", "item", "x", "x"]) + "\n" + sep.join("1234") + "\n")
    assert read_table(path, user="user", item="item", sep=sep).item_ids.tolist() == [0, 2]


@pytest.mark.parametrize(
    ("column", "values", "shown"),
    [
        ("user", [[1, 2], [3]], r"List\(Int64\)"),
        ("time", [{"s": 1}, {"s": 2}], r"Struct\(\{'s': Int64\}\)"),
    ],
)
def test_a_column_of_lists_or_records_is_refused_naming_the_file_and_the_column(
    tmp_path, column, values, shown
):
    table = {"user": ["1", "2"], "item": ["5", "6"], "time": ["1", "2"], column: values}
    path = tmp_path / "t.parquet"
    pl.DataFrame(table).write_parquet(path)
    role = "timestamp" if column == "time" else column
    message = rf"t.parquet: column '{column}' \(the {role} column\) holds {shown} values"
    with pytest.raises(DataFormatError, match=message):
        read_table(path, user="user", item="item", timestamp="time")
    with pytest.raises(DataFormatError, match=rf"column '{column}' \(the {role} column\)"):
        read_frame(pl.DataFrame(table), "user=user,item=item,time=time")
