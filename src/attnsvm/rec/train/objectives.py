"""Training examples for each ``model.objective``, built batch by batch with vectorised gathers.

An example is ``(row, end)``: the window is the last ``max_len`` items of
``train.row(row)[:end]``, left-padded with 0.

- ``"causal"`` (SASRec): one example per user, ``end = n − 1``; targets at every position are the
  window shifted by one (``row[1:n]``), 0 where the input is padding.
- ``"cloze"`` (BERT4Rec): one example per user, ``end = n``; the model masks items per batch.
- ``"last"``: every prefix, ``end = 1 … n − 1``, predicts ``row[end]`` from the last position.

Users with fewer than two training items have no target and are left out. Windows and negative
samplers come from the data layer (``attnsvm.rec.data.batches``/``samplers``); negatives are
drawn per target position, uniformly or by training popularity, never equal to the positive.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attnsvm.rec.data.batches import windows
from attnsvm.rec.data.samplers import PopularitySampler, UniformSampler
from attnsvm.rec.data.sequences import Sequences


class NoTrainingData(ValueError):
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


def make_batch(
    train: Sequences, examples: Examples, index: np.ndarray, objective: str, max_len: int
) -> Batch:
    """The batch of ``examples[index]``; cloze targets are filled in by the model's masking."""
    rows, ends = examples.rows[index], examples.ends[index]
    starts = train.offsets[rows]
    inputs = windows(train.items, starts, starts + ends, max_len)
    if objective == "causal":
        targets = windows(train.items, starts + 1, starts + ends + 1, max_len)
    elif objective == "last":
        targets = train.items[starts + ends]
    else:
        targets = np.zeros_like(inputs)
    times = None
    if train.times is not None:
        times = torch.from_numpy(windows(train.times, starts, starts + ends, max_len))
    users = torch.from_numpy(train.users[rows])
    return Batch(torch.from_numpy(inputs), torch.from_numpy(targets), users, times)


def negative_sampler(kind: str, popularity: np.ndarray, seed: int):
    """The data layer's sampler for one epoch; it never returns the positive it is drawn for."""
    if kind == "uniform":
        return UniformSampler(popularity.size - 1, seed=seed)
    if kind == "popularity":
        return PopularitySampler(popularity, seed=seed)
    raise ValueError(f"unknown sampler {kind!r} (expected uniform or popularity)")


def log_q(kind: str, popularity: np.ndarray) -> torch.Tensor:
    """log-probability of drawing each item id (index 0, padding, is never drawn: −∞)."""
    if kind == "uniform":
        probability = np.full(popularity.size, 1.0 / (popularity.size - 1))
        probability[0] = 0.0
    else:
        probability = PopularitySampler(popularity).probability
    with np.errstate(divide="ignore"):
        return torch.from_numpy(np.log(probability)).float()
