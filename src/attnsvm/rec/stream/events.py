"""The global event log as one time-ordered stream: what the prequential runner reads.

Every event of a dataset (every user's, interleaved) is put in the order of its time. The sort is
stable over the ``Interactions`` rows, which are ordered by (user, time, file order): events at
the same time keep their file order within a user, and across users at one time they go by
internal user id (external ids ascending). An event is ``x_t`` = (its user, that user's previous
items in the stream, newest last) and ``y_t`` = its item; ``histories`` builds the ``x_t`` of a
chunk by following each event's link to its user's previous event.

Streams by name: a registered dataset (``ml-100k``, ``ml-latest-small``, ``yoochoose``), a file,
or a stream of several files (``STREAMS``): ``yoochoose-100k`` is session-rec's 100k-click sample,
its ``train_full`` file followed by its ``test`` file (the following day; their session ids are
disjoint), 83,846 clicks.

Bad input is a ``DataFormatError`` naming the source: an empty log, a dataset without event
times, a time that is missing (NaN) or not finite.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnsvm.rec.data.datasets import load_dataset
from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.interactions import Interactions

#: a stream of several files: the registered dataset, then further files under ``root``
STREAMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "yoochoose-100k": ("yoochoose", ("yoochoose-100k/yoochoose-clicks-100k_test.txt",)),
}


@dataclass(frozen=True)
class EventStream:
    """Events in global time order (index = position in the stream)."""

    user: np.ndarray  # int64 (n,), internal user id
    item: np.ndarray  # int64 (n,), internal item id 1..num_items: the label y_t
    time: np.ndarray  # float64 (n,), non-decreasing
    previous: np.ndarray  # int64 (n,), the same user's previous event, −1 for a first event
    item_ids: np.ndarray  # (num_items + 1,), external id of each internal item
    user_ids: np.ndarray  # (num_users,), external id of each internal user
    source: str

    @classmethod
    def from_interactions(cls, data: Interactions) -> EventStream:
        if len(data) == 0:
            raise DataFormatError(data.source, "the event log is empty: there is nothing to stream")
        if data.timestamp is None:
            raise DataFormatError(
                data.source,
                "has no event times; a stream needs one per event (ml-100k, ml-latest-small "
                "and yoochoose have them)",
            )
        bad = np.flatnonzero(~np.isfinite(data.timestamp))
        if bad.size:
            row = int(bad[0])
            raise DataFormatError(
                data.source,
                f"the event of user {data.user_ids[data.user[row]]} and item "
                f"{data.item_ids[data.item[row]]} has a missing or non-finite time "
                f"({data.timestamp[row]}); {bad.size} such events",
            )
        order = np.argsort(data.timestamp, kind="stable")
        user = data.user[order]
        # within a user, stream order is the table's own order: a stable sort by user recovers it
        by_user = np.argsort(user, kind="stable")
        previous = np.full(user.size, -1, dtype=np.int64)
        same = user[by_user[1:]] == user[by_user[:-1]]
        previous[by_user[1:][same]] = by_user[:-1][same]
        return cls(
            user=user,
            item=data.item[order],
            time=data.timestamp[order],
            previous=previous,
            item_ids=data.item_ids,
            user_ids=data.user_ids,
            source=data.source,
        )

    def __len__(self) -> int:
        return self.item.size

    @property
    def num_items(self) -> int:
        return len(self.item_ids) - 1

    def histories(self, index: np.ndarray, length: int) -> np.ndarray:
        """``(len(index), length)`` int64: each event's user's previous ``length`` items, newest
        last, left-padded with 0 (the event's own item is never in it)."""
        out = np.zeros((index.size, length), dtype=np.int64)
        cursor = self.previous[index]
        for column in range(length - 1, -1, -1):
            present = cursor >= 0
            if not present.any():
                break
            out[present, column] = self.item[cursor[present]]
            cursor = np.where(present, self.previous[np.maximum(cursor, 0)], -1)
        return out

    def chunks(self, size: int, limit: int = 0) -> list[slice]:
        """The stream (its first ``limit`` events; 0: all) cut in consecutive chunks of ``size``
        events, the last possibly shorter."""
        end = min(len(self), limit or len(self))
        return [slice(start, min(start + size, end)) for start in range(0, end, size)]


def concatenate(parts: list[Interactions]) -> Interactions:
    """One table of the events of ``parts`` (external ids: a user or item in two parts is one)."""
    for part in parts:
        if part.timestamp is None:
            raise DataFormatError(part.source, "has no event times; a stream needs one per event")
    ratings = [part.rating for part in parts]
    return Interactions.from_columns(
        np.concatenate([part.user_ids[part.user] for part in parts]),
        np.concatenate([part.item_ids[part.item] for part in parts]),
        timestamp=np.concatenate([part.timestamp for part in parts]),
        rating=None if any(r is None for r in ratings) else np.concatenate(ratings),
        source=" + ".join(part.source for part in parts),
    )


def load_stream(dataset: str, root: str | Path | None = None) -> EventStream:
    """The stream of a registered dataset, a stream of ``STREAMS``, or a file."""
    if dataset in STREAMS:
        name, files = STREAMS[dataset]
        if root is None:
            raise DataFormatError(dataset, "a stream of several files needs data.root")
        parts = [load_dataset(name, root=root)]
        parts += [load_dataset(str(Path(root) / file)) for file in files]
        return EventStream.from_interactions(concatenate(parts))
    return EventStream.from_interactions(load_dataset(dataset, root=root))
