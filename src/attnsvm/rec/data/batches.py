"""Training batches: the examples of a model's objective, cut into left-padded windows with
whole-batch numpy gathers (no per-sample Python loop). 0 is padding; the most recent item always
sits in the last column.

An example is ``(row, end)``: its window is the last ``max_len`` items of
``train.row(row)[:end]``. ``make_examples`` lists an epoch's examples for ``model.objective``:

- ``"causal"`` (SASRec): one example per user, ``end = n − 1``; targets at every position are the
  window shifted by one (``row[1:n]``), 0 where the input is padding.
- ``"cloze"`` (BERT4Rec): one example per user, ``end = n``; the model masks items per batch.
- ``"last"``: every prefix, ``end = 1 … n − 1``, predicts ``row[end]`` from the last position.

Users with fewer than two training items have no target and are left out. ``make_batch`` builds
the batch of a set of examples, with each event's time and rating beside its item where the data
has them (a model or a loss may read either). ``sliding_windows`` cuts long histories into
overlapping rows, so that every event is a target, not only those of the last ``max_len``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attnsvm.errors import ExpectedFailure
from attnsvm.rec.data.sequences import Sequences


def windows(items: np.ndarray, starts: np.ndarray, ends: np.ndarray, max_len: int) -> np.ndarray:
    """Left-padded ``(len(starts), max_len)`` matrix of ``items[max(start, end - max_len):end]``."""
    index = ends[:, None] + np.arange(-max_len, 0)  # the max_len positions before each end
    inside = index >= starts[:, None]
    return np.where(inside, np.take(items, index, mode="clip"), 0)  # clip: masked anyway


class NoTrainingData(ExpectedFailure, ValueError):
    """No user has the two training items a next-item target needs."""


@dataclass(frozen=True)
class Examples:
    rows: np.ndarray  # (E,) row of ``train`` per example
    ends: np.ndarray  # (E,) exclusive end of the input window inside that row

    def __len__(self) -> int:
        return self.rows.size


def make_examples(train: Sequences, objective: str) -> Examples:
    lengths = train.lengths
    usable = np.flatnonzero(lengths >= 2)
    if usable.size == 0:
        longest = int(lengths.max()) if lengths.size else 0
        raise NoTrainingData(
            f"no user has 2 or more training interactions (longest training sequence: {longest}); "
            "next-item training needs at least one (input, target) pair"
        )
    if objective == "causal":
        return Examples(usable, lengths[usable] - 1)
    if objective == "cloze":
        return Examples(usable, lengths[usable])
    if objective == "last":
        counts = lengths[usable] - 1
        rows = np.repeat(usable, counts)
        starts = np.cumsum(counts) - counts
        ends = np.arange(counts.sum()) - np.repeat(starts, counts) + 1
        return Examples(rows, ends)
    raise ValueError(f"unknown objective {objective!r} (expected causal, cloze or last)")


@dataclass(frozen=True)
class Batch:
    inputs: torch.Tensor  # (B, L) item ids, left-padded
    targets: torch.Tensor  # (B, L) for causal/cloze (0 = no target), (B,) for last
    users: torch.Tensor  # (B,) internal user id of each example
    times: torch.Tensor | None  # (B, L) timestamps aligned with inputs (0 at padding), or None
    ratings: torch.Tensor | None  # (B, L) ratings aligned with inputs (0 at padding), or None


def make_batch(
    train: Sequences, examples: Examples, index: np.ndarray, objective: str, max_len: int
) -> Batch:
    """The batch of ``examples[index]``; cloze targets are filled in by the model's masking."""
    rows = examples.rows[index]
    starts = train.offsets[rows]
    stops = starts + examples.ends[index]
    inputs = windows(train.items, starts, stops, max_len)
    if objective == "causal":
        targets = windows(train.items, starts + 1, stops + 1, max_len)
    elif objective == "last":
        targets = train.items[stops]
    else:
        targets = np.zeros_like(inputs)
    times, ratings = (
        None if column is None else torch.from_numpy(windows(column, starts, stops, max_len))
        for column in (train.times, train.ratings)
    )
    users = torch.from_numpy(train.users[rows])
    return Batch(torch.from_numpy(inputs), torch.from_numpy(targets), users, times, ratings)


def sliding_windows(seqs: Sequences, window: int, stride: int) -> Sequences:
    """Rows longer than ``window`` become overlapping windows of ``window`` items.

    The windows of a row of length ``n > window`` start at ``0`` and at
    ``n - window - k * stride`` for ``k = 0, 1, ...`` while positive, so the last window ends
    at the row's end. Each window keeps the row's user id. For causal training use
    ``window = max_len + 1`` and ``stride = max_len``: every event after a row's first is then
    a target at least once (the window at 0 may overlap the next one).
    """
    if not 1 <= stride < window:
        raise ValueError("need 1 <= stride < window (a larger stride skips targets)")
    n = seqs.lengths
    extra = np.where(n > window, -(-(n - window) // stride), 0)  # windows after the first
    count = extra + 1
    row = np.repeat(np.arange(len(seqs)), count)
    k = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    # k = 0 is the window at 0; k >= 1 counts back from the end, latest last
    back = count[row] - k - 1
    start = np.where(k == 0, 0, n[row] - window - back * stride)
    start = np.maximum(start, 0)
    length = np.minimum(n[row], window)
    offsets = np.concatenate([[0], np.cumsum(length)]).astype(np.int64)
    gather = np.repeat(seqs.offsets[row] + start - offsets[:-1], length) + np.arange(offsets[-1])
    return seqs.gather(offsets, gather, seqs.users[row])
