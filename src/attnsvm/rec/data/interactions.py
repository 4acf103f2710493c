"""``Interactions``: the columnar event table every dataset becomes, with its id maps.

Rows are events, always ordered by internal user, then timestamp, then file order (a *stable*
sort: events at the same second keep the order the file gave them, so the held-out item of a
user never depends on the sorting algorithm). Internal user ids are ``0..num_users-1``; internal
item ids are ``1..num_items`` with 0 reserved for padding. Both id maps list the external ids in
ascending order, so the internal ids do not depend on row order either.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnsvm._atomic import atomic_path
from attnsvm._files import open_regular
from attnsvm.errors import UnreadableFile, cut
from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.sequences import Sequences

DEDUP_POLICIES = ("keep", "consecutive", "all")


def _stable_order(user: np.ndarray, timestamp: np.ndarray | None) -> np.ndarray:
    """Row order by (user, timestamp), ties in input order (two stable passes: time, then user)."""
    if timestamp is None:
        return np.argsort(user, kind="stable")
    by_time = np.argsort(timestamp, kind="stable")
    return by_time[np.argsort(user[by_time], kind="stable")]


def _factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)``; dense non-negative integer ids (the usual
    case) are mapped with a presence table in O(n) instead of a sort."""
    dense = values.dtype.kind == "i" and values.size > 0
    if dense and values.min() >= 0 and values.max() < 4 * values.size + 1024:
        present = np.zeros(int(values.max()) + 1, dtype=bool)
        present[values] = True
        code = np.cumsum(present) - 1
        return np.flatnonzero(present).astype(values.dtype), code[values]
    return np.unique(values, return_inverse=True)


def _external_ids(values: np.ndarray) -> np.ndarray:
    """External ids as int64 where they are integers, else as fixed-width unicode."""
    values = np.asarray(values)
    if values.dtype.kind in "iu":
        return values.astype(np.int64)
    return values.astype(str)


@dataclass(frozen=True)
class Stats:
    """Summary statistics of an interaction table (what ``attnsvm data stats`` prints)."""

    name: str
    users: int
    items: int
    interactions: int
    density: float
    length_mean: float
    length_min: int
    length_median: float
    length_p90: float
    length_max: int
    timestamps: bool
    ratings: bool

    def rows(self) -> list[tuple[str, str]]:
        return [
            ("users", f"{self.users:,}"),
            ("items", f"{self.items:,}"),
            ("interactions", f"{self.interactions:,}"),
            ("density", f"{self.density:.5f}"),
            ("length mean", f"{self.length_mean:.2f}"),
            (
                "length min / median / p90 / max",
                f"{self.length_min} / {self.length_median:g}"
                f" / {self.length_p90:g} / {self.length_max}",
            ),
            ("timestamps", "yes" if self.timestamps else "no (file order)"),
            ("ratings", "yes" if self.ratings else "no"),
        ]


@dataclass(frozen=True)
class Interactions:
    """Events sorted by (user, time, file order); see the module docstring for the id scheme."""

    user: np.ndarray  # int64 (n,), internal user id 0..num_users-1, non-decreasing
    item: np.ndarray  # int64 (n,), internal item id 1..num_items
    user_ids: np.ndarray  # (num_users,), external id of each internal user, ascending
    item_ids: np.ndarray  # (num_items + 1,), external id of each internal item; [0] = placeholder
    timestamp: np.ndarray | None = None  # float64 (n,), non-decreasing within a user
    rating: np.ndarray | None = None  # float64 (n,)
    source: str = "<memory>"  # the file this came from, named in error messages

    def __post_init__(self) -> None:
        user = np.ascontiguousarray(self.user, dtype=np.int64)
        item = np.ascontiguousarray(self.item, dtype=np.int64)
        object.__setattr__(self, "user", user)
        object.__setattr__(self, "item", item)
        for name in ("timestamp", "rating"):
            column = getattr(self, name)
            if column is not None:
                column = np.ascontiguousarray(column, dtype=np.float64)
                if column.shape != user.shape:
                    raise ValueError(f"{name} has shape {column.shape}, expected {user.shape}")
                object.__setattr__(self, name, column)
        if item.shape != user.shape:
            raise ValueError(f"item has shape {item.shape}, expected {user.shape}")
        if user.size and (user.min() < 0 or user.max() >= len(self.user_ids)):
            raise ValueError("user ids must lie in 0..len(user_ids)-1")
        if item.size and (item.min() < 1 or item.max() >= len(self.item_ids)):
            raise ValueError("item ids must lie in 1..len(item_ids)-1 (0 is padding)")
        if np.any(np.diff(user) < 0):
            raise ValueError("rows must be sorted by user")
        if self.timestamp is not None:
            same_user = user[1:] == user[:-1]
            if np.any(same_user & (np.diff(self.timestamp) < 0)):
                raise ValueError("rows must be sorted by timestamp within each user")

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def from_columns(
        cls,
        user: np.ndarray,
        item: np.ndarray,
        timestamp: np.ndarray | None = None,
        rating: np.ndarray | None = None,
        source: str = "<memory>",
        *,
        time_order: np.ndarray | None = None,
    ) -> Interactions:
        """Build from external-id columns in file order: map ids, then sort stably, by
        ``time_order`` where given (the exact times, e.g. the int64 a file held, which float64
        seconds round together beyond 2**53), else by ``timestamp``."""
        user_ids, user_index = _factorize(_external_ids(user))
        item_ext, item_index = _factorize(_external_ids(item))
        placeholder = np.zeros(1, dtype=item_ext.dtype)
        item_ids = np.concatenate([placeholder, item_ext])
        ts = None if timestamp is None else np.asarray(timestamp, dtype=np.float64)
        if time_order is not None and (ts is None or np.shape(time_order) != ts.shape):
            raise ValueError("time_order needs timestamps of the same shape")
        order = _stable_order(user_index, ts if time_order is None else np.asarray(time_order))
        return cls(
            user=user_index[order],
            item=item_index[order] + 1,
            user_ids=user_ids,
            item_ids=item_ids,
            timestamp=None if ts is None else ts[order],
            rating=None if rating is None else np.asarray(rating, dtype=np.float64)[order],
            source=source,
        )

    def _keep(self, mask: np.ndarray, what: str) -> Interactions:
        """The rows where ``mask`` holds, with both id maps compacted (relative order kept)."""
        if not mask.any():
            raise DataFormatError(self.source, f"{what} removes every interaction")
        user, item = self.user[mask], self.item[mask]
        kept_users, new_user = np.unique(user, return_inverse=True)
        kept_items, new_item = np.unique(item, return_inverse=True)
        return Interactions(
            user=new_user,
            item=new_item + 1,
            user_ids=self.user_ids[kept_users],
            item_ids=np.concatenate([self.item_ids[:1], self.item_ids[kept_items]]),
            timestamp=None if self.timestamp is None else self.timestamp[mask],
            rating=None if self.rating is None else self.rating[mask],
            source=self.source,
        )

    # -- sizes --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.user.size

    @property
    def num_users(self) -> int:
        return len(self.user_ids)

    @property
    def num_items(self) -> int:
        return len(self.item_ids) - 1

    @property
    def offsets(self) -> np.ndarray:
        """CSR offsets of each user's rows (rows are grouped by user)."""
        counts = np.bincount(self.user, minlength=self.num_users)
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    # -- filters ------------------------------------------------------------------------------

    def filter_min_rating(self, threshold: float) -> Interactions:
        """Keep events rated at least ``threshold`` (explicit → implicit feedback)."""
        if self.rating is None:
            raise DataFormatError(self.source, "has no ratings, so it cannot be filtered by rating")
        return self._keep(self.rating >= threshold, f"min rating {threshold}")

    def k_core(self, user_min: int, item_min: int, *, iterative: bool = True) -> Interactions:
        """Drop users with < ``user_min`` and items with < ``item_min`` events.

        ``iterative=True`` repeats until nothing changes: the result is the largest subset in
        which every user and item meets its threshold (that subset is unique, and peeling can
        only remove rows outside it). ``iterative=False`` is the single pass SASRec uses.
        """
        keep = np.ones(len(self), dtype=bool)
        while True:
            user_count = np.bincount(self.user[keep], minlength=self.num_users)
            item_count = np.bincount(self.item[keep], minlength=self.num_items + 1)
            drop = keep & ((user_count[self.user] < user_min) | (item_count[self.item] < item_min))
            keep &= ~drop
            if not iterative or not drop.any() or not keep.any():
                break
        kind = "iterative" if iterative else "one-pass"
        return self._keep(keep, f"the {kind} ({user_min}, {item_min})-core")

    def filter_min_length(self, min_length: int) -> Interactions:
        """Keep users with at least ``min_length`` events (one pass; items are not recounted)."""
        counts = np.bincount(self.user, minlength=self.num_users)
        return self._keep(counts[self.user] >= min_length, f"min sequence length {min_length}")

    def dedup(self, policy: str) -> Interactions:
        """Repeated (user, item) events: ``keep`` them, drop ``consecutive`` repeats, or keep only
        the first of ``all`` repeats."""
        if policy == "keep":
            return self
        if policy == "consecutive":
            repeat = (self.user[1:] == self.user[:-1]) & (self.item[1:] == self.item[:-1])
            return self._keep(np.concatenate([[True], ~repeat]), "dedup")
        if policy == "all":
            key = self.user * (self.num_items + 1) + self.item
            first = np.zeros(len(self), dtype=bool)
            first[np.unique(key, return_index=True)[1]] = True
            return self._keep(first, "dedup")
        raise ValueError(f"dedup policy must be one of {DEDUP_POLICIES}, not {policy!r}")

    # -- views --------------------------------------------------------------------------------

    def to_sequences(self) -> Sequences:
        """One CSR row per internal user, in chronological order (with timestamps if known)."""
        users = np.arange(self.num_users, dtype=np.int64)
        return Sequences(self.offsets, self.item, users, self.timestamp, self.rating)

    def stats(self, name: str | None = None) -> Stats:
        lengths = np.diff(self.offsets)
        users, items = self.num_users, int(np.unique(self.item).size)
        return Stats(
            name=name or self.source,
            users=users,
            items=items,
            interactions=len(self),
            density=len(self) / (users * items) if users and items else 0.0,
            length_mean=float(lengths.mean()) if users else 0.0,
            length_min=int(lengths.min()) if users else 0,
            length_median=float(np.median(lengths)) if users else 0.0,
            length_p90=float(np.quantile(lengths, 0.9)) if users else 0.0,
            length_max=int(lengths.max()) if users else 0,
            timestamps=self.timestamp is not None,
            ratings=self.rating is not None,
        )

    # -- cache files --------------------------------------------------------------------------

    def save(self, path: str | Path, meta: dict | None = None) -> Path:
        """Write an ``.npz`` (no pickles) atomically: a temporary file renamed into place."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {
            "user": self.user,
            "item": self.item,
            "user_ids": self.user_ids,
            "item_ids": self.item_ids,
        }
        if self.timestamp is not None:
            arrays["timestamp"] = self.timestamp
        if self.rating is not None:
            arrays["rating"] = self.rating
        arrays["meta"] = np.array(json.dumps({"source": self.source, **(meta or {})}))
        with atomic_path(path) as temporary:
            np.savez(temporary, **arrays)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Interactions:
        try:
            with open_regular(path) as file, np.load(file, allow_pickle=False) as npz:
                meta = json.loads(str(npz["meta"]))
                return cls(
                    user=npz["user"],
                    item=npz["item"],
                    user_ids=npz["user_ids"],
                    item_ids=npz["item_ids"],
                    timestamp=npz.get("timestamp"),
                    rating=npz.get("rating"),
                    source=meta.get("source", str(path)),
                )
        except UnreadableFile as error:
            raise DataFormatError(path, error.problem) from None
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
            raise DataFormatError(
                path, f"not a readable attnsvm cache file ({cut(str(error))})"
            ) from None
