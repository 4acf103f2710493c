"""Training batches from CSR sequences, built with whole-batch numpy gathers (no per-sample
Python loop) and handed out as torch LongTensors. 0 is padding; windows are left-padded, so the
most recent item always sits in the last column.

* ``causal_batches`` (SASRec): input ``s[:-1]``, target ``s[1:]``, the last ``max_len`` of each;
  ``targets[b, t]`` is the item after ``inputs[b, t]``.
* ``last_position_batches`` (BSARec/GRU4Rec-style augmentation): every prefix ``s[:k]`` with
  ``k >= 1`` is one sample predicting ``s[k]``.
* ``cloze_batches`` (BERT4Rec): each item of the last-``max_len`` window is replaced by the mask
  token ``num_items + 1`` with probability ``mask_prob`` (``force_last_mask`` always masks the
  most recent one); ``targets`` holds the original item where masked and 0 elsewhere.
* ``sliding_windows`` cuts long histories into overlapping rows so that every event is used,
  not only the last ``max_len``.

Every builder is a generator over one epoch, deterministic given ``(seed, epoch)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import torch

from attnsvm.rec.data.sequences import Sequences


class Batch(NamedTuple):
    users: torch.Tensor  # (B,) internal user id of each sample
    inputs: torch.Tensor  # (B, max_len) item ids, 0 = padding
    targets: torch.Tensor  # causal: (B, max_len); last-position: (B,); cloze: (B, max_len)


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    """The generator of one epoch: independent streams for every (seed, epoch)."""
    return np.random.default_rng([seed, epoch])


def windows(items: np.ndarray, starts: np.ndarray, ends: np.ndarray, max_len: int) -> np.ndarray:
    """Left-padded ``(len(starts), max_len)`` matrix of ``items[max(start, end - max_len):end]``."""
    index = ends[:, None] + np.arange(-max_len, 0)  # the max_len positions before each end
    inside = index >= starts[:, None]
    return np.where(inside, np.take(items, index, mode="clip"), 0)  # clip: masked anyway


def _order(count: int, rng: np.random.Generator, shuffle: bool) -> np.ndarray:
    return rng.permutation(count) if shuffle else np.arange(count)


def _chunks(order: np.ndarray, batch_size: int, drop_last: bool) -> Iterator[np.ndarray]:
    stop = order.size - order.size % batch_size if drop_last else order.size
    for begin in range(0, stop, batch_size):
        yield order[begin : begin + batch_size]


def causal_batches(
    train: Sequences,
    *,
    max_len: int,
    batch_size: int,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    drop_last: bool = False,
) -> Iterator[Batch]:
    """SASRec batches: all-position shifted targets; rows with < 2 items are skipped."""
    rows = np.flatnonzero(train.lengths >= 2)
    rows = rows[_order(rows.size, epoch_rng(seed, epoch), shuffle)]
    for chunk in _chunks(rows, batch_size, drop_last):
        starts, ends = train.offsets[chunk], train.offsets[chunk + 1]
        yield Batch(
            torch.from_numpy(train.users[chunk]),
            torch.from_numpy(windows(train.items, starts, ends - 1, max_len)),
            torch.from_numpy(windows(train.items, starts + 1, ends, max_len)),
        )


def last_position_batches(
    train: Sequences,
    *,
    max_len: int,
    batch_size: int,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    drop_last: bool = False,
) -> Iterator[Batch]:
    """Every prefix → its next item (one target per sample, at the last position)."""
    lengths = train.lengths
    row = np.repeat(np.arange(len(train)), lengths)
    position = np.arange(train.items.size) - train.offsets[row]
    sample = np.flatnonzero(position >= 1)  # flat index of each sample's target
    sample = sample[_order(sample.size, epoch_rng(seed, epoch), shuffle)]
    for chunk in _chunks(sample, batch_size, drop_last):
        starts = train.offsets[row[chunk]]
        yield Batch(
            torch.from_numpy(train.users[row[chunk]]),
            torch.from_numpy(windows(train.items, starts, chunk, max_len)),
            torch.from_numpy(train.items[chunk]),
        )


def cloze_batches(
    train: Sequences,
    *,
    max_len: int,
    batch_size: int,
    num_items: int,
    mask_prob: float,
    force_last_mask: bool = False,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    drop_last: bool = False,
) -> Iterator[Batch]:
    """BERT4Rec batches: mask token ``num_items + 1``; ``targets`` 0 where not masked."""
    if not 0.0 <= mask_prob <= 1.0:
        raise ValueError("mask_prob must lie in [0, 1]")
    rng = epoch_rng(seed, epoch)
    rows = np.flatnonzero(train.lengths >= 1)
    rows = rows[_order(rows.size, rng, shuffle)]
    for chunk in _chunks(rows, batch_size, drop_last):
        items = windows(train.items, train.offsets[chunk], train.offsets[chunk + 1], max_len)
        masked = (rng.random(items.shape) < mask_prob) & (items > 0)
        if force_last_mask:
            masked[:, -1] = True
        inputs = np.where(masked, num_items + 1, items)
        yield Batch(
            torch.from_numpy(train.users[chunk]),
            torch.from_numpy(inputs),
            torch.from_numpy(np.where(masked, items, 0)),
        )


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
    times = None if seqs.times is None else seqs.times[gather]
    return Sequences(offsets, seqs.items[gather], seqs.users[row], times)
