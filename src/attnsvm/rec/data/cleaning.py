"""Cleaning a table of one's own as it is prepared, and what each step removed.

The steps, in order: ``drop_where`` (rows a ``RowFilter`` matches, e.g. ``quantity<=0``),
``drop_duplicates="exact"`` (rows identical in every column to an earlier row), then on the
typed table ``drop_duplicates="consecutive"`` (the same user and item again, next in time) and
``min_per_user`` / ``min_per_item`` (the k-core, repeated until every user and item left meets
its minimum, as RecBole's filter). Rows missing a mapped value go before any step
(``frames.interactions_of``, which runs the row steps). ``attnsvm data prepare`` takes each as a
flag; ``attnsvm data stats`` shows what each removed.

A row filter is parsed, never evaluated: ``COLUMN OP VALUE`` with OP one of ``<= >= == != < >``;
a VALUE that reads as a number compares numerically (the column must hold numbers), any other
(or one in quotes) compares as text with ``==`` or ``!=``. A row whose COLUMN is empty matches
no filter.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from attnsvm.errors import InvalidRequest, shown
from attnsvm.rec.data._parse import blank
from attnsvm.rec.data._tokens import Origin, floats
from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.interactions import Interactions

DUPLICATES = ("exact", "consecutive")
_OPERATORS: dict[str, Callable] = {
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    ">": operator.gt,
}
# the column, then the first operator (two-character ones tried first), then the value
_FILTER = re.compile(r"\s*([^<>=!]+?)\s*(<=|>=|==|!=|<|>)\s*(.*?)\s*")


@dataclass(frozen=True)
class RowFilter:
    """``COLUMN OP VALUE``: the rows it matches are dropped. ``column`` is a header name, or a
    0-based index where it is all digits (as in a column mapping)."""

    column: str | int
    operator: str
    value: float | str

    @classmethod
    def parse(cls, text: str) -> RowFilter:
        """From what a user writes (``"quantity<=0"``, ``"status == 'cancelled'"``); every
        mistake an ``InvalidRequest`` saying what is expected."""
        match = _FILTER.fullmatch(text)
        if match is None or not match.group(3):
            raise InvalidRequest(
                f"row filter {shown(text)} is not COLUMN OP VALUE with OP one of "
                "<=, >=, ==, !=, <, > (e.g. 'quantity<=0')"
            )
        column, op, written = match.groups()
        quoted = len(written) >= 2 and written[0] == written[-1] and written[0] in "'\""
        value: float | str = written[1:-1]
        if not quoted:
            try:
                value = float(written)
            except ValueError:
                value = written  # text
        if isinstance(value, float) and not np.isfinite(value):
            raise InvalidRequest(f"row filter {shown(text)} compares with a non-finite number")
        if isinstance(value, str) and op not in ("==", "!="):
            raise InvalidRequest(
                f"row filter {shown(text)} compares text: only == and != do "
                "(a number is compared as one)"
            )
        return cls(int(column) if column.isdigit() else column, op, value)

    def __str__(self) -> str:
        value = repr(self.value) if isinstance(self.value, str) else f"{self.value:g}"
        return f"{self.column}{self.operator}{value}"

    def matches(self, series: pl.Series, origin: Origin) -> np.ndarray:
        """Which rows of ``series`` (the filter's column) match; ``origin`` places a value that
        cannot be compared (text where a number is needed) in its file and line or row."""
        compare = _OPERATORS[self.operator]
        what = f"row filter {str(self)!r}: {self.column}"
        present = ~blank(series)
        hit = np.zeros(len(series), dtype=bool)
        if not present.any():
            return hit
        rows = np.flatnonzero(present)
        values = series.filter(pl.Series(present))
        at = Origin(
            origin.path,
            lambda index: origin.line_of(int(rows[index])),
            header_hint=False,
            rows=origin.rows,
        )
        if isinstance(self.value, str):
            try:
                text = values.cast(pl.String).to_list()
            except pl.exceptions.PolarsError:
                raise DataFormatError(
                    origin.path, f"{what}: column holds {values.dtype} values, not text"
                ) from None
            hit[rows] = compare(np.array([t.strip() for t in text], dtype=str), self.value)
            return hit
        if values.dtype == pl.String:
            numbers = floats(values.to_list(), what, at)
        elif values.dtype.is_numeric():
            numbers = values.cast(pl.Float64).to_numpy()
            bad = np.flatnonzero(~np.isfinite(numbers))
            if bad.size:
                raise at.error(
                    f"{what} {shown(str(float(numbers[bad[0]])))} is not finite", int(bad[0])
                )
        else:
            raise DataFormatError(
                origin.path, f"{what}: column holds {values.dtype} values, not numbers"
            )
        hit[rows] = compare(numbers, self.value)
        return hit


@dataclass(frozen=True)
class Cleaning:
    """The cleaning of a table as it is prepared (none by default); see the module docstring.

    ``drop_where``: row filters (one string, or several: a row any of them matches is dropped);
    ``drop_duplicates``: ``"exact"`` or ``"consecutive"``; ``min_per_user`` / ``min_per_item``:
    the k-core's minimum interactions (0 or 1: no minimum).
    """

    drop_where: tuple[str, ...] | str = ()
    drop_duplicates: str | None = None
    min_per_user: int = 0
    min_per_item: int = 0
    filters: tuple[RowFilter, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        written = (self.drop_where,) if isinstance(self.drop_where, str) else self.drop_where
        object.__setattr__(self, "drop_where", tuple(written))
        object.__setattr__(self, "filters", tuple(RowFilter.parse(t) for t in written))
        if self.drop_duplicates not in (None, *DUPLICATES):
            raise InvalidRequest(
                f"drop_duplicates {shown(self.drop_duplicates)} is not one of "
                f"{', '.join(DUPLICATES)}"
            )
        for name in ("min_per_user", "min_per_item"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                flag = "--" + name.replace("_", "-")
                raise InvalidRequest(
                    f"{name} ({flag}) must be a whole number ≥ 0, not {shown(value)}"
                )

    def apply(self, table: Interactions) -> tuple[Interactions, dict[str, int]]:
        """The steps on the typed table (consecutive repeats, the k-core), and how many
        interactions each removed."""
        removed = {}
        if self.drop_duplicates == "consecutive":
            cleaned = table.dedup("consecutive")
            removed["consecutive repeats"] = len(table) - len(cleaned)
            table = cleaned
        if self.min_per_user > 1 or self.min_per_item > 1:
            users, items = max(self.min_per_user, 1), max(self.min_per_item, 1)
            cleaned = table.k_core(users, items, iterative=True)
            minimum = [f"{users} per user"] * (users > 1) + [f"{items} per item"] * (items > 1)
            removed[f"below the k-core (min {', '.join(minimum)})"] = len(table) - len(cleaned)
            table = cleaned
        return table, removed
