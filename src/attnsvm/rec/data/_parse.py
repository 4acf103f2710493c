"""The readers' parsing toolkit: bytes → text → rows → typed columns, every failure a
``DataFormatError`` naming the file and the 1-based line.

Owns what every format shares: reading and decoding a file, polars' fast path for clean
delimited files, splitting lines into fields, converting token columns to ids, numbers and times
(``Origin`` says which line, or which row of a Parquet file or DataFrame, a bad token came
from), and mapping a header's columns to roles. ``readers`` keeps one function per file format
on top of it; ``frames`` is the one path every table with a column mapping takes.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl

from attnsvm._files import read_bytes
from attnsvm.errors import UnreadableFile, shown
from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.interactions import Interactions

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
MAX_ID_LENGTH = 1000  # characters of a text id (ASINs have 10, UUIDs 36, URLs a few hundred)
# how many of each unit a second holds: what a number in a time column is read as
TIME_UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}
_UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}
_INTEGER = re.compile(r"[+-]?[0-9]+")
_ASCII_INTEGERS = re.compile(r"[ \t]*[+-]?[0-9]+[ \t]*(?:\n[ \t]*[+-]?[0-9]+[ \t]*)*")


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
    non-finite number, a CR or BOM, no rows) returns None, and the caller reads line by line,
    which names the first bad line: the fast path never decides an error itself."""
    if b"\r" in data or data.startswith(b"\xef\xbb\xbf"):
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


# -- token columns → typed columns ------------------------------------------------------------


@dataclass(frozen=True)
class Origin:
    """Where a column's tokens came from, so that a bad one is reported by file and line.

    ``line_of`` maps a token's index to its 1-based line, or with ``rows`` to its 1-based row
    (a Parquet file or a DataFrame has rows, not lines). ``header_hint``: a bad token on line 1
    suggests a stray header, which only helps in formats that have none.
    """

    path: str | Path
    line_of: Callable[[int], int]
    header_hint: bool = True
    rows: bool = False

    @classmethod
    def per_row(
        cls, path: str | Path, numbers: np.ndarray, header_hint: bool = True, rows: bool = False
    ) -> Origin:
        """One token per data line (or row); ``numbers`` are the lines (as ``split_lines``
        gives) or rows."""
        return cls(path, lambda index: int(numbers[index]), header_hint, rows)

    @classmethod
    def per_span(cls, path: str | Path, numbers: np.ndarray, lengths: Sequence[int]) -> Origin:
        """``lengths[r]`` consecutive tokens from line ``numbers[r]`` (several items a line)."""
        ends = np.cumsum(lengths)
        return cls(path, lambda index: int(numbers[np.searchsorted(ends, index, side="right")]))

    def error(self, message: str, index: int) -> DataFormatError:
        """``message`` about the token at ``index``, placed at its line or row."""
        number = self.line_of(index)
        if self.rows:
            return DataFormatError(self.path, f"row {number}: {message}")
        return DataFormatError(self.path, message, number)

    def bad(self, what: str, token: str, index: int, problem: str) -> DataFormatError:
        hint = ""
        if self.header_hint and not self.rows and self.line_of(index) == 1:
            hint = " (line 1 looks like a header; this format has none)"
        return self.error(f"{what} {shown(token.strip())} {problem}{hint}", index)


def _all_integers(tokens: Sequence[str]) -> bool:
    """Whether every token is an integer in ASCII digits: numpy (like ``int``) would also read
    ``1_000`` as 1000 and Arabic-Indic ``١٢`` as 12, merging ids that differ in the file."""
    return bool(tokens) and _ASCII_INTEGERS.fullmatch("\n".join(tokens)) is not None


def integers(tokens: Sequence[str], what: str, origin: Origin) -> np.ndarray:
    """Tokens as int64; on failure, name the first bad token and its line."""
    if _all_integers(tokens):
        try:
            return np.array(tokens, dtype=np.int64)
        except (OverflowError, ValueError):  # beyond int64, or beyond the digits int() takes
            pass  # find the first bad token: numpy does not say which one it was
    values = []
    for index, token in enumerate(tokens):
        text = token.strip(" \t")
        if _INTEGER.fullmatch(text) is None:
            raise origin.bad(what, token, index, "is not an integer")
        # no int() of a huge token: Python refuses over 4,300 digits, and 19 digits bound int64
        if len(text.lstrip("+-").lstrip("0")) > 19 or not _INT64_MIN <= int(text) <= _INT64_MAX:
            raise origin.bad(what, token, index, "is out of the 64-bit integer range")
        values.append(int(text))
    return np.array(values, dtype=np.int64)


def floats(tokens: Sequence[str], what: str, origin: Origin) -> np.ndarray:
    """Tokens as finite float64; on failure, name the first bad token and its line."""
    try:
        values = np.array(tokens, dtype=np.float64)
    except ValueError:
        parsed = []
        for index, token in enumerate(tokens):
            try:
                parsed.append(float(token))
            except ValueError:
                raise origin.bad(what, token, index, "is not a number") from None
        values = np.array(parsed, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        index = int(bad[0])
        # no header hint: 'inf' or 'nan' parses, so it is a value, not a header word
        raise origin.error(f"{what} {shown(tokens[index].strip())} is not finite", index)
    return values


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def times(
    tokens: Sequence[str], what: str, origin: Origin, unit: str = "s"
) -> tuple[np.ndarray, str]:
    """Event times as float64 Unix seconds, and how they were read.

    A column whose first time is a number holds numbers, counted in ``unit`` since 1970-01-01
    UTC (``TIME_UNITS``); otherwise ISO-8601 date-times (``2024-01-01T01:02:32Z``, ``…+02:00``,
    ``2024-01-01 01:02:32``, ``2024-01-01``), those without a zone read as UTC. A token of the
    other kind, or of neither, is an error naming its line.
    """
    if _is_number(tokens[0]):
        return unix_seconds(floats(tokens, what, origin), unit)
    seconds = []
    for index, token in enumerate(tokens):
        try:
            moment = datetime.fromisoformat(token.strip())
        except ValueError:
            kind = "a number or an ISO-8601 time"
            if index:
                kind = "an ISO-8601 time (the column's first time is one)"
            raise origin.bad(what, token, index, f"is not {kind}") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        seconds.append(moment.timestamp())
    return np.array(seconds, dtype=np.float64), "ISO-8601 (UTC where no zone is given)"


def unix_seconds(numbers: np.ndarray, unit: str) -> tuple[np.ndarray, str]:
    """Numbers counted in ``unit`` since 1970-01-01 UTC, as seconds; and how they were read."""
    return numbers / TIME_UNITS[unit], f"Unix {_UNIT_WORDS[unit]}"


def tokens_as_ids(tokens: Sequence[str], what: str, origin: Origin) -> np.ndarray:
    """Free-form id tokens (RecBole ``:token``, generic tables): int64 when all are integers.

    Text ids are stored at the width of the longest, so one huge token would make every id that
    large: ids beyond ``MAX_ID_LENGTH`` characters are refused."""
    longest = max(range(len(tokens)), key=lambda index: len(tokens[index]), default=None)
    if longest is not None and len(tokens[longest]) > MAX_ID_LENGTH:
        raise origin.bad(what, tokens[longest], longest, f"is over {MAX_ID_LENGTH:,} characters")
    if _all_integers(tokens):
        try:
            return np.array(tokens, dtype=np.int64)
        except (OverflowError, ValueError):  # beyond int64, or beyond the digits int() takes
            pass  # kept as the text they are
    return np.array([t.strip() for t in tokens], dtype=str)


# -- header-driven tables -------------------------------------------------------------------


def header_index(path: str | Path, header: list[str], wanted: dict[str, str | None]) -> dict:
    """Column index of each wanted role (role → header name); a clear error if one is missing."""
    index = {}
    for role, name in wanted.items():
        if name is None:
            continue
        if name not in header:
            raise DataFormatError(
                path, f"has no {role} column {name!r} (header: {shown(', '.join(header))})", 1
            )
        index[role] = header.index(name)
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

    timestamp = rating = None
    if "timestamp" in index:
        timestamp = times(columns[index["timestamp"]], "timestamp", origin)[0]
    if "rating" in index:
        rating = floats(columns[index["rating"]], "rating", origin)
    return Interactions.from_columns(
        ids("user"), ids("item"), timestamp=timestamp, rating=rating, source=str(path)
    )
