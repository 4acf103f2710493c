"""Contextual position encoding (CoPE; Golovneva, Wang, Weston & Sukhbaatar 2024,
arXiv 2405.18719; the reference code is facebookresearch/RAM ``projects/cope``).

Positions are counted by the content instead of by token: for query i and key j, with the
attention logits ``z_ij = q_i·k_j / √d_h`` (−∞ where the key is masked),

    g_im = σ(z_im),    p_ij = Σ_{m ≥ j} g_im,    e(p) = (p − ⌊p⌋) e[⌈p⌉] + (⌈p⌉ − p) e[⌊p⌋],

and the logit gains ``q_i·e(p_ij)``; ``p`` is clamped to ``max_positions − 1``. The sum runs
over the keys from j to the end of the unmasked keys (the reference code's reversed cumulative
sum): under a causal mask that is ``Σ_{m=j}^{i}``, the paper's definition. Under a bidirectional
mask it counts to the window's end, which for the last query (SMM's mask token) is again the
paper's count; for earlier queries it is our reading (the paper defines CoPE for causal
attention only). Masked keys have gate 0 and count nothing. ``q_i·e[p]`` is computed for the
integer positions once, ``(B, H, L_q, max_positions)``, and interpolated, as the reference code
does. The position table ``e`` is one per layer, shared by its heads, and starts at zero.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnsvm.rec.nn.attention import MultiHeadAttention


class ContextualPositions(nn.Module):
    """``q_i·e(p_ij)`` of the module docstring, from the queries and the attention logits."""

    def __init__(self, head_dim: int, max_positions: int) -> None:
        super().__init__()
        if max_positions < 2:
            raise ValueError(f"max_positions must be ≥ 2, got {max_positions}")
        self.max_positions = max_positions
        self.embedding = nn.Parameter(torch.zeros(head_dim, max_positions))

    def positions(self, logits: torch.Tensor, keep_mask: torch.Tensor) -> torch.Tensor:
        """``p_ij`` (B, H, L_q, L_k): the gates of keys j … end, masked keys counting 0."""
        gates = torch.sigmoid(logits).masked_fill(~keep_mask, 0.0)
        counted = gates.flip(-1).cumsum(dim=-1).flip(-1)
        return counted.clamp(max=self.max_positions - 1)

    def forward(
        self, query: torch.Tensor, logits: torch.Tensor, keep_mask: torch.Tensor
    ) -> torch.Tensor:
        """The additive logit term ``q_i·e(p_ij)``, (B, H, L_q, L_k)."""
        position = self.positions(logits, keep_mask)
        at_integers = query @ self.embedding  # (B, H, L_q, max_positions)
        floor = position.floor()
        weight = position - floor
        floor = floor.long()
        ceil = position.ceil().long()
        low = at_integers.gather(-1, floor)
        high = at_integers.gather(-1, ceil)
        return high * weight + low * (1.0 - weight)


class CoPEAttention(MultiHeadAttention):
    """``MultiHeadAttention`` whose logits gain the CoPE term (and any per-pair ``bias``)."""

    def __init__(self, dim: int, num_heads: int, dropout: float, max_positions: int) -> None:
        super().__init__(dim, num_heads, dropout)
        self.cope = ContextualPositions(dim // num_heads, max_positions)

    def pair_bias(
        self, q: torch.Tensor, k: torch.Tensor, keep_mask: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        """The CoPE term plus ``bias``; the gates read the logits as the softmax does: bias
        included, masked keys excluded."""
        logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if bias is not None:
            logits = logits + bias
        return self.cope(q, logits, keep_mask) + (0.0 if bias is None else bias)
