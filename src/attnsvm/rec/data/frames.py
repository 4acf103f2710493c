"""Tables with a column mapping → ``Interactions``: the one path that a CSV or TSV file (its
fields as text), a Parquet file, and a DataFrame (pandas, polars) or pyarrow Table all take, so
that the same rows give the same dataset whatever they came in.

``column_mapping`` reads a mapping (``"user=uid,item=sku,time=ts"`` or the same as a dict);
``Rows`` is a table before typing: the mapped columns by role, the columns the row filters
read, and each row's 1-based line (a file) or row (Parquet, a DataFrame). ``interactions_of``
types it: a row missing a mapped value (a null, or text that is blank) is dropped and counted by
role, the cleaning's steps run (``cleaning``), and then

- ids become int64 where every one is an integer written as ``str(int)`` writes it
  (``_tokens``: ``+10``, ``1_0``, ``١٠`` or ``007`` makes the column text, so no two ids merge),
  text otherwise (a float column must hold whole numbers; any other type is read as its text);
- ratings become finite numbers;
- times become Unix seconds: from numbers counted in the mapping's unit (``time=ts`` seconds,
  ``time_ms=ts`` milliseconds, ``time_us``, ``time_ns``), from ISO-8601 text, or from datetime
  and date columns; a time without a zone is UTC. Integer times (and datetimes) order the rows
  exactly, as int64;
- a column of lists or records (Parquet, a DataFrame) is refused, naming it.

Text is typed by ``_tokens``' functions whatever held it, so a Parquet column of text is
read exactly as the same column of a CSV. ``read_frame`` is the Python API for a DataFrame;
``tables`` reads the files.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa

from attnsvm.errors import InvalidRequest, shown
from attnsvm.rec.data._parse import blank
from attnsvm.rec.data._tokens import (
    TIME_UNITS,
    Origin,
    Times,
    floats,
    time_columns,
    times,
    tokens_as_ids,
    unix_seconds,
)
from attnsvm.rec.data.cleaning import Cleaning
from attnsvm.rec.data.errors import DataFormatError, NotATable
from attnsvm.rec.data.interactions import Interactions

ACCEPTED = "a pandas DataFrame, a polars DataFrame or a pyarrow Table"
# the words a mapping uses → the roles ("time" is what users write; "timestamp" also)
ROLES = {
    "user": "user",
    "item": "item",
    "time": "timestamp",
    "timestamp": "timestamp",
    "rating": "rating",
}
# a time column of numbers in a unit other than seconds: "time_ms=ts"
_TIME_WORDS = {f"time_{unit}": unit for unit in TIME_UNITS}


def column_mapping(columns: str | Mapping[str, str | int]) -> tuple[dict[str, str | int], str]:
    """Role → column (a name, or a 0-based position) from ``"user=uid,item=sku,time=ts"`` or
    ``{"user": "uid", "item": "sku", "time": "ts"}``, and the unit of a time column of numbers
    (``"s"``, or the one ``time_ms`` / ``time_us`` / ``time_ns`` names). In the text form a
    column that is all digits is a position. Every mistake is an ``InvalidRequest``."""
    if isinstance(columns, str):
        pairs = []
        for part in columns.split(","):
            word, equals, column = (piece.strip() for piece in part.partition("="))
            if not equals or not column:
                word = ""  # refused below, naming the part
            pairs.append((word, int(column) if column.isdigit() else column, part.strip()))
    elif isinstance(columns, Mapping):
        pairs = [(word, column, f"{word}={column}") for word, column in columns.items()]
    else:
        raise InvalidRequest(
            "a column mapping is text ('user=uid,item=sku') or a dict, "
            f"not {type(columns).__name__}"
        )
    mapping: dict[str, str | int] = {}
    unit = "s"
    for word, column, part in pairs:
        known = isinstance(word, str) and (word in ROLES or word in _TIME_WORDS)
        if not known or isinstance(column, bool) or not isinstance(column, str | int):
            raise InvalidRequest(
                f"column mapping {shown(part)} is not ROLE=COLUMN with ROLE one of user, item, "
                "time (or time_ms, time_us, time_ns for numbers in those units), rating "
                "(e.g. 'user=uid,item=sku,time=ts')"
            )
        role = ROLES.get(word, "timestamp")
        if role in mapping:
            raise InvalidRequest(f"column mapping names the {word} column twice")
        mapping[role] = column
        unit = _TIME_WORDS.get(word, unit)
    if "user" not in mapping or "item" not in mapping:
        raise InvalidRequest(f"column mapping {shown(columns)} must name the user and item columns")
    return mapping, unit


@dataclass(frozen=True)
class Rows:
    """A table's rows before typing. ``roles``: role → its column, as the source holds it (text
    for a delimited file, native types for Parquet and DataFrames); ``filtered``: each row
    filter's column, by the column as the filter names it; ``numbers``: each row's 1-based line
    (``lines``) or row; ``repeats``: the rows identical in every column to an earlier row, where
    the cleaning drops exact duplicates."""

    source: str
    roles: dict[str, pl.Series]
    filtered: dict[str | int, pl.Series]
    numbers: np.ndarray
    lines: bool
    repeats: np.ndarray | None = None


def interactions_of(
    rows: Rows, time_unit: str = "s", cleaning: Cleaning | None = None
) -> tuple[Interactions, dict]:
    """The typed table, and what happened to the rows: ``rows`` read, ``kept``, ``dropped`` (by
    the role that was missing), ``cleaned`` (by the cleaning step) and, with a time column,
    ``times`` (how they were read and their range)."""
    cleaning = cleaning or Cleaning()
    count = len(rows.numbers)
    if count == 0:
        raise DataFormatError(rows.source, "has no rows")
    for role, series in rows.roles.items():
        if series.dtype.is_nested():  # a list or a record in each row: not one id, nor one time
            raise DataFormatError(
                rows.source,
                f"column {series.name!r} (the {role} column) holds {series.dtype} values, not one "
                "value per row: explode the lists or unnest the records into columns first",
            )
    keep = np.ones(count, dtype=bool)
    dropped: dict[str, int] = {}
    for role, series in rows.roles.items():
        missing = blank(series) & keep
        if missing.any():
            dropped[f"no {role}"] = int(missing.sum())
            keep &= ~missing
    if not keep.any():
        raise DataFormatError(rows.source, f"has no row with every mapped value ({dropped})")
    cleaned: dict[str, int] = {}
    for row_filter in cleaning.filters:
        hit = np.zeros(count, dtype=bool)
        column = rows.filtered[row_filter.column].filter(pl.Series(keep))
        hit[keep] = row_filter.matches(column, _origin(rows, keep))
        cleaned[f"where {row_filter}"] = int(hit.sum())
        keep &= ~hit
    if rows.repeats is not None:
        cleaned["exact duplicates"] = int((rows.repeats & keep).sum())
        keep &= ~rows.repeats
    if not keep.any():
        raise DataFormatError(rows.source, f"the cleaning removes every row ({cleaned})")
    origin = _origin(rows, keep)
    column = {role: series.filter(pl.Series(keep)) for role, series in rows.roles.items()}
    when = rating = None
    report: dict = {"rows": count}
    if "timestamp" in column:
        when = _times(column["timestamp"], origin, time_unit)
        report["times"] = when.report()
    if "rating" in column:
        rating = _ratings(column["rating"], origin)
    table = Interactions.from_columns(
        _ids(column["user"], "user id", origin),
        _ids(column["item"], "item id", origin),
        rating=rating,
        source=rows.source,
        **time_columns(when),
    )
    table, removed = cleaning.apply(table)
    cleaned |= removed
    report |= {"kept": len(table), "dropped": dropped}
    if cleaned:
        report["cleaned"] = cleaned
    return table, report


def _origin(rows: Rows, keep: np.ndarray) -> Origin:
    # no header hint: these tables have a header of their own, or columns picked by position
    return Origin.per_row(rows.source, rows.numbers[keep], header_hint=False, rows=not rows.lines)


def _int64(series: pl.Series, what: str, origin: Origin) -> np.ndarray:
    """An integer column as int64: a UInt64 value beyond int64 is an error naming its row."""
    values = series.to_numpy()
    if series.dtype == pl.UInt64 and values.max() > np.iinfo(np.int64).max:
        index = int(np.argmax(values))
        raise origin.error(f"{what} {int(values[index])} is out of the 64-bit integer range", index)
    return values.astype(np.int64)


def _ids(series: pl.Series, what: str, origin: Origin) -> np.ndarray:
    dtype = series.dtype
    if dtype.is_integer():
        return _int64(series, what, origin)
    if dtype.is_float():
        values = series.to_numpy()
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(values) | (values != np.round(values)) | (np.abs(values) >= 2.0**63)
        if bad.any():
            index = int(np.flatnonzero(bad)[0])
            raise origin.error(f"{what} {float(values[index])!r} is not a 64-bit integer", index)
        return values.astype(np.int64)
    if dtype != pl.String:
        try:
            series = series.cast(pl.String)
        except pl.exceptions.PolarsError:
            raise DataFormatError(
                origin.path, f"{what} column {series.name!r} holds {dtype} values, not ids"
            ) from None
    return tokens_as_ids(series.to_list(), what, origin)


def _numbers(series: pl.Series, what: str, origin: Origin) -> np.ndarray | None:
    """A column of numbers as finite float64; None where it is not numbers (nor text)."""
    if series.dtype == pl.String:
        return floats(series.to_list(), what, origin)
    if not series.dtype.is_numeric():
        return None
    values = series.cast(pl.Float64).to_numpy()
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:  # as text reads 'nan' or 'inf': a value, refused, never a missing one
        raise origin.error(f"{what} {shown(str(float(values[bad[0]])))} is not finite", int(bad[0]))
    return values


def _ratings(series: pl.Series, origin: Origin) -> np.ndarray:
    values = _numbers(series, "rating", origin)
    if values is None:
        raise DataFormatError(
            origin.path, f"rating column {series.name!r} holds {series.dtype} values, not numbers"
        )
    return values


def _times(series: pl.Series, origin: Origin, unit: str) -> Times:
    """The time column read: Unix seconds, how they were read and, where the column holds
    integers or datetimes, those exactly (the rows' order)."""
    if series.dtype == pl.String:
        return times(series.to_list(), "timestamp", origin, unit)
    if series.dtype == pl.Datetime:
        # seconds from microseconds: what an ISO-8601 time holds, so both give the same seconds
        seconds = series.dt.epoch("us").to_numpy() / 1e6
        exact = series.dt.epoch(series.dtype.time_unit).to_numpy()
        return Times(seconds, "datetimes (UTC where no zone is given)", exact)
    if series.dtype == pl.Date:
        return Times(series.dt.epoch("d").to_numpy() * 86400.0, "dates (midnight UTC)")
    if series.dtype.is_integer():  # exactly, never through float64
        return unix_seconds(_int64(series, "timestamp", origin), unit)
    values = _numbers(series, "timestamp", origin)
    if values is None:
        raise DataFormatError(
            origin.path,
            f"time column {series.name!r} holds {series.dtype} values: times are numbers, "
            "ISO-8601 text, datetimes or dates",
        )
    return unix_seconds(values, unit)


# -- DataFrames ----------------------------------------------------------------------------


def table_kind(frame: object) -> str:
    """What ``frame`` is ("pandas DataFrame", "polars DataFrame", "pyarrow Table"); anything
    but ``ACCEPTED`` is a ``NotATable`` saying what is."""
    if isinstance(frame, pl.DataFrame):
        return "polars DataFrame"
    if isinstance(frame, pa.Table):
        return "pyarrow Table"
    pandas = sys.modules.get("pandas")  # a pandas DataFrame exists only once pandas is imported
    if pandas is not None and isinstance(frame, pandas.DataFrame):
        return "pandas DataFrame"
    kind = type(frame)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    hint = " (call .collect() on it first)" if isinstance(frame, pl.LazyFrame) else ""
    raise NotATable(f"a table is {ACCEPTED}, not a {name}{hint}")


def as_polars(frame: object) -> tuple[pl.DataFrame, str]:
    """``frame`` as a polars DataFrame, and what it was (``table_kind``; messages name it)."""
    kind = table_kind(frame)
    if kind == "polars DataFrame":
        return frame, kind
    if kind == "pyarrow Table":
        try:
            return pl.DataFrame(pl.from_arrow(frame)), kind
        except (pa.ArrowException, pl.exceptions.PolarsError) as error:
            raise DataFormatError("pyarrow Table", f"cannot be read ({error})") from None
    return _from_pandas(frame), kind


def _from_pandas(frame) -> pl.DataFrame:
    """Column by column, so that one polars cannot hold as it is (Python objects of mixed
    types, UUIDs) is read as the text of its values; NaN and None are missing values. A named
    index (``set_index("ts")``) is a column like the others."""
    indexed = [name for name in frame.index.names if name is not None]
    if indexed and not set(indexed) & set(frame.columns):
        frame = frame.reset_index()
    names = [str(name) for name in frame.columns]
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice is not None:
        raise DataFormatError("pandas DataFrame", f"has two columns named {twice!r}")
    columns = []
    for position, name in enumerate(names):
        values = frame.iloc[:, position]
        try:
            column = pl.from_pandas(values)
        except (pa.ArrowException, pl.exceptions.PolarsError):
            column = None
        if column is None or column.dtype in (pl.Binary, pl.Object):
            missing = values.isna().to_numpy()
            text = [None if gone else str(v) for v, gone in zip(values, missing, strict=True)]
            column = pl.Series(name, text, dtype=pl.String)
        columns.append(column.alias(name))
    return pl.DataFrame(columns)


def frame_rows(
    source: str, frame: pl.DataFrame, mapping: dict[str, str | int], cleaning: Cleaning
) -> Rows:
    """The rows of a polars DataFrame (one of the user's, or a Parquet file's) for
    ``interactions_of``: the mapped columns and the filters' columns, found by name or
    position, and the exact duplicates where the cleaning drops them."""

    def column(reference: str | int, what: str) -> pl.Series:
        if isinstance(reference, int):
            if not 0 <= reference < frame.width:
                raise DataFormatError(source, f"has no column {reference} (it has {frame.width})")
            return frame.to_series(reference)
        if reference not in frame.columns:
            raise DataFormatError(
                source,
                f"has no {what} column {reference!r} (columns: {shown(', '.join(frame.columns))})",
            )
        return frame.get_column(reference)

    roles = {role: column(reference, role) for role, reference in mapping.items()}
    filtered = {f.column: column(f.column, f"row filter {str(f)!r}") for f in cleaning.filters}
    repeats = None
    if cleaning.drop_duplicates == "exact" and frame.height:
        first = frame.select(pl.struct(pl.all()).is_first_distinct()).to_series().to_numpy()
        repeats = ~first
    return Rows(
        source, roles, filtered, np.arange(1, frame.height + 1), lines=False, repeats=repeats
    )


def frame_with_report(
    frame: object,
    columns: str | Mapping[str, str | int],
    cleaning: Cleaning | None = None,
    source: str | None = None,
) -> tuple[Interactions, dict]:
    """``read_frame``'s table, and what was read (as ``tables.read_with_report`` says it)."""
    mapping, unit = column_mapping(columns)
    table, kind = as_polars(frame)
    cleaning = cleaning or Cleaning()
    rows = frame_rows(source or kind, table, mapping, cleaning)
    interactions, report = interactions_of(rows, unit, cleaning)
    return interactions, {"format": kind, "columns": mapping} | report


def read_frame(
    frame: object, columns: str | Mapping[str, str | int], *, source: str | None = None
) -> Interactions:
    """The interactions of a DataFrame: ``frame`` is a pandas DataFrame, a polars DataFrame or a
    pyarrow Table; ``columns`` maps the roles to its columns as a file's mapping does
    (``{"user": "customer_id", "item": "sku", "time": "ts"}``, optionally ``"rating"``; or
    ``"user=customer_id,item=sku,time=ts"``). The same rows in a CSV, TSV or Parquet file read
    with the same mapping give the same ``Interactions``.

    Ids may be of any type (integers stay integers; anything else is its text); times are
    numbers (seconds, or the unit ``time_ms`` / ``time_us`` / ``time_ns`` names), ISO-8601
    text or datetimes, UTC where no zone is given. Rows missing a mapped value (null, NaN in
    pandas, blank text) are dropped. ``source`` names the frame in messages (default: its
    kind). Bad values raise ``DataFormatError`` naming the row and the role; an object of
    another kind raises ``NotATable``.
    """
    return frame_with_report(frame, columns, source=source)[0]
