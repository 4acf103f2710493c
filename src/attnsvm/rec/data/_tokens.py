"""Token columns → typed columns: the one parsing rule for ids, numbers and times, every bad
token a ``DataFormatError`` naming the file, the line (or row) and the value.

Every format reaches these functions: the text readers with their fields, ``frames`` with the
text columns of CSV/TSV files, Parquet files and DataFrames (a Parquet column of integers is
typed by ``frames`` itself, as the integers it already is). The rule:

- an **integer id** is ASCII digits, optionally after ``-``. ``+10``, ``1_0`` and other
  scripts' digits (``١٠``, ``１０``) are not integers, although Python's ``int()`` reads each as
  10: where ids are numbers (``integers``: MovieLens, per-user, pairs, session files) such a
  token is refused and leading zeros are allowed (``007`` is 7); where ids are free-form
  (``tokens_as_ids``: RecBole, tables, DataFrames) a column is integers only when every id is
  written as its integer is (``7``, ``-7``, ``0``): ``+10``, ``1_0`` or a leading zero (``007``,
  ``-0``) makes the whole column text, so ``007`` and ``7`` stay two ids, nothing is merged, and
  every id is given back as it was written;
- a **number** (a time, a rating) is ASCII: an optional sign, digits, an optional point and
  exponent; ``inf`` and ``nan`` parse and are refused as not finite; ``_`` and other scripts'
  digits are refused;
- a time column of **integers** is read as int64 (``unix_times``), and rows are ordered by those
  integers (``Times.order``), never by float64 seconds, which round integers beyond 2**53
  together.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from attnsvm.errors import shown
from attnsvm.rec.data.errors import DataFormatError

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
MAX_ID_LENGTH = 1000  # characters of a text id (ASINs have 10, UUIDs 36, URLs a few hundred)
# how many of each unit a second holds: what a number in a time column is read as
TIME_UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}
_UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}
# Unix seconds past the year 5000: milliseconds read as seconds, most likely
_LATEST_PLAUSIBLE = 1e11
_ID = r"-?[0-9]+"
_WHOLE = r"[+-]?[0-9]+"  # a number that is an integer: a time may carry a sign
# no ambiguous repetition (each digit run is followed by '.', 'e' or the end): linear on a
# 10-million-digit token that fails at its last character
_NUMBER = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?i:inf|infinity|nan)"
# what Python's int() or float() would read but this rule does not (with a digit in it): a token
# it refuses is then told what is accepted, not only that it is wrong
_PYTHON_NUMBER = re.compile(r"[+-]?[\d_.]+(?:[eE][+-]?[\d_]+)?")


def _column(token: str) -> re.Pattern:
    """Every token of a column (joined by newlines) is ``token``, spaces or tabs around it."""
    return re.compile(rf"[ \t]*(?:{token})[ \t]*(?:\n[ \t]*(?:{token})[ \t]*)*")


_IDS, _WHOLES, _NUMBERS = _column(_ID), _column(_WHOLE), _column(_NUMBER)
# an integer written as ``str(int)`` writes it: no leading zero, no ``-0``
_CANONICAL_IDS = _column(r"0|-?[1-9][0-9]*")
_ONE_ID, _ONE_NUMBER = re.compile(_ID), re.compile(_NUMBER)


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


def _all(pattern: re.Pattern, tokens: Sequence[str]) -> bool:
    return bool(tokens) and pattern.fullmatch("\n".join(tokens)) is not None


def _refused_as(kind: str, text: str, allowed: str) -> str:
    """Why ``text`` is not a ``kind``; where Python would read it as one (``+10``, ``1_0``,
    ``١٠``), what is allowed instead."""
    if _PYTHON_NUMBER.fullmatch(text) is None or not any(c.isdigit() for c in text):
        return f"is not {kind}"
    return f"is not {kind}: {allowed}, no '_' and no other scripts' digits"


def integers(tokens: Sequence[str], what: str, origin: Origin) -> np.ndarray:
    """Integer ids as int64; on failure, name the first bad token and its line."""
    if _all(_IDS, tokens):
        try:
            return np.array(tokens, dtype=np.int64)
        except (OverflowError, ValueError):  # beyond int64, or beyond the digits int() takes
            pass  # find the first bad token: numpy does not say which one it was
    values = []
    for index, token in enumerate(tokens):
        text = token.strip(" \t")
        if _ONE_ID.fullmatch(text) is None:
            problem = _refused_as("an integer", text, "ids are ASCII digits, optionally after '-'")
            raise origin.bad(what, token, index, problem)
        # no int() of a huge token: Python refuses over 4,300 digits, and 19 digits bound int64
        if len(text.lstrip("-").lstrip("0")) > 19 or not _INT64_MIN <= int(text) <= _INT64_MAX:
            raise origin.bad(what, token, index, "is out of the 64-bit integer range")
        values.append(int(text))
    return np.array(values, dtype=np.int64)


def floats(tokens: Sequence[str], what: str, origin: Origin) -> np.ndarray:
    """Numbers as finite float64; on failure, name the first bad token and its line."""
    if not _all(_NUMBERS, tokens):
        for index, token in enumerate(tokens):
            text = token.strip(" \t")
            if _ONE_NUMBER.fullmatch(text) is None:
                problem = _refused_as("a number", text, "numbers are written in ASCII digits")
                raise origin.bad(what, token, index, problem)
    try:
        values = np.array(tokens, dtype=np.float64)
    except ValueError:  # a spelling numpy's parser lacks ('+.5e3'); float() reads every one
        values = np.array([float(token) for token in tokens], dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        index = int(bad[0])
        # no header hint: 'inf' or 'nan' parses, so it is a value, not a header word
        raise origin.error(f"{what} {shown(tokens[index].strip())} is not finite", index)
    return values


@dataclass(frozen=True)
class Times:
    """A time column read: Unix ``seconds`` (float64) and how they were read; ``exact``, where
    the column held integers, those integers (int64, in the column's unit)."""

    seconds: np.ndarray
    read_as: str
    exact: np.ndarray | None = None

    @property
    def order(self) -> np.ndarray:
        """What the rows are ordered by: the exact integers where there are some (float64
        seconds would tie 2**53 + 1 with 2**53, or nanoseconds 256 apart)."""
        return self.seconds if self.exact is None else self.exact

    def report(self) -> dict:
        """How the times were read and the first and last, as a person checks them."""
        first, last = self.seconds.min(), self.seconds.max()
        report = {"read as": self.read_as, "first": _moment(first), "last": _moment(last)}
        if self.read_as == "Unix seconds" and last > _LATEST_PLAUSIBLE:
            report["hint"] = (
                "times past the year 5000 as Unix seconds: map the column as time_ms=… "
                "(or time_us, time_ns) if it holds milliseconds"
            )
        return report


def _moment(seconds: float) -> str:
    try:
        return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, ValueError, OSError):  # beyond the years datetime holds
        return f"{seconds:g} s"


def unix_times(tokens: Sequence[str], what: str, origin: Origin, unit: str = "s") -> Times:
    """Numbers counted in ``unit`` since 1970-01-01 UTC (``TIME_UNITS``): integers as int64,
    exactly, and any other number as a finite float."""
    if _all(_WHOLES, tokens):
        try:
            return unix_seconds(np.array(tokens, dtype=np.int64), unit)
        except (OverflowError, ValueError):  # beyond int64: read as the numbers they are
            pass
    return unix_seconds(floats(tokens, what, origin), unit)


def times(tokens: Sequence[str], what: str, origin: Origin, unit: str = "s") -> Times:
    """Event times: a column whose first time is a number holds numbers (``unix_times``);
    otherwise ISO-8601 date-times in ASCII (``2024-01-01T01:02:32Z``, ``…+02:00``,
    ``2024-01-01 01:02:32``, ``2024-01-01``), those without a zone read as UTC. A token of the
    other kind, or of neither, is an error naming its line."""
    if _ONE_NUMBER.fullmatch(tokens[0].strip(" \t")) is not None:
        return unix_times(tokens, what, origin, unit)
    seconds = []
    for index, token in enumerate(tokens):
        try:
            if not token.isascii():  # fromisoformat may take other scripts' digits
                raise ValueError
            moment = datetime.fromisoformat(token.strip())
        except ValueError:
            kind = "a number or an ISO-8601 time"
            if index:
                kind = "an ISO-8601 time (the column's first time is one)"
            raise origin.bad(what, token, index, f"is not {kind}") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        seconds.append(moment.timestamp())
    return Times(np.array(seconds, dtype=np.float64), "ISO-8601 (UTC where no zone is given)")


def unix_seconds(numbers: np.ndarray, unit: str) -> Times:
    """Numbers counted in ``unit`` since 1970-01-01 UTC as seconds, kept exact where they are
    int64."""
    exact = numbers if numbers.dtype == np.int64 else None
    seconds = numbers.astype(np.float64) / TIME_UNITS[unit]
    return Times(seconds, f"Unix {_UNIT_WORDS[unit]}", exact)


def tokens_as_ids(tokens: Sequence[str], what: str, origin: Origin) -> np.ndarray:
    """Free-form id tokens (RecBole ``:token``, generic tables): int64 when every one is an
    integer written as ``str(int)`` writes it, the text of each otherwise (stripped): ``007``
    read as 7 would merge with ``7`` and come back as ``7``.

    Text ids are stored at the width of the longest, so one huge token would make every id that
    large: ids beyond ``MAX_ID_LENGTH`` characters are refused."""
    longest = max(range(len(tokens)), key=lambda index: len(tokens[index]), default=None)
    if longest is not None and len(tokens[longest]) > MAX_ID_LENGTH:
        raise origin.bad(what, tokens[longest], longest, f"is over {MAX_ID_LENGTH:,} characters")
    if _all(_CANONICAL_IDS, tokens):
        try:
            return np.array(tokens, dtype=np.int64)
        except (OverflowError, ValueError):  # beyond int64, or beyond the digits int() takes
            pass  # kept as the text they are
    return np.array([t.strip() for t in tokens], dtype=str)


def time_columns(read: Times | None) -> dict:
    """``Interactions.from_columns``' time arguments for a time column read (none without one):
    the seconds, and the exact order the rows take."""
    if read is None:
        return {}
    return {"timestamp": read.seconds, "time_order": read.order}
