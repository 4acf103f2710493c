"""DataFrames in, as a recommender engineer holds their data: one table written as CSV, TSV,
gzipped CSV and Parquet and given as a pandas DataFrame, a polars DataFrame and a pyarrow Table
reads to identical ``Interactions``; ids of any type need no mapping by hand; an empty id is
dropped and counted the same way everywhere; a wrong object is one error saying what is
accepted; and a prepared DataFrame is a named dataset that loads without it."""

import gzip
import json
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.errors import InvalidRequest
from attnsvm.rec.data import Cleaning, load_dataset, prepare_frame, read_frame
from attnsvm.rec.data.errors import DataFormatError, NotATable
from attnsvm.rec.data.interactions import Interactions
from attnsvm.rec.data.readers import read_table

runner = CliRunner()
COLUMNS = {"user": "customer_id", "item": "sku", "time": "ts", "rating": "stars"}
# ids as exports write them: codes with separators, quotes and spaces, or plain numbers (a
# blank one is dropped: test_an_empty_id_is_dropped_and_counted_in_every_format)
ID_TEXT = st.text(alphabet="abcXYZ019-_ ,;'\"é", min_size=1, max_size=6).filter(str.strip)


def same(left: Interactions, right: Interactions) -> None:
    for name in ("user", "item", "user_ids", "item_ids", "timestamp", "rating"):
        assert np.array_equal(getattr(left, name), getattr(right, name)), name


def every_format(frame: pl.DataFrame, folder) -> dict[str, Interactions]:
    """``frame`` read through each path: files written by polars, and the frame itself."""
    tables = {}
    for name, writer in {
        "csv": lambda path: frame.write_csv(path),
        "tsv": lambda path: frame.write_csv(path, separator="\t"),
        "csv.gz": lambda path: path.write_bytes(gzip.compress(frame.write_csv().encode())),
        "parquet": lambda path: frame.write_parquet(path),
    }.items():
        path = folder / f"log.{name}"
        writer(path)
        mapping = {role if role != "time" else "timestamp": c for role, c in COLUMNS.items()}
        tables[name] = read_table(path, **mapping)
    tables["polars"] = read_frame(frame, COLUMNS)
    tables["pandas"] = read_frame(frame.to_pandas(), COLUMNS)
    tables["pyarrow"] = read_frame(frame.to_arrow(), COLUMNS)
    return tables


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(
        st.tuples(
            ID_TEXT | st.integers(0, 50).map(str),
            st.integers(0, 30),
            st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2030, 1, 1)),
            st.floats(0, 5, allow_nan=False).map(lambda x: round(x, 3)),
        ),
        min_size=1,
        max_size=30,
    ),
    native_times=st.booleans(),
)
def test_one_table_in_every_format_is_one_dataset(tmp_path, rows, native_times):
    users, items, moments, stars = zip(*rows, strict=True)
    times = [m.replace(tzinfo=UTC) for m in moments]
    frame = pl.DataFrame(
        {
            "customer_id": list(users),
            "sku": list(items),
            # a datetime column, or its ISO-8601 text: both give the same times
            "ts": times if native_times else [t.isoformat() for t in times],
            "stars": list(stars),
            "note": ["ok"] * len(rows),
        }
    )
    tables = every_format(frame, tmp_path)
    for table in tables.values():
        same(table, tables["csv"])
    expected = sorted(t.timestamp() for t in times)
    assert sorted(tables["csv"].timestamp) == expected


def test_an_empty_id_is_dropped_and_counted_in_every_format(tmp_path):
    # the friction: 3,001 users from Parquet (the empty id a user) against 3,000 from CSV
    frame = pl.DataFrame(
        {
            "customer_id": ["a", "", "b", None, "  ", "a"],
            "sku": ["x", "y", None, "y", "x", "y"],
            "ts": [1, 2, 3, 4, 5, 6],
            "stars": [1.0] * 6,
        }
    )
    tables = every_format(frame, tmp_path)
    for table in tables.values():
        same(table, tables["csv"])
    assert tables["csv"].user_ids.tolist() == ["a"] and len(tables["csv"]) == 2
    path = tmp_path / "log.parquet"
    out = runner.invoke(app, ["data", "stats", str(path), "--columns", "user=customer_id,item=sku"])
    assert "read 6 rows" in out.output and "dropped 3 no user, 1 no item" in out.output


def test_ids_of_any_type_need_no_mapping():
    ids = [uuid.UUID(int=k) for k in (7, 3, 7)]
    frame = pd.DataFrame(
        {
            "customer_id": ids,  # UUIDs: their text
            "sku": pd.Categorical(["b", "a", "b"]),
            "ts": pd.to_datetime(["2024-01-01T00:00:00Z"] * 3),
            "mixed": [1, "two", 3.0],  # Python objects of mixed types: their text
            "nullable": pd.array([5, None, 6], dtype="Int64"),
        }
    )
    table = read_frame(frame, {"user": "customer_id", "item": "sku", "time": "ts"})
    assert table.user_ids.tolist() == [str(uuid.UUID(int=3)), str(uuid.UUID(int=7))]
    assert table.item_ids[1:].tolist() == ["a", "b"]
    mixed = read_frame(frame, {"user": "mixed", "item": "nullable"})
    assert mixed.user_ids.tolist() == ["1", "3.0"] and mixed.item_ids[1:].tolist() == [5, 6]
    floats = pl.DataFrame({"u": [1.0, 2.0], "i": [3.0, 4.5]})
    with pytest.raises(DataFormatError, match=r"^polars DataFrame: row 2: item id 4\.5 is not a"):
        read_frame(floats, "user=u,item=i")


@pytest.mark.parametrize(
    ("given_object", "fragment"),
    [
        ("log.csv", "not a str"),
        ([{"customer_id": 1}], "not a list"),
        (pl.DataFrame({"customer_id": [1], "sku": [2]}).lazy(), "(call .collect() on it first)"),
        (np.zeros((2, 2)), "not a numpy.ndarray"),
    ],
)
def test_a_wrong_object_is_one_error_saying_what_is_accepted(given_object, fragment):
    with pytest.raises(NotATable) as raised:
        read_frame(given_object, COLUMNS)
    message = str(raised.value)
    assert message.startswith(
        "a table is a pandas DataFrame, a polars DataFrame or a pyarrow Table, "
    )
    assert fragment in message and len(message.splitlines()) == 1


def test_a_wrong_mapping_names_the_columns_there_are():
    frame = pd.DataFrame({"customer_id": [1], "sku": [2]})
    with pytest.raises(DataFormatError, match=r"has no item column 'product' \(columns: 'cus"):
        read_frame(frame, {"user": "customer_id", "item": "product"})
    with pytest.raises(InvalidRequest, match="must name the user and item columns"):
        read_frame(frame, {"user": "customer_id"})
    with pytest.raises(InvalidRequest, match="is not ROLE=COLUMN"):
        read_frame(frame, {"user": "customer_id", "item": "sku", "when": "ts"})
    by_position = read_frame(frame, {"user": 0, "item": 1})
    same(by_position, read_frame(frame, "user=customer_id,item=sku"))
    # a column moved into the index (set_index) is still a column to the mapping
    same(read_frame(frame.set_index("sku"), {"user": "customer_id", "item": "sku"}), by_position)


def shop_frame(rows: int = 200) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    start = datetime(2024, 3, 1, tzinfo=UTC)
    return pd.DataFrame(
        {
            "customer_id": [f"c{k}" for k in rng.integers(0, 20, rows)],
            "sku": rng.integers(100, 130, rows),
            "ts": [start + timedelta(minutes=int(m)) for m in rng.integers(0, 10_000, rows)],
            "quantity": rng.integers(-1, 4, rows),
        }
    )


def test_a_prepared_frame_is_a_named_dataset_that_loads_without_it(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNSVM_DATA", str(tmp_path / "cache"))
    frame = shop_frame()
    columns = {"user": "customer_id", "item": "sku", "time": "ts"}
    cleaning = Cleaning(drop_where="quantity<=0", min_per_item=2)
    path = prepare_frame("shop", frame, columns, cleaning=cleaning)
    assert path == tmp_path / "cache" / "shop" / "interactions.npz"
    expected = read_frame(frame[frame.quantity > 0], columns)
    expected = expected.k_core(1, 2)
    del frame
    same(load_dataset("shop"), expected)  # by name, as `train --data shop` loads it
    same(load_dataset(path), expected)  # by the file, e.g. one a run directory keeps
    meta = json.loads((path.parent / "meta.json").read_text())
    assert meta["frame"] == "pandas DataFrame" and meta["interactions"] == len(expected)
    out = runner.invoke(app, ["data", "stats", "shop"]).output
    assert "read 200 rows (pandas DataFrame; user=customer_id, item=sku, timestamp=ts)" in out
    assert "where quantity<=0" in out and "below the k-core (min 2 per item)" in out


def test_re_preparing_a_name_needs_force_and_never_leaves_half_a_table(tmp_path, monkeypatch):
    frame = shop_frame()
    columns = "user=customer_id,item=sku,time=ts"
    path = prepare_frame("shop", frame, columns, tmp_path)
    before = path.read_bytes()
    with pytest.raises(InvalidRequest, match=r"'shop' is already prepared .*pass --force"):
        prepare_frame("shop", frame.head(50), columns, tmp_path)
    assert path.read_bytes() == before

    def fail(*arguments, **options):
        raise OSError("disk full")

    monkeypatch.setattr("attnsvm.rec.data.datasets.write_json", fail)
    with pytest.raises(OSError, match="disk full"):
        prepare_frame("shop", frame.head(50), columns, tmp_path, force=True)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["shop"]
    monkeypatch.undo()
    prepare_frame("shop", frame.head(50), columns, tmp_path, force=True)
    assert len(load_dataset("shop", cache_dir=tmp_path)) == 50
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shop"]
    with pytest.raises(InvalidRequest, match="is a registered dataset"):
        prepare_frame("ml-1m", frame, columns, tmp_path)
