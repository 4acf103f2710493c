"""Attention over pooled blocks of the history, and its mix with local attention (long + short).

**Blocks.** The window is cut into blocks of ``b`` positions *from the right* (the most recent
item ends the last block; the left end is padded with masked positions), so the partition of
the real items does not depend on how much left padding precedes them. A block's vector is the
mean of its real items (``pooling = "mean"``) or their softmax-weighted sum under a learned query
(``"attentive"``; the query starts at zero, i.e. at the mean). A block without items is masked.

**Causal block attention.** Query i attends the blocks that end at or before i: every item a
block holds is then at or before i, so nothing later leaks in. ``L`` queries meet ``⌈L/b⌉`` keys:
``O(L²/b)`` instead of ``O(L²)``. A query that no block has ended before yet (the first items of
a window) has no long-term history: its output is zero.

The lens reads a block as the window column where the block ends (``key_positions``).

**Long + short.** ``LongShortAttention`` runs a ``LocalAttention`` (short term) and a
``BlockAttention`` (long term) on the same inputs and mixes them per dimension,
``g ⊙ short + (1 − g) ⊙ long`` with ``g = σ(W_g [short; long] + b_g)`` (``mix = "gate"``), or
sums them (``"sum"``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from attnsvm.rec.nn.attention import MultiHeadAttention
from attnsvm.rec.nn.local_attention import LocalAttention

POOLINGS = ("mean", "attentive")
MIXES = ("gate", "sum")


def block_ends(length: int, block_size: int, device=None) -> torch.Tensor:
    """``(n,)`` window column of the last position of each block, blocks aligned to the right."""
    count = -(-length // block_size)
    padding = count * block_size - length
    return torch.arange(1, count + 1, device=device) * block_size - 1 - padding


def pool_blocks(
    x: torch.Tensor, valid: torch.Tensor, block_size: int, query: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(blocks (B, n, D), block_valid (B, n))`` of ``x`` (B, L, D) under ``valid`` (B, L):
    the mean of each block's real items, or with ``query`` (D,) their attention-weighted sum."""
    batch, length, dim = x.shape
    count = -(-length // block_size)
    pad = count * block_size - length
    items = F.pad(x, (0, 0, pad, 0)).reshape(batch, count, block_size, dim)
    real = F.pad(valid, (pad, 0)).reshape(batch, count, block_size)
    if query is None:
        weights = real.to(x.dtype) / real.sum(-1, keepdim=True).clamp(min=1).to(x.dtype)
    else:
        scores = items @ query / math.sqrt(dim)
        # the lowest finite value, not −∞: an empty block's softmax stays finite (then zeroed)
        scores = scores.masked_fill(~real, torch.finfo(scores.dtype).min)
        weights = scores.softmax(dim=-1) * real
    return (weights.unsqueeze(-1) * items).sum(2), real.any(-1)


class BlockAttention(MultiHeadAttention):
    """Causal attention of each query over the pooled blocks that end at or before it.

    ``keep_mask`` is the keys' validity ``(B, 1, 1, L)``; the queries are the last ``L_q``
    positions. The keys and values are the blocks of ``key_input``."""

    def __init__(
        self, dim: int, num_heads: int, block_size: int, pooling: str, dropout: float = 0.0
    ) -> None:
        super().__init__(dim, num_heads, dropout)
        if block_size < 1:
            raise ValueError(f"the block size must be ≥ 1, got {block_size}")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        self.block_size = block_size
        self.pool_query = nn.Parameter(torch.zeros(dim)) if pooling == "attentive" else None

    def forward(
        self, query_input: torch.Tensor, key_input: torch.Tensor, keep_mask: torch.Tensor
    ) -> torch.Tensor:
        valid = keep_mask[:, 0, 0, :]
        length, num_queries = key_input.shape[1], query_input.shape[1]
        blocks, block_valid = pool_blocks(key_input, valid, self.block_size, self.pool_query)
        ends = block_ends(length, self.block_size, valid.device)
        positions = torch.arange(length - num_queries, length, device=valid.device)
        visible = block_valid[:, None, :] & (ends[None, None, :] <= positions[None, :, None])
        history = visible.any(-1)  # (B, L_q): has some block ended yet?
        # a query without a block keeps block 0 so its softmax is finite; its output is zeroed
        first = torch.arange(ends.numel(), device=valid.device) == 0
        keep = visible | (~history[..., None] & first)
        key_positions = ends.expand(len(blocks), -1)
        out = super().forward(query_input, blocks, keep[:, None], key_positions=key_positions)
        return out * history[..., None].to(out.dtype)


class LongShortAttention(nn.Module):
    """Local attention and block attention on the same inputs, mixed (module docstring)."""

    def __init__(self, short: LocalAttention, long: BlockAttention, mix: str = "gate") -> None:
        super().__init__()
        if mix not in MIXES:
            raise ValueError(f"mix must be one of {MIXES}, got {mix!r}")
        self.short = short
        self.long = long
        dim = short.q_proj.in_features
        self.gate = nn.Linear(2 * dim, dim) if mix == "gate" else None

    def forward(
        self, query_input: torch.Tensor, key_input: torch.Tensor, keep_mask: torch.Tensor
    ) -> torch.Tensor:
        short = self.short(query_input, key_input, keep_mask)
        long = self.long(query_input, key_input, keep_mask)
        if self.gate is None:
            return short + long
        gate = torch.sigmoid(self.gate(torch.cat([short, long], dim=-1)))
        return gate * short + (1 - gate) * long
