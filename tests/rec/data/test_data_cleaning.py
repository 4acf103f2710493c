"""Cleaning at prepare time, walked as a shop export needs it: drop cancelled rows
(``--drop-where "quantity<=0"``), duplicates (exact rows, or the same item again next in time),
users and items below a minimum (the k-core, against a brute-force loop); each step's count in
``data stats``; a filter parsed, never evaluated; re-preparing a name only with ``--force``."""

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.errors import InvalidRequest
from attnsvm.rec.data import Cleaning, load_dataset, read_frame
from attnsvm.rec.data.cleaning import RowFilter
from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.frames import frame_with_report
from attnsvm.rec.data.tables import TableLayout, read_with_report

runner = CliRunner()
EXPORT = """order,customer,sku,ts,quantity,status
1,c1,a,2024-01-01T10:00:00Z,1,paid
2,c1,b,2024-01-01T10:05:00Z,2,paid
2,c1,b,2024-01-01T10:05:00Z,2,paid
3,c1,b,2024-01-01T10:06:00Z,1,paid
4,c1,c,2024-01-01T10:07:00Z,0,paid
5,c2,a,2024-01-01T11:00:00Z,-1,refund
6,c2,c,2024-01-01T11:01:00Z,1,cancelled
7,c2,b,2024-01-01T11:02:00Z,,paid
8,c3,a,2024-01-01T12:00:00Z,3,paid
"""
MAPPING = "user=customer,item=sku,time=ts"


def invoke(*arguments) -> str:
    result = runner.invoke(app, [str(a) for a in arguments])
    assert result.exit_code == 0, result.output
    return result.output


def events(table) -> list[tuple]:
    users = table.user_ids[table.user].tolist()
    return list(zip(users, table.item_ids[table.item].tolist(), strict=True))


def test_a_shop_export_cleaned_at_prepare_and_reported_by_stats(tmp_path):
    path = tmp_path / "orders.csv"
    path.write_text(EXPORT)
    cache = ["--cache-dir", tmp_path / "cache"]
    out = invoke("data", "prepare", "--from", path, "--columns", MAPPING, "--name", "orders",
                 "--drop-where", "quantity<=0", "--drop-where", "status=='cancelled'",
                 "--drop-duplicates", "exact", "--min-per-user", "2", *cache)  # fmt: skip
    steps = (
        "cleaning removed 2 where quantity<=0, 1 where status=='cancelled', 1 exact duplicates, "
        "2 below the k-core (min 2 per user)"
    )
    assert "read 9 rows" in out and "kept 3" in out and steps in out
    assert steps in invoke("data", "stats", "orders", *cache)
    # c1 keeps b twice (10:05 and 10:06 are two orders, not one row twice); c2's row without a
    # quantity is not compared, so no filter drops it, but the k-core does, with c3's one row
    assert events(load_dataset("orders", cache_dir=tmp_path / "cache")) == [
        ("c1", "a"),
        ("c1", "b"),
        ("c1", "b"),
    ]
    # the same cleaning of the same rows as a DataFrame
    frame = pl.read_csv(path, infer_schema=False)
    cleaning = Cleaning(("quantity<=0", "status=='cancelled'"), "exact", min_per_user=2)
    from_frame, report = frame_with_report(frame, MAPPING, cleaning)
    assert events(from_frame) == events(load_dataset("orders", cache_dir=tmp_path / "cache"))
    assert report["cleaned"]["exact duplicates"] == 1


def test_re_preparing_a_name_needs_force(tmp_path):
    path = tmp_path / "orders.csv"
    path.write_text(EXPORT)
    prepare = ["data", "prepare", "--from", str(path), "--columns", MAPPING, "--name", "orders",
               "--cache-dir", str(tmp_path)]  # fmt: skip
    invoke(*prepare)
    result = runner.invoke(app, [*prepare, "--drop-duplicates", "consecutive"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "'orders' is already prepared" in result.output and "--force" in result.output
    out = invoke(*prepare, "--drop-duplicates", "consecutive", "--force")
    assert "kept 7" in out and "cleaning removed 2 consecutive repeats" in out  # c1's b, b, b
    result = runner.invoke(app, ["data", "prepare", "ml-1m", "--from", str(path), "--force"])
    assert result.exit_code == 1 and "go with your own table (--columns)" in result.output
    result = runner.invoke(app, [*prepare, "--force", "--drop-duplicates", "all"])
    assert result.exit_code == 1 and "is not one of exact, consecutive" in result.output


@pytest.mark.parametrize(
    ("text", "column", "operator", "value"),
    [
        ("quantity<=0", "quantity", "<=", 0.0),
        (" price > 1e3 ", "price", ">", 1000.0),
        ("status == 'cancelled'", "status", "==", "cancelled"),
        ('code!="001"', "code", "!=", "001"),  # quoted: text, not the number 1
        ("status==cancelled", "status", "==", "cancelled"),
        ("3<0", 3, "<", 0.0),  # a column by position, as in a mapping
        ("unit price>=-2.5", "unit price", ">=", -2.5),
    ],
)
def test_a_row_filter_is_column_operator_value(text, column, operator, value):
    assert RowFilter.parse(text) == RowFilter(column, operator, value)


@pytest.mark.parametrize(
    "text",
    ["quantity", "quantity<=", "<=0", "quantity=0", "status<'x'", "x>nan", "a=<3", "x<inf"],
)
def test_a_malformed_row_filter_is_refused_saying_what_is_expected(text):
    with pytest.raises(InvalidRequest, match=r"row filter .*(COLUMN OP VALUE|compares)"):
        Cleaning(drop_where=text)


def test_a_row_filter_is_never_evaluated(tmp_path):
    # what eval would run is only a column name, which the table does not have
    frame = pl.DataFrame({"u": [1], "i": [2]})
    with pytest.raises(DataFormatError, match=r"has no row filter .*column \"__import__\('os'\)"):
        frame_with_report(frame, "user=u,item=i", Cleaning(drop_where="__import__('os')==1"))


def test_a_value_a_filter_cannot_compare_names_the_file_line_and_column(tmp_path):
    path = tmp_path / "orders.csv"
    path.write_text("customer,sku,quantity\nc1,a,1\nc1,b,two\n")
    layout = TableLayout.parse("user=customer,item=sku")
    with pytest.raises(DataFormatError) as raised:
        read_with_report(path, layout, cleaning=Cleaning(drop_where="quantity<=0"))
    assert str(raised.value) == (
        f"{path}:3: row filter 'quantity<=0': quantity 'two' is not a number"
    )
    frame = pl.DataFrame({"u": [1, 2], "i": [1, 2], "quantity": [1.0, float("nan")]})
    with pytest.raises(
        DataFormatError, match=r"^polars DataFrame: row 2: row filter .* not finite"
    ):
        frame_with_report(frame, "user=u,item=i", Cleaning(drop_where="quantity<=0"))
    with pytest.raises(DataFormatError, match="has no row filter column 'qty'"):
        read_with_report(path, layout, cleaning=Cleaning(drop_where="qty<=0"))


def brute_force_k_core(rows: list[tuple[int, int]], user_min: int, item_min: int) -> list:
    """The k-core by its definition: drop any row of a user or an item below its minimum, and
    look again, until nothing changes."""
    while True:
        users = {u: sum(1 for r in rows if r[0] == u) for u, _ in rows}
        items = {i: sum(1 for r in rows if r[1] == i) for _, i in rows}
        kept = [r for r in rows if users[r[0]] >= user_min and items[r[1]] >= item_min]
        if kept == rows:
            return rows
        rows = kept


@settings(max_examples=80, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8)), min_size=1, max_size=60),
    user_min=st.integers(0, 5),
    item_min=st.integers(0, 5),
)
def test_the_k_core_is_the_brute_force_fixed_point(rows, user_min, item_min):
    frame = pl.DataFrame({"u": [r[0] for r in rows], "i": [r[1] for r in rows]})
    cleaning = Cleaning(min_per_user=user_min, min_per_item=item_min)
    expected = brute_force_k_core(rows, user_min, item_min)
    if not expected:
        with pytest.raises(DataFormatError, match="removes every interaction"):
            frame_with_report(frame, "user=u,item=i", cleaning)
        return
    table, report = frame_with_report(frame, "user=u,item=i", cleaning)
    assert sorted(events(table)) == sorted(expected)
    if user_min > 1 or item_min > 1:
        assert sum(report["cleaned"].values()) == len(rows) - len(expected)


@settings(max_examples=80, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 5)), min_size=1, max_size=40
    ),
    rule=st.sampled_from(["exact", "consecutive"]),
)
def test_duplicates_against_their_definition(rows, rule):
    frame = pl.DataFrame({"u": [r[0] for r in rows], "i": [r[1] for r in rows],
                          "t": [r[2] for r in rows]})  # fmt: skip
    table, report = frame_with_report(frame, "user=u,item=i,time=t", Cleaning(drop_duplicates=rule))
    if rule == "exact":
        expected = sorted({(u, i, t) for u, i, t in rows})
    else:  # each user's events in time order (ties in row order), less an item again next
        by_user = sorted(range(len(rows)), key=lambda k: (rows[k][0], rows[k][2], k))
        expected = sorted(
            rows[k]
            for n, k in enumerate(by_user)
            if n == 0 or rows[by_user[n - 1]][:2] != rows[k][:2]
        )
    kept = sorted((u, i, int(t)) for (u, i), t in zip(events(table), table.timestamp, strict=True))
    assert kept == expected
    removed = report["cleaned"]["exact duplicates" if rule == "exact" else "consecutive repeats"]
    assert removed == len(rows) - len(expected)


def test_no_cleaning_keeps_every_row():
    frame = pl.DataFrame({"u": [1, 1, 1], "i": [2, 2, 2], "t": [5, 5, 5]})
    table, report = frame_with_report(frame, "user=u,item=i,time=t")
    assert len(table) == 3 and "cleaned" not in report
    assert np.array_equal(read_frame(frame, "user=u,item=i,time=t").item, table.item)
