"""Times as exports hold them: ISO-8601 text with or without a zone, numbers in seconds or
milliseconds, datetime columns; read the same way from a CSV, a Parquet file or a DataFrame, the
unit said, and a bad time one error naming the file, the line (or row) and the field."""

import gzip
from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.rec.config import DataConfig
from attnsvm.rec.data import read_frame
from attnsvm.rec.data.datasets import load_dataset
from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.readers import read_session_tsv, read_table

runner = CliRunner()
# one moment, 2024-01-01 01:02:32 UTC, as exports write it
MOMENT = datetime(2024, 1, 1, 1, 2, 32, tzinfo=UTC).timestamp()
SPELLINGS = [
    "2024-01-01T01:02:32Z",
    "2024-01-01 01:02:32",  # no zone: UTC
    "2024-01-01T03:02:32+02:00",
    "2024-01-01T01:02:32.000000+0000",  # polars' write_csv of a UTC datetime
    "2024-01-01 01:02:32+00:00",  # pandas' to_csv of one
]


def invoke(*arguments) -> str:
    result = runner.invoke(app, [str(a) for a in arguments])
    assert result.exit_code == 0, result.output
    return result.output


def shop_export(rows: int = 300) -> str:
    """A shop's CSV export with ISO-8601 times, some with a zone and some without."""
    rng = np.random.default_rng(0)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    lines = ["customer_id,sku,ts"]
    for row in range(rows):
        moment = start + timedelta(minutes=7 * row)
        text = (
            moment.isoformat().replace("+00:00", "Z") if row % 2 else f"{moment:%Y-%m-%d %H:%M:%S}"
        )
        lines.append(f"c{rng.integers(0, 30)},sku-{rng.integers(0, 25)},{text}")
    return "\n".join(lines) + "\n"


def test_an_iso_export_goes_through_prepare_stats_and_the_training_loader(tmp_path, monkeypatch):
    path = tmp_path / "export.csv"
    path.write_text(shop_export())
    monkeypatch.setenv("ATTNSVM_DATA", str(tmp_path / "cache"))
    mapping = "user=customer_id,item=sku,time=ts"
    out = invoke("data", "prepare", "--from", path, "--columns", mapping, "--name", "shop")
    assert "read 300 rows" in out
    assert "times read as ISO-8601 (UTC where no zone is given): 2024-01-01T00:00:00Z to" in out
    assert "times read as" in invoke("data", "stats", "shop")
    # what `train --data shop` loads (rec/train/runs.py: load_dataset with the run's layout)
    table = load_dataset("shop", layout=DataConfig(dataset="shop").layout())
    assert table.timestamp.min() == datetime(2024, 1, 1, tzinfo=UTC).timestamp()
    assert np.all(np.diff(table.timestamp)[np.diff(table.user) == 0] >= 0)
    # a run config's own mapping reads the file itself the same way
    config = DataConfig(dataset=str(path), columns=mapping)
    direct = load_dataset(config.dataset, layout=config.layout())
    assert np.array_equal(direct.timestamp, table.timestamp)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_iso_spelling_of_one_moment_is_one_time(tmp_path, spelling):
    path = tmp_path / "t.csv"
    path.write_text(f"u,i,t\n1,2,{spelling}\n")
    assert read_table(path, user="u", item="i", timestamp="t").timestamp.tolist() == [MOMENT]


@settings(max_examples=60, deadline=None)
@given(
    moment=st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1)),
    offset_minutes=st.integers(-14 * 60, 14 * 60),
)
def test_any_moment_in_any_zone_reads_as_its_unix_seconds(moment, offset_minutes):
    zone = timezone(timedelta(minutes=offset_minutes))
    local = moment.replace(tzinfo=UTC).astimezone(zone)
    texts = [local.isoformat(), moment.isoformat(), moment.isoformat(sep=" ") + "Z"]
    table = read_frame(
        pl.DataFrame({"u": [1, 2, 3], "i": [1, 1, 1], "t": texts}), "user=u,item=i,time=t"
    )
    assert table.timestamp.tolist() == [moment.replace(tzinfo=UTC).timestamp()] * 3


def test_numbers_are_seconds_unless_the_mapping_names_another_unit(tmp_path):
    seconds = tmp_path / "s.csv"
    seconds.write_text("u,i,t\n1,2,1704070952\n1,3,1704070953.5\n")
    millis = tmp_path / "ms.csv"
    millis.write_text("u,i,t\n1,2,1704070952000\n1,3,1704070953500\n")
    expected = [1704070952.0, 1704070953.5]
    assert read_table(seconds, user="u", item="i", timestamp="t").timestamp.tolist() == expected
    as_ms = read_table(millis, user="u", item="i", timestamp="t", time_unit="ms")
    assert as_ms.timestamp.tolist() == expected
    frame = pl.DataFrame({"u": [1, 1], "i": [2, 3], "t": [1704070952000, 1704070953500]})
    assert read_frame(frame, {"user": "u", "item": "i", "time_ms": "t"}).timestamp.tolist() == (
        expected
    )
    # the unit is said, and milliseconds read as seconds get a hint
    out = invoke("data", "prepare", "--from", millis, "--columns", "user=u,item=i,time_ms=t",
                 "--name", "ms", "--cache-dir", tmp_path / "c")  # fmt: skip
    assert (
        "times read as Unix milliseconds: 2024-01-01T01:02:32Z to 2024-01-01T01:02:33.500000Z"
        in out
    )
    out = invoke("data", "prepare", "--from", millis, "--columns", "user=u,item=i,time=t",
                 "--name", "s", "--cache-dir", tmp_path / "c")  # fmt: skip
    assert "times read as Unix seconds" in out and "map the column as time_ms=" in out


def test_datetime_columns_read_as_the_same_seconds_as_their_text(tmp_path):
    moments = [datetime(2024, 1, 1, 1, 2, 32, 123456), datetime(1969, 7, 20, 20, 17, 40)]
    naive = pl.DataFrame({"u": [1, 2], "i": [1, 1], "t": moments})
    aware = naive.with_columns(
        pl.col("t").dt.replace_time_zone("UTC").dt.convert_time_zone("Asia/Tokyo")
    )
    dates = pl.DataFrame({"u": [1], "i": [1], "t": [datetime(2024, 1, 1).date()]})
    expected = [m.replace(tzinfo=UTC).timestamp() for m in moments]
    for frame in (naive, aware):
        assert sorted(read_frame(frame, "user=u,item=i,time=t").timestamp) == sorted(expected)
        parquet = tmp_path / "t.parquet"
        frame.write_parquet(parquet)
        assert sorted(read_table(parquet, user="u", item="i", timestamp="t").timestamp) == sorted(
            expected
        )
        csv = tmp_path / "t.csv.gz"
        csv.write_bytes(gzip.compress(frame.write_csv().encode()))
        assert sorted(read_table(csv, user="u", item="i", timestamp="t").timestamp) == sorted(
            expected
        )
    assert read_frame(dates, "user=u,item=i,time=t").timestamp.tolist() == [
        datetime(2024, 1, 1, tzinfo=UTC).timestamp()
    ]


NOT_ISO = "is not an ISO-8601 time (the column's first time is one)"


@pytest.mark.parametrize(
    ("content", "line", "message"),
    [
        ("u,i,t\n1,2,2024-01-01T00:00:00Z\n1,3,2024-13-01T00:00:00Z\n", 3,
         f"timestamp '2024-13-01T00:00:00Z' {NOT_ISO}"),
        ("u,i,t\n1,2,2024-01-01\n1,3,1704070952\n", 3, f"timestamp '1704070952' {NOT_ISO}"),
        ("u,i,t\n1,2,1704070952\n1,3,2024-01-01\n", 3, "timestamp '2024-01-01' is not a number"),
        ("u,i,t\n1,2,yesterday\n", 2, "timestamp 'yesterday' is not a number or an ISO-8601 time"),
        ("u,i,t\n1,2,nan\n", 2, "timestamp 'nan' is not finite"),
    ],
)  # fmt: skip
def test_a_bad_time_is_one_error_naming_the_file_line_and_field(tmp_path, content, line, message):
    path = tmp_path / "t.csv"
    path.write_text(content)
    with pytest.raises(DataFormatError) as raised:
        read_table(path, user="u", item="i", timestamp="t")
    assert raised.value.line == line and str(raised.value) == f"{path}:{line}: {message}"
    result = runner.invoke(app, ["data", "stats", str(path), "--columns", "user=u,item=i,time=t"])
    assert result.exit_code == 1 and result.output.strip() == f"error: {path}:{line}: {message}"


def test_a_bad_time_in_a_parquet_file_or_a_frame_names_its_row(tmp_path):
    frame = pl.DataFrame(
        {"u": [1, 2, 3], "i": [1, 1, 1], "t": ["2024-01-01", "2024-01-02", "soon"]}
    )
    path = tmp_path / "t.parquet"
    frame.write_parquet(path)
    with pytest.raises(DataFormatError, match=r"t\.parquet: row 3: timestamp 'soon' is not an ISO"):
        read_table(path, user="u", item="i", timestamp="t")
    with pytest.raises(DataFormatError, match=r"^polars DataFrame: row 3: timestamp 'soon'"):
        read_frame(frame, "user=u,item=i,time=t")
    durations = frame.with_columns(pl.duration(seconds=pl.col("u")).alias("t"))
    with pytest.raises(
        DataFormatError, match=r"time column 't' holds Duration.* values: times are"
    ):
        read_frame(durations, "user=u,item=i,time=t")


def test_session_files_take_iso_times_too(tmp_path):
    path = tmp_path / "clicks.tsv"
    path.write_text(
        "SessionId\tItemId\tTime\n1\t5\t2024-01-01T01:02:32Z\n1\t6\t2024-01-01T01:02:33Z\n"
    )
    assert read_session_tsv(path).timestamp.tolist() == [MOMENT, MOMENT + 1]
