"""Stochastic Shared Embeddings (Wu et al., NeurIPS 2019), the regulariser of SSE-PT.

During training each embedding index is, with probability ``p``, replaced by an index drawn
uniformly from the table, so the embedding looked up is a random *other* row: a data-dependent
dropout on embedding tables that works where plain dropout cannot reach (the lookup itself).
Padding (0) is never replaced and never drawn. In evaluation the ids pass through unchanged.

The official SSE-PT sampler takes keep-thresholds (``--threshold_user 0.08 --threshold_item
0.9``, replace when ``random() > threshold``); the replacement probability here is
``1 − threshold``.
"""

from __future__ import annotations

import torch
from torch import nn


def sse_replace(
    ids: torch.Tensor, probability: float, num_ids: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``ids`` with each non-zero entry replaced with ``probability`` by a uniform id 1..num_ids."""
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"SSE probability must lie in [0, 1], got {probability}")
    if probability == 0.0:
        return ids
    draw = torch.rand(ids.shape, generator=generator, device=ids.device)
    random_ids = torch.randint(1, num_ids + 1, ids.shape, generator=generator, device=ids.device)
    return torch.where((draw < probability) & (ids != 0), random_ids, ids)


class StochasticSharedEmbedding(nn.Module):
    """Applies ``sse_replace`` to ids in training mode only; ids are 1..num_ids, 0 = padding."""

    def __init__(self, num_ids: int, probability: float) -> None:
        super().__init__()
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"SSE probability must lie in [0, 1], got {probability}")
        self.num_ids = num_ids
        self.probability = probability

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if not self.training or self.num_ids == 0:
            return ids
        return sse_replace(ids, self.probability, self.num_ids)
