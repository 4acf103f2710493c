"""A GRU over each row's real positions: ``u_t = GRU(h_1 … h_t)``, item by item, causal.

Inputs are left-padded ``(B, L, D)`` hidden states. Each row is rolled so that its items start
at column 0, run through ``nn.GRU`` (the padding, now at the end, follows every item and changes
none of their outputs) and rolled back, so ``u_t`` depends on the row's items up to t only and
not on how much padding precedes them. Outputs are zero at padding. The GRU keeps torch's
initialisation (uniform ±1/√D).
"""

from __future__ import annotations

import torch
from torch import nn


def _roll_rows(x: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """Row r of ``x`` (B, L, …) rolled left by ``shifts[r]`` columns."""
    length = x.shape[1]
    columns = (torch.arange(length, device=x.device)[None, :] + shifts[:, None]) % length
    index = columns.reshape(*columns.shape, *[1] * (x.ndim - 2)).expand_as(x)
    return torch.gather(x, 1, index)


class GRUHead(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gru = nn.GRU(dim, dim, batch_first=True)

    def forward(self, hidden: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """``(B, L, D)`` GRU states of ``hidden`` (B, L, D) under ``valid`` (B, L) (left-padded)."""
        padding = hidden.shape[1] - valid.sum(1)
        right_padded = _roll_rows(hidden, padding)
        states, _ = self.gru(right_padded)
        return _roll_rows(states, -padding) * valid.unsqueeze(-1).to(states.dtype)
