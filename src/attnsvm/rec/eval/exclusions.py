"""The items a batch of ranked rows excludes (their seen items), its own targets kept."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Exclusions:
    """``(row, item)`` pairs of a batch's rows (``row`` indexes the batch): the items each row
    excludes, and its own targets, which stay rankable even where excluded."""

    rows: np.ndarray
    items: np.ndarray
    target_rows: np.ndarray
    targets: np.ndarray

    @classmethod
    def none(cls) -> Exclusions:
        empty = np.zeros(0, dtype=np.int64)
        return cls(empty, empty, empty, empty)

    def of_block(self, positions: np.ndarray) -> Exclusions:
        """The pairs of the batch rows ``positions``, renumbered as the block's rows."""
        size = max(self.rows.max(initial=-1), self.target_rows.max(initial=-1))
        size = max(size, positions.max(initial=-1))
        where = np.full(size + 1, -1)
        where[positions] = np.arange(positions.size)
        rows, target_rows = where[self.rows], where[self.target_rows]
        mine, targets_mine = rows >= 0, target_rows >= 0
        return Exclusions(
            rows[mine], self.items[mine], target_rows[targets_mine], self.targets[targets_mine]
        )

    def by_item(self) -> Exclusions:
        """The same pairs ordered by item, for ``within``."""
        order, target_order = np.argsort(self.items), np.argsort(self.targets)
        return Exclusions(
            self.rows[order],
            self.items[order],
            self.target_rows[target_order],
            self.targets[target_order],
        )

    def within(self, start: int, stop: int) -> Exclusions:
        """The pairs of items start..stop − 1 (of pairs ordered ``by_item``)."""
        low, high = np.searchsorted(self.items, (start, stop))
        t_low, t_high = np.searchsorted(self.targets, (start, stop))
        return Exclusions(
            self.rows[low:high],
            self.items[low:high],
            self.target_rows[t_low:t_high],
            self.targets[t_low:t_high],
        )

    def apply(self, scores: torch.Tensor, start: int) -> None:
        """Excluded items at -inf in ``scores`` (the items from ``start`` on), targets kept."""
        if not self.rows.size:
            return
        device = scores.device
        rows, items, target_rows, targets = (
            torch.from_numpy(a).to(device)
            for a in (self.rows, self.items - start, self.target_rows, self.targets - start)
        )
        target_scores = scores[target_rows, targets]
        scores[rows, items] = -torch.inf
        scores[target_rows, targets] = target_scores
