"""A left-padded batch as groups of rows of similar length, each cut to its longest row.

A padding-free model (``SequentialRecommender.padding_free``) computes the same states at a
row's real positions whatever left padding precedes them, so it may run a batch group by group,
each group cut to its longest row, and never compute the padding columns. Which groups: the
partition of the rows, sorted by length, that minimises the positions computed plus a fixed
price per group (``overhead``, in positions: what one more group's kernel calls cost, in
positions' worth of work), found exactly by dynamic programming over the distinct lengths.

The trainer's own length groups (``train.length_groups``) are quantiles of the batch, so that
every auxiliary mean is weighted by its group's share of the targets; a model that groups rows
inside its forward (ADT, MrTransformer's partner) keeps its terms whole-batch means instead.
"""

from __future__ import annotations

import numpy as np
import torch


def groups_by_length(valid: torch.Tensor, overhead: float) -> list[tuple[torch.Tensor, int]]:
    """``(rows, width)`` per group of the batch whose real positions are ``valid`` (B, L): rows
    in order of length, each group to be cut to its last ``width`` columns (≥ 1, so a row
    without real positions keeps one column)."""
    lengths = valid.sum(1).clamp(min=1)
    order = torch.argsort(lengths, stable=True)
    distinct, counts = np.unique(lengths[order].cpu().numpy(), return_counts=True)
    before = np.concatenate([[0], np.cumsum(counts)])  # rows shorter than each distinct length
    # cost[b]: the cheapest partition of the rows shorter than distinct[b] (b = 0: none);
    # start[b]: where that partition's last group begins
    cost = np.zeros(len(distinct) + 1)
    start = np.zeros(len(distinct) + 1, dtype=np.int64)
    for end in range(1, len(distinct) + 1):
        candidates = cost[:end] + (before[end] - before[:end]) * distinct[end - 1] + overhead
        start[end] = int(np.argmin(candidates))
        cost[end] = candidates[start[end]]
    groups, end = [], len(distinct)
    while end:
        first = start[end]
        groups.append((order[before[first] : before[end]], int(distinct[end - 1])))
        end = first
    return groups[::-1]


def in_row_order(groups: list[tuple[torch.Tensor, int]], parts: list[torch.Tensor]) -> torch.Tensor:
    """Per-group tensors ``(rows, …)`` as one ``(B, …)`` tensor in the batch's row order."""
    order = torch.cat([rows for rows, _ in groups])
    return torch.cat(parts)[torch.argsort(order)]


def scatter_rows(
    groups: list[tuple[torch.Tensor, int]], states: list[torch.Tensor], length: int
) -> torch.Tensor:
    """The per-group states ``(rows, width, …)`` back in one ``(B, length, …)`` tensor in the
    batch's row order, zero in the columns a group was cut to."""
    padded = [
        torch.nn.functional.pad(part, (0, 0) * (part.ndim - 2) + (length - width, 0))
        for (_, width), part in zip(groups, states, strict=True)
    ]
    return in_row_order(groups, padded)
