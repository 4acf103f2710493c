"""A user's own interaction table: CSV, TSV or Parquet, plain or gzipped, with a column mapping.

``TableLayout`` says how to read one: which column holds each role (``user``, ``item`` and
optionally ``time`` and ``rating``, by header name or 0-based index), the unit of a time column
of numbers, the format, the separator and whether line 1 is a header. ``TableLayout.parse``
builds it from the words a user types (``"user=uid,item=sku,time=ts"``) on the command line or
in a run config's ``[data]``. ``read_with_report`` reads the file and says what was read and
what was dropped and why (rows missing a mapped value are dropped, never guessed; a
``Cleaning`` drops more; a header with two columns of a mapped name is refused, naming it);
``read_table`` is the Python API's form. This module only turns the file into rows: typing
them is ``frames``' (the path a DataFrame takes too), splitting lines and line-numbered errors
``_parse``'s.
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
from attnsvm.rec.data._parse import file_bytes, file_text, header_index, split_lines
from attnsvm.rec.data._tokens import TIME_UNITS
from attnsvm.rec.data.cleaning import Cleaning
from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.frames import Rows, column_mapping, frame_rows, interactions_of
from attnsvm.rec.data.interactions import Interactions
from attnsvm.rec.data.limits import DECOMPRESSED_BYTES

FORMATS = ("csv", "tsv", "parquet")
_SEPARATOR_WORDS = {"\\t": "\t", "tab": "\t", "comma": ",", "semicolon": ";", "pipe": "|"}


@dataclass(frozen=True)
class TableLayout:
    """How to read a table: role → column (header name or 0-based index), format, separator
    (None: the format's own), header (None: there is one exactly when columns are named), and
    the unit of a time column of numbers (``_tokens.TIME_UNITS``)."""

    columns: dict[str, str | int]
    format: str | None = None  # None: from the file name (.csv, .tsv, .parquet, each maybe .gz)
    separator: str | None = None
    header: bool | None = None
    time_unit: str = "s"

    def __post_init__(self) -> None:
        if self.time_unit not in TIME_UNITS:
            raise InvalidRequest(
                f"time unit {shown(self.time_unit)} is not one of {', '.join(TIME_UNITS)}"
            )

    @classmethod
    def parse(
        cls,
        columns: str,
        format: str | None = None,
        separator: str | None = None,
        header: bool | None = None,
    ) -> TableLayout:
        """From ``"user=uid,item=sku,time=ts,rating=stars"`` (an index where a column is a
        number; ``time_ms=ts`` for times in milliseconds, see ``frames.column_mapping``); every
        mistake is an ``InvalidRequest`` saying what is expected."""
        mapping, time_unit = column_mapping(columns)
        if format is not None and format not in FORMATS:
            raise InvalidRequest(f"format {shown(format)} is not one of {', '.join(FORMATS)}")
        if separator is not None:
            separator = _SEPARATOR_WORDS.get(separator, separator)
            if len(separator) != 1 or separator in '"\n\r':
                raise InvalidRequest(
                    f"separator {shown(separator)} must be one character other than a quote or "
                    "a line break (or 'tab')"
                )
        return cls(mapping, format, separator, header, time_unit)


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
    time_unit: str = "s",
) -> Interactions:
    """Any CSV/TSV/Parquet: name (or, without a header, 0-based index) the columns to use.

    ``sep`` defaults to ',' for ``.csv`` and a tab otherwise. Ids may be any tokens. Times are
    numbers counted in ``time_unit`` (``"s"``, ``"ms"``, ``"us"``, ``"ns"``) since 1970,
    ISO-8601 text or (Parquet) datetimes; without a zone, UTC.
    """
    wanted = {"user": user, "item": item, "timestamp": timestamp, "rating": rating}
    columns = {role: column for role, column in wanted.items() if column is not None}
    return read_with_report(path, TableLayout(columns, None, sep, header, time_unit), data)[0]


def read_with_report(
    path: str | Path,
    layout: TableLayout,
    data: bytes | None = None,
    cleaning: Cleaning | None = None,
) -> tuple[Interactions, dict]:
    """The table ``layout`` describes, cleaned as ``cleaning`` says, and what was read: format,
    separator, header, mapping, rows, the rows dropped by reason (a mapped value missing), what
    each cleaning step removed and how the times were read (``frames.interactions_of``)."""
    cleaning = cleaning or Cleaning()
    rows, report = table_rows(path, layout, data, cleaning)
    table, read = interactions_of(rows, layout.time_unit, cleaning)
    return table, report | read


def table_rows(
    path: str | Path,
    layout: TableLayout,
    data: bytes | None = None,
    cleaning: Cleaning | None = None,
) -> tuple[Rows, dict]:
    """The rows of the file ``layout`` describes, by role and untyped (any roles: the item
    titles' reader maps its own), and how the file was read: format, compression, mapping and,
    for CSV and TSV, separator and header."""
    cleaning = cleaning or Cleaning()
    data = file_bytes(path, data)
    name = str(path).removesuffix(".gz")
    compressed = data.startswith(b"\x1f\x8b")
    if compressed:
        data = _gunzip(path, data)
    kind = layout.format or next((f for f in FORMATS if name.endswith(f".{f}")), "tsv")
    report = {
        "format": kind,
        "compressed": "gzip" if compressed else None,
        "columns": dict(layout.columns),
    }
    if kind == "parquet":
        rows = frame_rows(str(path), _parquet(path, data), layout.columns, cleaning)
    else:
        rows = _delimited_rows(path, data, layout, kind, cleaning, report)
    return rows, report


def _gunzip(path: str | Path, data: bytes) -> bytes:
    """``data`` decompressed a block at a time, refused as soon as it passes the cap on
    decompressed bytes (``limits.DECOMPRESSED_BYTES``: a gzip bomb)."""
    blocks, size = [], 0
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
            while block := stream.read(1 << 20):
                size += len(block)
                DECOMPRESSED_BYTES.check(path, size, "decompresses to at least")
                blocks.append(block)
    except (OSError, EOFError, zlib.error) as error:
        raise DataFormatError(path, f"is a damaged gzip file ({error})") from None
    return b"".join(blocks)


def _parquet(path: str | Path, data: bytes) -> pl.DataFrame:
    try:
        return pl.read_parquet(io.BytesIO(data))
    except Exception:  # polars raises several types; all mean "not a parquet file"
        raise DataFormatError(path, "is not a readable Parquet file") from None


def _delimited_rows(
    path: str | Path, data: bytes, layout: TableLayout, kind: str, cleaning: Cleaning, report: dict
) -> Rows:
    """A CSV or TSV file's rows, every field as its text; adds the separator and header it was
    read with to ``report``."""
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
    positions: dict[str | int, int] = {}  # each row filter's column → its index
    for column in {f.column for f in cleaning.filters}:
        if isinstance(column, int):
            positions[column] = column
        elif header:
            positions[column] = header_index(path, names, {"row filter": column})["row filter"]
        else:
            raise DataFormatError(
                path, "without a header, a row filter names its column by 0-based index (3<=0)"
            )
    needed = max([*index.values(), *positions.values()]) + 1
    short = next((k for k, r in enumerate(records) if len(r) < needed), None)
    if short is not None:
        raise DataFormatError(
            path,
            f"has {len(records[short])} fields, column {needed - 1} is needed",
            int(numbers[short]),
        )

    def text(position: int) -> pl.Series:
        return pl.Series([r[position] for r in records], dtype=pl.String)

    repeats = None
    if cleaning.drop_duplicates == "exact":  # every field's text, the unmapped ones too
        seen: set[tuple[str, ...]] = set()
        repeats = np.zeros(len(records), dtype=bool)
        for position, record in enumerate(records):
            repeats[position] = (key := tuple(record)) in seen
            seen.add(key)
    return Rows(
        str(path),
        {role: text(index[role]) for role in layout.columns},
        {c: text(k) for c, k in positions.items()},
        numbers,
        lines=True,
        repeats=repeats,
    )
