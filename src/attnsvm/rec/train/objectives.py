"""Training examples for each ``model.objective``, built batch by batch with vectorised gathers.

An example is ``(row, end)``: the window is the last ``max_len`` items of
``train.row(row)[:end]``, left-padded with 0.

- ``"causal"`` (SASRec): one example per user, ``end = n − 1``; targets at every position are the
  window shifted by one (``row[1:n]``), 0 where the input is padding.
- ``"cloze"`` (BERT4Rec): one example per user, ``end = n``; the model masks items per batch.
- ``"last"``: every prefix, ``end = 1 … n − 1``, predicts ``row[end]`` from the last position.

Users with fewer than two training items have no target and are left out. Negatives are drawn per
target position from a ``torch.Generator``, uniformly or by training popularity; accidental hits
(negative = positive) are removed by the losses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

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


def windows(train: Sequences, rows: np.ndarray, ends: np.ndarray, max_len: int) -> np.ndarray:
    """``(len(rows), max_len)``: items ``row[max(0, end − max_len):end]``, left-padded with 0."""
    position = ends[:, None] - max_len + np.arange(max_len)[None, :]
    index = train.offsets[rows][:, None] + position
    valid = position >= 0
    return np.where(valid, train.items[np.where(valid, index, 0)], 0)


@dataclass(frozen=True)
class Batch:
    inputs: torch.Tensor  # (B, L) item ids, left-padded
    targets: torch.Tensor  # (B, L) for causal/cloze (0 = no target), (B,) for last


def make_batch(train: Sequences, examples: Examples, index: np.ndarray, objective: str,
               max_len: int) -> Batch:
    """The batch of ``examples[index]``; cloze targets are filled in by the model's masking."""
    rows, ends = examples.rows[index], examples.ends[index]
    inputs = windows(train, rows, ends, max_len)
    if objective == "causal":
        targets = windows(train, rows, ends + 1, max_len)
        targets[inputs == 0] = 0
    elif objective == "last":
        targets = train.items[train.offsets[rows] + ends]
    else:
        targets = np.zeros_like(inputs)
    return Batch(torch.from_numpy(inputs), torch.from_numpy(targets))


def epoch_order(num_examples: int, generator: torch.Generator) -> np.ndarray:
    return torch.randperm(num_examples, generator=generator).numpy()


class NegativeSampler:
    """Negatives (N, k) in 1..num_items, uniform or proportional to training popularity."""

    def __init__(self, num_items: int, kind: str, popularity: np.ndarray) -> None:
        self.num_items = num_items
        self.kind = kind
        counts = torch.as_tensor(popularity[1 : num_items + 1], dtype=torch.float64)
        if kind == "popularity":
            # every item keeps a non-zero chance (+1 smoothing) so log q stays finite
            probabilities = (counts + 1.0) / (counts + 1.0).sum()
        elif kind == "uniform":
            probabilities = torch.full((num_items,), 1.0 / num_items, dtype=torch.float64)
        else:
            raise ValueError(f"unknown sampler {kind!r} (expected uniform or popularity)")
        self.probabilities = probabilities
        # log q per item id; the padding column is never drawn
        self.log_q = torch.cat([torch.zeros(1), probabilities.log().float()])

    def sample(self, count: int, k: int, generator: torch.Generator) -> torch.Tensor:
        if self.kind == "uniform":
            return torch.randint(1, self.num_items + 1, (count, k), generator=generator)
        draws = torch.multinomial(self.probabilities, count * k, replacement=True,
                                  generator=generator)
        return (draws + 1).view(count, k)
