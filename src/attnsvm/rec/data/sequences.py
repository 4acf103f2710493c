"""Jagged per-user item sequences in CSR form: the currency between the data, model and eval stages.

``Sequences`` holds one row per user: ``items[offsets[r]:offsets[r + 1]]`` are the internal item
ids of row ``r`` in chronological order (ids start at 1; 0 is padding and never stored). Storing
one flat array plus offsets keeps hot paths free of per-user Python lists.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Sequences:
    """Rows of internal item ids; ``users[r]`` is the internal user id of row ``r``.

    ``times`` and ``ratings`` (optional) hold each event's timestamp and rating, aligned with
    ``items``; they travel through every selection and split so that a model or a loss sees the
    times and ratings of its windows (STRec reads times; a reward-weighted loss reads ratings).
    """

    offsets: np.ndarray  # int64, shape (rows + 1,), offsets[0] == 0, non-decreasing
    items: np.ndarray  # int64, shape (offsets[-1],), every entry >= 1
    users: np.ndarray  # int64, shape (rows,)
    times: np.ndarray | None = None  # float64, shape (offsets[-1],), or None
    ratings: np.ndarray | None = None  # float64, shape (offsets[-1],), or None

    def __post_init__(self) -> None:
        offsets = np.ascontiguousarray(self.offsets, dtype=np.int64)
        items = np.ascontiguousarray(self.items, dtype=np.int64)
        users = np.ascontiguousarray(self.users, dtype=np.int64)
        if offsets.ndim != 1 or offsets.size == 0 or offsets[0] != 0:
            raise ValueError("offsets must be a 1-D array starting at 0")
        if np.any(np.diff(offsets) < 0):
            raise ValueError("offsets must be non-decreasing")
        if offsets[-1] != items.size:
            raise ValueError(f"offsets end at {offsets[-1]} but there are {items.size} items")
        if users.shape != (offsets.size - 1,):
            raise ValueError(f"users has shape {users.shape}, expected ({offsets.size - 1},)")
        if items.size and items.min() < 1:
            raise ValueError("item ids must be >= 1 (0 is the padding id)")
        for name in ("times", "ratings"):
            if getattr(self, name) is not None:
                values = np.ascontiguousarray(getattr(self, name), dtype=np.float64)
                if values.shape != items.shape:
                    raise ValueError(f"{name} has shape {values.shape}, expected {items.shape}")
                object.__setattr__(self, name, values)
        object.__setattr__(self, "offsets", offsets)
        object.__setattr__(self, "items", items)
        object.__setattr__(self, "users", users)

    @classmethod
    def from_lists(cls, rows: list[list[int]], users: list[int] | None = None) -> Sequences:
        """Build from Python lists (tests and small examples; not for hot paths)."""
        lengths = np.array([len(r) for r in rows], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        items = np.array([i for r in rows for i in r], dtype=np.int64)
        user_ids = np.arange(len(rows)) if users is None else np.asarray(users)
        return cls(offsets, items, user_ids)

    def __len__(self) -> int:
        return self.offsets.size - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def row(self, r: int) -> np.ndarray:
        return self.items[self.offsets[r] : self.offsets[r + 1]]

    def to_lists(self) -> list[list[int]]:
        return [self.row(r).tolist() for r in range(len(self))]

    def select(self, rows: np.ndarray) -> Sequences:
        """The sub-collection of the given row indices, in that order (vectorised gather)."""
        rows = np.asarray(rows, dtype=np.int64)
        lengths = self.lengths[rows]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        starts = self.offsets[rows]
        gather = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
        return self.gather(offsets, gather, self.users[rows])

    def gather(self, offsets: np.ndarray, flat: np.ndarray, users: np.ndarray) -> Sequences:
        """New rows ``offsets`` over the events ``flat`` (indices into this collection's flat
        arrays), with their times and ratings."""
        times = None if self.times is None else self.times[flat]
        ratings = None if self.ratings is None else self.ratings[flat]
        return Sequences(offsets, self.items[flat], users, times, ratings)

    def padded(self, max_len: int, rows: np.ndarray | None = None) -> np.ndarray:
        """Left-padded ``(rows, max_len)`` int64 matrix of the last ``max_len`` items per row."""
        return self._padded(self.items, max_len, rows)

    def padded_times(self, max_len: int, rows: np.ndarray | None = None) -> np.ndarray:
        """The timestamps aligned with :meth:`padded` (0 at padding); a ValueError without times."""
        if self.times is None:
            raise ValueError("these sequences carry no timestamps (the data had none)")
        return self._padded(self.times, max_len, rows)

    def padded_ratings(self, max_len: int, rows: np.ndarray | None = None) -> np.ndarray:
        """The ratings aligned with :meth:`padded` (0 at padding); a ValueError without them."""
        if self.ratings is None:
            raise ValueError("these sequences carry no ratings (the data had none)")
        return self._padded(self.ratings, max_len, rows)

    def _padded(self, values: np.ndarray, max_len: int, rows: np.ndarray | None) -> np.ndarray:
        rows = np.arange(len(self)) if rows is None else np.asarray(rows, dtype=np.int64)
        out = np.zeros((rows.size, max_len), dtype=values.dtype)
        ends = self.offsets[rows + 1]
        lengths = np.minimum(ends - self.offsets[rows], max_len)
        row_idx = np.repeat(np.arange(rows.size), lengths)
        # position within the kept tail, counted from the end of the row
        from_end = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        from_end = np.repeat(lengths, lengths) - 1 - from_end
        out[row_idx, max_len - 1 - from_end] = values[np.repeat(ends, lengths) - 1 - from_end]
        return out


@dataclass(frozen=True)
class EvalTask:
    """One evaluation stage (validation or test) as produced by a split.

    Row ``r`` describes user ``users[r]``: the model reads ``history.row(r)`` (everything the
    user did before the held-out events), the relevant items are ``targets.row(r)`` (exactly one
    under leave-one-out), and ``exclude.row(r)`` are the items removed from the ranking (by
    default the items already seen in ``history``). The split computes ``exclude`` once; the
    evaluation layer never recomputes it.
    """

    users: np.ndarray
    history: Sequences
    targets: Sequences
    exclude: Sequences

    def __post_init__(self) -> None:
        rows = len(self.users)
        for name in ("history", "targets", "exclude"):
            if len(getattr(self, name)) != rows:
                raise ValueError(f"EvalTask.{name} has {len(getattr(self, name))} rows, not {rows}")

    def __len__(self) -> int:
        return len(self.users)
