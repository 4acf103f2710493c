"""Hostile tables of one's own (issue 36): one table in CSV, TSV and Parquet, each with the ids
and times that Python's ``int()`` and ``float()`` would read but the readers' one rule does not
(``+1``, ``1_0``, Arabic-Indic and full-width digits), integer times beyond 2**53 out of file
order, duplicate header names, and Parquet columns of lists or records (``attnsvm data stats``
or ``data prepare`` with ``--columns``).

Free-form ids are kept as the text they are, so ``+1`` is a user of its own, never user 1; a
time that is not an ASCII number is refused naming the file, the line (or row) and the value;
and every format ends the same way."""

from __future__ import annotations

import re

import numpy as np
import polars as pl
from reliability_harness import Case, accepted, refused

from attnsvm.rec.data.interactions import Interactions

TABLE = "own table: ids, times, header"
FORMATS = ("csv", "tsv", "parquet")
COLUMNS = "user=user,item=item,time=time"
CLEAN = {  # 3 users, 3 items, 6 events
    "user": ["1", "1", "2", "2", "3", "3"],
    "item": ["10", "11", "10", "12", "11", "12"],
    "time": ["5", "6", "7", "8", "9", "10"],
}
BEYOND = 2**53  # float64 holds every integer up to here, and only every second one above


def _write(workspace, kind: str, table: dict[str, list], header: list[str] | None = None):
    """``table`` as ``t.{kind}``; ``header`` names the columns of a CSV or TSV in its place."""
    path = workspace.root / f"t.{kind}"
    frame = pl.DataFrame(table)
    if kind == "parquet":
        frame.write_parquet(path)
        return path
    sep = "," if kind == "csv" else "\t"
    lines = [sep.join(header or frame.columns)]
    lines += [sep.join(map(str, row)) for row in frame.iter_rows()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _stats(workspace, kind: str, table: dict[str, list]) -> list[str]:
    return ["data", "stats", str(_write(workspace, kind, table)), "--columns", COLUMNS]


def _with(column: str, value: str) -> dict[str, list]:
    """The clean table with ``column`` of its second row replaced."""
    table = {name: list(values) for name, values in CLEAN.items()}
    table[column][1] = value
    return table


def _counts(users: int, items: int, events: int = 6):
    def check(workspace, output: str) -> None:
        for label, value in (("users", users), ("items", items), ("interactions", events)):
            assert re.search(rf"\b{label}\b\W+{value}\b", output), output

    return check


def _second_row(kind: str) -> str:
    """Where the second data row is named: line 3 of a file with a header, row 2 of Parquet."""
    return "t.parquet: row 2: " if kind == "parquet" else f"t.{kind}:3: "


def _beyond_float(workspace, kind: str) -> list[str]:
    """User 1's items 10..13 at 2**53 + 3, + 1, + 2, + 0 (file order): float64 would tie 2**53
    with 2**53 + 1 and keep the file's order; integers order them 13, 11, 12, 10. In Parquet
    the times are an Int64 column."""
    times = [BEYOND + 3, BEYOND + 1, BEYOND + 2, BEYOND, 5, 6]
    table = {
        "user": ["1", "1", "1", "1", "2", "2"],
        "item": ["10", "11", "12", "13", "10", "11"],
        "time": times if kind == "parquet" else [str(t) for t in times],
    }
    path = _write(workspace, kind, table)
    return ["data", "prepare", "--from", str(path), "--columns", COLUMNS, "--name", "t",
            "--cache-dir", str(workspace.root / "cache")]  # fmt: skip


def _in_integer_order(workspace, output: str) -> None:
    table = Interactions.load(workspace.root / "cache" / "t" / "interactions.npz")
    first = table.user == int(np.flatnonzero(table.user_ids == 1)[0])
    assert table.item_ids[table.item[first]].tolist() == [13, 11, 12, 10], output
    seconds = table.timestamp[first][1:]  # 2**53 + 1, + 2, + 3 as float64: apart, in order
    assert np.all(np.diff(seconds) > 0), seconds


def _nested(workspace, column: str, values: list) -> list[str]:
    table: dict[str, list] = {name: list(v) for name, v in CLEAN.items()}
    table[column] = values
    return _stats(workspace, "parquet", table)


def _format_cases(kind: str) -> list[Case]:
    where = _second_row(kind)
    cases = [
        accepted(f"{kind}: '+1' as a user id is a user of its own, not user 1", TABLE,
                 lambda w: _stats(w, kind, _with("user", "+1")), _counts(4, 3)),
        accepted(f"{kind}: '1_0' as an item id is an item of its own, not item 10", TABLE,
                 lambda w: _stats(w, kind, _with("item", "1_0")), _counts(3, 4)),
        accepted(f"{kind}: Arabic-Indic '١' as a user id is not user 1", TABLE,
                 lambda w: _stats(w, kind, _with("user", "١")), _counts(4, 3)),
        accepted(f"{kind}: full-width '１' as a user id is not user 1", TABLE,
                 lambda w: _stats(w, kind, _with("user", "１")), _counts(4, 3)),
        accepted(f"{kind}: a '+' on a time (a number: +6 is 6)", TABLE,
                 lambda w: _stats(w, kind, _with("time", "+6")), _counts(3, 3)),
        accepted(f"{kind}: integer times beyond 2^53 keep their order", TABLE,
                 lambda w: _beyond_float(w, kind), _in_integer_order),
    ]  # fmt: skip
    for title, value in (("an underscore in a time", "1_000"),
                         ("Arabic-Indic digits in a time", "١٠"),
                         ("full-width digits in a time", "６")):  # fmt: skip
        cases.append(
            refused(f"{kind}: {title}", TABLE,
                    lambda w, v=value: _stats(w, kind, _with("time", v)),
                    rf"{where}timestamp '{value}' is not a number: numbers are written in ASCII")
        )  # fmt: skip
    if kind != "parquet":  # a Parquet file cannot hold two columns of one name
        doubled = {"user": CLEAN["user"], "item": CLEAN["item"], "again": CLEAN["item"],
                   "time": CLEAN["time"]}  # fmt: skip
        header = ["user", "item", "item", "time"]
        cases.append(
            refused(f"{kind}: a header naming the item column twice", TABLE,
                    lambda w: ["data", "stats", str(_write(w, kind, doubled, header)),
                               "--columns", COLUMNS],
                    rf"t.{kind}:1: has 2 columns named 'item' \(0-based columns 1, 2\)")
        )  # fmt: skip
    return cases


def table_cases() -> list[Case]:
    return [
        *(case for kind in FORMATS for case in _format_cases(kind)),
        refused("parquet: a column of lists as the user column", TABLE,
                lambda w: _nested(w, "user", [[1, 2]] * 6),
                r"t.parquet: column 'user' \(the user column\) holds List\(Int64\) values, not one "
                r"value per row: explode"),
        refused("parquet: a column of records as the time column", TABLE,
                lambda w: _nested(w, "time", [{"s": 5, "ns": 0}] * 6),
                r"t.parquet: column 'time' \(the timestamp column\) holds Struct"),
    ]  # fmt: skip
