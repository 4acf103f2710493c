"""A user's own interaction table: CSV, TSV or Parquet, plain or gzipped, with a column mapping.

``TableLayout`` says how to read one: which column holds each role (``user``, ``item`` and
optionally ``time`` and ``rating``, by header name or 0-based index), the format, the separator
and whether line 1 is a header. ``TableLayout.parse`` builds it from the words a user types
(``"user=uid,item=sku,time=ts"``) on the command line or in a run config's ``[data]``.
``read_with_report`` reads the file and says what was read and what was dropped and why (rows
missing a mapped value are dropped, never guessed); ``read_table`` is the Python API's form.
Splitting, typing and line-numbered errors are ``_parse``'s.
"""

from __future__ import annotations

import gzip
import io
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from attnsvm.errors import InvalidRequest, shown
from attnsvm.rec.data._parse import (
    MAX_ID_LENGTH,
    file_bytes,
    file_text,
    from_mapped,
    header_index,
    split_lines,
)
from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.interactions import Interactions

FORMATS = ("csv", "tsv", "parquet")
# the words a mapping uses → the reader's roles ("time" is what users write; "timestamp" also)
ROLES = {
    "user": "user",
    "item": "item",
    "time": "timestamp",
    "timestamp": "timestamp",
    "rating": "rating",
}
_SEPARATOR_WORDS = {"\\t": "\t", "tab": "\t", "comma": ",", "semicolon": ";", "pipe": "|"}


@dataclass(frozen=True)
class TableLayout:
    """How to read a table: role → column (header name or 0-based index), format, separator
    (None: the format's own), header (None: there is one exactly when columns are named)."""

    columns: dict[str, str | int]
    format: str | None = None  # None: from the file name (.csv, .tsv, .parquet, each maybe .gz)
    separator: str | None = None
    header: bool | None = None

    @classmethod
    def parse(
        cls,
        columns: str,
        format: str | None = None,
        separator: str | None = None,
        header: bool | None = None,
    ) -> TableLayout:
        """From ``"user=uid,item=sku,time=ts,rating=stars"`` (an index where a column is a
        number); every mistake is an ``InvalidRequest`` saying what is expected."""
        mapping: dict[str, str | int] = {}
        for part in columns.split(","):
            word, equals, column = (piece.strip() for piece in part.partition("="))
            if not equals or word not in ROLES or not column:
                raise InvalidRequest(
                    f"column mapping {shown(part.strip())} is not ROLE=COLUMN with ROLE one of "
                    "user, item, time, rating (e.g. 'user=uid,item=sku,time=ts')"
                )
            if ROLES[word] in mapping:
                raise InvalidRequest(f"column mapping names the {word} column twice")
            mapping[ROLES[word]] = int(column) if column.isdigit() else column
        if "user" not in mapping or "item" not in mapping:
            raise InvalidRequest(
                f"column mapping {shown(columns)} must name the user and item columns"
            )
        if format is not None and format not in FORMATS:
            raise InvalidRequest(f"format {shown(format)} is not one of {', '.join(FORMATS)}")
        if separator is not None:
            separator = _SEPARATOR_WORDS.get(separator, separator)
            if len(separator) != 1 or separator in '"\n\r':
                raise InvalidRequest(
                    f"separator {shown(separator)} must be one character other than a quote or "
                    "a line break (or 'tab')"
                )
        return cls(mapping, format, separator, header)


def read_table(
    path: str | Path,
    *,
    user: str | int,
    item: str | int,
    timestamp: str | int | None = None,
    rating: str | int | None = None,
    sep: str | None = None,
    header: bool = True,
    data: bytes | None = None,
) -> Interactions:
    """Any CSV/TSV/Parquet: name (or, without a header, 0-based index) the columns to use.

    ``sep`` defaults to ',' for ``.csv`` and a tab otherwise. Ids may be any tokens.
    """
    wanted = {"user": user, "item": item, "timestamp": timestamp, "rating": rating}
    columns = {role: column for role, column in wanted.items() if column is not None}
    return read_with_report(path, TableLayout(columns, None, sep, header), data)[0]


def read_with_report(
    path: str | Path, layout: TableLayout, data: bytes | None = None
) -> tuple[Interactions, dict]:
    """The table ``layout`` describes, and what was read: format, separator, header, mapping,
    rows, and the rows dropped by reason (a mapped value missing)."""
    data = file_bytes(path, data)
    name = str(path).removesuffix(".gz")
    compressed = data.startswith(b"\x1f\x8b")
    if compressed:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as error:
            raise DataFormatError(path, f"is a damaged gzip file ({error})") from None
    kind = layout.format or next((f for f in FORMATS if name.endswith(f".{f}")), "tsv")
    report = {
        "format": kind,
        "compressed": "gzip" if compressed else None,
        "columns": dict(layout.columns),
    }
    if kind == "parquet":
        table, rows, dropped = _read_parquet(path, layout.columns, data)
        return table, report | {"rows": rows, "kept": len(table), "dropped": dropped}
    sep = layout.separator or ("," if kind == "csv" else "\t")
    header = layout.header
    if header is None:
        header = any(isinstance(c, str) for c in layout.columns.values())
    report |= {"separator": sep, "header": header}
    text = file_text(path, data)
    records, numbers = split_lines(text, path, sep, None, quoted=True)
    index = {r: c for r, c in layout.columns.items() if isinstance(c, int)}
    if header:
        names = [field.strip() for field in records[0]]
        named = {r: c for r, c in layout.columns.items() if isinstance(c, str)}
        index |= header_index(path, names, named)
        records, numbers = records[1:], numbers[1:]
        ragged = next((k for k, r in enumerate(records) if len(r) != len(names)), None)
        if ragged is not None:
            raise DataFormatError(
                path,
                f"expected {len(names)} fields separated by {sep!r}, found {len(records[ragged])}",
                int(numbers[ragged]),
            )
        if not records:
            raise DataFormatError(path, "has a header and no data lines")
    elif any(isinstance(c, str) for c in layout.columns.values()):
        raise DataFormatError(
            path, "without a header, columns are given by 0-based index (e.g. user=0,item=1)"
        )
    needed = max(index.values()) + 1
    short = next((k for k, r in enumerate(records) if len(r) < needed), None)
    if short is not None:
        raise DataFormatError(
            path,
            f"has {len(records[short])} fields, column {needed - 1} is needed",
            int(numbers[short]),
        )
    keep = np.ones(len(records), dtype=bool)
    dropped = {}
    for role, column in index.items():
        missing = np.array([not r[column].strip() for r in records], dtype=bool) & keep
        if missing.any():
            dropped[f"no {role}"] = int(missing.sum())
            keep &= ~missing
    if not keep.any():
        raise DataFormatError(path, f"has no row with every mapped value ({dropped})")
    kept = [records[k] for k in np.flatnonzero(keep)]
    table = from_mapped(path, kept, numbers[keep], index, numeric_ids=False)
    return table, report | {"rows": len(records), "kept": len(table), "dropped": dropped}


def _read_parquet(path: str | Path, wanted: dict, data: bytes) -> tuple[Interactions, int, dict]:
    try:
        frame = pl.read_parquet(io.BytesIO(data))
    except Exception as error:  # polars raises several types; all mean "not a parquet file"
        raise DataFormatError(
            path, f"is not a readable Parquet file ({type(error).__name__})"
        ) from None
    rows, dropped, keys = frame.height, {}, {}
    for role, name in wanted.items():
        if isinstance(name, int) and not 0 <= name < len(frame.columns):
            raise DataFormatError(path, f"has no column {name} (it has {len(frame.columns)})")
        key = frame.columns[name] if isinstance(name, int) else name
        if key not in frame.columns:
            raise DataFormatError(
                path, f"has no {role} column {key!r} (columns: {shown(', '.join(frame.columns))})"
            )
        keys[role] = key
    for role, key in keys.items():
        missing = frame.get_column(key).is_null().sum()
        if missing:
            dropped[f"no {role}"] = int(missing)
            frame = frame.filter(pl.col(key).is_not_null())
    if frame.height == 0:
        raise DataFormatError(path, f"has no row with every mapped value ({dropped})")
    columns = {
        role: _parquet_column(path, frame.get_column(key), role) for role, key in keys.items()
    }
    for role in ("timestamp", "rating"):
        if role in columns:
            if columns[role].dtype.kind not in "iuf":
                raise DataFormatError(path, f"{role} column is not numeric")
            columns[role] = columns[role].astype(np.float64)
    table = Interactions.from_columns(
        columns["user"],
        columns["item"],
        columns.get("timestamp"),
        columns.get("rating"),
        source=str(path),
    )
    return table, rows, dropped


def _parquet_column(path: str | Path, series: pl.Series, role: str) -> np.ndarray:
    """One mapped column's values, checked for what the table may hold in ``role``."""
    key = series.name
    values = series.to_numpy()
    if role == "timestamp" and values.dtype.kind == "M":  # a datetime column: Unix seconds
        values = values.astype("datetime64[ns]").astype(np.int64) / 1e9
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        # polars counts NaN as a value, not a null: a NaN time would sort anywhere
        row = int(np.flatnonzero(~np.isfinite(values))[0])
        raise DataFormatError(path, f"{role} column {key!r} is not finite in row {row + 1}")
    if role in ("user", "item") and values.dtype.kind == "f":
        fractional = (values != np.round(values)) | (np.abs(values) >= 2.0**63)
        if fractional.any():
            row = int(np.flatnonzero(fractional)[0])
            raise DataFormatError(path, f"{role} id in row {row + 1} is not a 64-bit integer")
        values = values.astype(np.int64)
    if role in ("user", "item") and series.dtype == pl.String:
        # text ids are stored at the width of the longest: one huge id makes them all huge
        too_long = series.str.len_chars() > MAX_ID_LENGTH
        if too_long.any():
            row = int(too_long.arg_true()[0])
            raise DataFormatError(
                path, f"{role} id in row {row + 1} is over {MAX_ID_LENGTH:,} characters"
            )
    if role in ("user", "item") and values.dtype.kind not in "iuUSO":
        raise DataFormatError(path, f"{role} column {key!r} holds {values.dtype} values")
    return values
