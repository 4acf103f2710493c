"""The readers' parsing toolkit: bytes → text → rows, every failure a ``DataFormatError`` naming
the file and the 1-based line.

Owns what every format shares: reading and decoding a file, polars' fast path for clean
delimited files, splitting lines into fields, and mapping a header's columns to roles. Typing
the fields (ids, numbers, times: the one parsing rule every format follows) is ``_tokens``';
``readers`` keeps one function per file format on top of both; ``frames`` is the one path every
table with a column mapping takes.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import polars as pl

from attnsvm._files import read_bytes
from attnsvm.errors import UnreadableFile, shown
from attnsvm.rec.data._tokens import (
    Origin,
    floats,
    integers,
    time_columns,
    times,
    tokens_as_ids,
)
from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.interactions import Interactions

# -- bytes → text → rows -------------------------------------------------------------------


def file_bytes(path: str | Path, data: bytes | None) -> bytes:
    """The file's bytes (``data`` when given); an empty file, or anything but a regular file (a
    directory, a named pipe that would block), is an error."""
    if data is None:
        try:
            data = read_bytes(path)
        except UnreadableFile as error:
            raise DataFormatError(path, error.problem) from None
    if not data.strip():
        raise DataFormatError(path, "is empty")
    return data


# Files that are not text, or text in another encoding, by their first bytes: what a user most
# often gives instead of an export (a compressed file, an Excel workbook, UTF-16 from Windows).
_OTHER_KINDS = (
    (b"\x1f\x8b", "is gzip-compressed: decompress it first (gunzip)"),
    (b"PK\x03\x04", "is a zip archive (or an Excel .xlsx workbook): extract or export it as text"),
    (b"\xd0\xcf\x11\xe0", "is an Excel .xls workbook: export it as CSV (UTF-8)"),
    (b"\xff\xfe", "is UTF-16 text: save it as UTF-8"),
    (b"\xfe\xff", "is UTF-16 text: save it as UTF-8"),
    (b"BZh", "is bzip2-compressed: decompress it first"),
    (b"\xfd7zXZ", "is xz-compressed: decompress it first"),
    (b"PAR1", "is a Parquet file: read it with read_table and a column mapping"),
)


def file_text(path: str | Path, data: bytes | None) -> str:
    """The file decoded as strict UTF-8 (BOM and CRLF tolerated)."""
    data = file_bytes(path, data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        kind = next((what for magic, what in _OTHER_KINDS if data.startswith(magic)), None)
        if kind is not None:
            raise DataFormatError(path, kind) from None
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise DataFormatError(
            path, f"is not valid UTF-8 (byte 0x{data[error.start]:02x} at column {column})", line
        ) from None
    if "\x00" in text:  # valid UTF-8, but no text format holds NUL bytes (UTF-16 without BOM)
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise DataFormatError(path, "holds NUL bytes: not a text file (UTF-16?)", line)
    return text.removeprefix("\ufeff").replace("\r\n", "\n")


def fast_columns(data: bytes, sep: str, schema: dict, skip: int) -> list[np.ndarray] | None:
    """Clean files parse in polars' native reader. Anything it doubts (an exception, a null, a
    non-finite number, a CR, no rows) returns None, and the caller reads line by line, which
    names the first bad line: the fast path never decides an error itself. Nor does it see a
    BOM or any other byte beyond ASCII, a "+" or a "_", which ``_tokens``' rule may refuse where
    polars would read a number."""
    if b"\r" in data or not data.isascii() or b"+" in data or b"_" in data:
        return None
    if len(sep) > 1:  # polars takes one-byte separators: '::' becomes the unit separator
        if b"\x1f" in data:
            return None
        data, sep = data.replace(sep.encode(), b"\x1f"), "\x1f"
    try:
        frame = pl.read_csv(
            io.BytesIO(data),
            separator=sep,
            has_header=False,
            skip_rows=skip,
            schema=schema,
            quote_char=None,
        )
    except Exception:  # any parse problem: the line-by-line reader reports it precisely
        return None
    if frame.height == 0 or frame.null_count().sum_horizontal().item():
        return None
    columns = [frame.get_column(name).to_numpy() for name in schema]
    if any(c.dtype.kind == "f" and not np.isfinite(c).all() for c in columns):
        return None
    return columns


def split_lines(
    text: str,
    path: str | Path,
    sep: str | None,
    width: int | None,
    skip: int = 0,
    quoted: bool = False,
) -> tuple[list[list[str]], np.ndarray]:
    """Non-blank lines (after ``skip`` header lines) split on ``sep`` (None: any whitespace).

    Returns the field lists and each one's 1-based line number. With ``width`` every line must
    have exactly that many fields. ``quoted`` (a one-character ``sep``): CSV quoting, so a
    field in double quotes may hold the separator, a doubled quote or a line break.
    """
    rows, numbers = [], []
    for index, fields in _records(text, path, sep, skip, quoted):
        if len(fields) <= 1 and not "".join(fields).strip():
            continue
        if width is not None and len(fields) != width:
            shown = "whitespace" if sep is None else repr(sep)
            raise DataFormatError(
                path, f"expected {width} fields separated by {shown}, found {len(fields)}", index
            )
        rows.append(fields)
        numbers.append(index)
    if not rows:
        raise DataFormatError(path, "has no data lines")
    return rows, np.asarray(numbers, dtype=np.int64)


def _records(
    text: str, path: str | Path, sep: str | None, skip: int, quoted: bool
) -> Iterator[tuple[int, list[str]]]:
    """Each record after the first ``skip`` lines with the 1-based line it starts on."""
    if not quoted:
        for index, line in enumerate(text.split("\n")[skip:], start=skip + 1):
            yield index, line.split(sep)
        return
    reader = csv.reader(io.StringIO(text), delimiter=sep, strict=True)
    start = 1
    try:
        for fields in reader:
            if start > skip:
                yield start, fields
            start = reader.line_num + 1
    except csv.Error as error:
        raise DataFormatError(path, f"is not valid CSV here ({error})", reader.line_num) from None


def blank(series: pl.Series) -> np.ndarray:
    """Which values of a table's column are missing: a null, or text that is empty once
    stripped (Python's strip, as every text reader here strips)."""
    if series.dtype == pl.String:
        return np.array([v is None or not v.strip() for v in series.to_list()], dtype=bool)
    return series.is_null().to_numpy()


def transpose(rows: list[list[str]]) -> list[tuple[str, ...]]:
    """Rows of fields as columns of tokens."""
    return list(zip(*rows, strict=True))


# -- header-driven tables -------------------------------------------------------------------


def header_index(path: str | Path, header: list[str], wanted: dict[str, str | None]) -> dict:
    """Column index of each wanted role (role → header name); a clear error if one is missing,
    or if two columns have its name (which of them was meant, no reader can know)."""
    index = {}
    for role, name in wanted.items():
        if name is None:
            continue
        if name not in header:
            raise DataFormatError(
                path, f"has no {role} column {name!r} (header: {shown(', '.join(header))})", 1
            )
        positions = [position for position, field in enumerate(header) if field == name]
        if len(positions) > 1:
            raise DataFormatError(
                path,
                f"has {len(positions)} columns named {shown(name)} (0-based columns "
                f"{', '.join(map(str, positions))}): rename them so that one name is one column",
                1,
            )
        index[role] = positions[0]
    return index


def from_mapped(
    path: str | Path,
    rows: list[list[str]],
    numbers: np.ndarray,
    index: dict[str, int],
    numeric_ids: bool,
) -> Interactions:
    """The table whose ``user``, ``item`` and optional ``timestamp``/``rating`` roles are the
    columns ``index`` names; ids are integers with ``numeric_ids``, any tokens otherwise; times
    Unix seconds or ISO-8601 (``times``)."""
    columns = transpose(rows)
    # no header hint: these tables have a header of their own (or, in ``read_table`` without
    # one, columns picked by index), so line 1 is not a stray header to point out
    origin = Origin.per_row(path, numbers, header_hint=False)

    def ids(role: str) -> np.ndarray:
        tokens = columns[index[role]]
        if numeric_ids:
            return integers(tokens, f"{role} id", origin)
        return tokens_as_ids(tokens, f"{role} id", origin)

    when = rating = None
    if "timestamp" in index:
        when = times(columns[index["timestamp"]], "timestamp", origin)
    if "rating" in index:
        rating = floats(columns[index["rating"]], "rating", origin)
    return Interactions.from_columns(
        ids("user"), ids("item"), rating=rating, source=str(path), **time_columns(when)
    )
