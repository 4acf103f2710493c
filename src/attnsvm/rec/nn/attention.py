"""Multi-head attention on ``scaled_dot_product_attention``, with an explicit-matmul reference path.

Per head h, with ``d_h = dim / heads``:

    A_h = softmax(Q_h K_hᵀ / √d_h  masked where keep_mask is False),   out = [A_1 V_1 … A_H V_H] W_O

``Q = x_q W_Qᵀ + b_Q``, ``K = x_k W_Kᵀ + b_K``, ``V = x_k W_Vᵀ + b_V`` are ``q_proj``, ``k_proj``,
``v_proj`` and ``out_proj`` (``nn.Linear``), so the lens reads ``W_Q = q_proj.weight`` etc. The
fast path is SDPA; the reference path (``return_weights=True``) computes the same thing with
explicit matmuls and returns ``A`` (before attention dropout), shape ``(B, H, L_q, L_k)``.
Training on CPU with attention dropout also takes the explicit path: SDPA's CPU kernel falls
back to the same matmuls there but draws its dropout mask with torch's slower ``bernoulli_``
(see ``attnsvm.rec.nn.dropout``); fwd + bwd was 17–45 % faster at B = 32–128, L = 120–200.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from attnsvm.rec.nn.dropout import dropout as drop


def attention_mask(valid: torch.Tensor, causal: bool) -> torch.Tensor:
    """Boolean keep-mask ``(B, 1, L, L)``: query t may attend key s.

    Keys at padding positions are never attended; with ``causal`` only keys ``s ≤ t`` are. Every
    query may attend itself, so padding rows (which have no valid key) stay finite; their outputs
    are discarded by the caller, and real rows are unaffected because their diagonal is valid.
    """
    length = valid.shape[1]
    keep = valid[:, None, None, :]
    diagonal = torch.eye(length, dtype=torch.bool, device=valid.device)
    if causal:
        keep = keep & torch.ones_like(diagonal).tril()
    return keep | diagonal


def reference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep_mask: torch.Tensor, dropout: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(A V, A)`` with ``A = softmax(masked(q kᵀ / √d_h))``; dropout applies to ``A V`` only."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = scores.masked_fill(~keep_mask, float("-inf")).softmax(dim=-1)
    return drop(weights, dropout) @ v, weights


class MultiHeadAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim {dim} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(dim, dim, bias=bias)
        self.k_proj = nn.Linear(dim, dim, bias=bias)
        self.v_proj = nn.Linear(dim, dim, bias=bias)
        self.out_proj = nn.Linear(dim, dim, bias=bias)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        return x.view(batch, length, self.num_heads, dim // self.num_heads).transpose(1, 2)

    def forward(
        self,
        query_input: torch.Tensor,
        key_input: torch.Tensor,
        keep_mask: torch.Tensor,
        return_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(out (B, L_q, D), weights (B, H, L_q, L_k) or None)``; keys/values from key_input."""
        q = self._heads(self.q_proj(query_input))
        k = self._heads(self.k_proj(key_input))
        v = self._heads(self.v_proj(key_input))
        dropout = self.dropout if self.training else 0.0
        weights = None
        if return_weights or (dropout > 0.0 and q.device.type == "cpu"):
            out, weights = reference_attention(q, k, v, keep_mask, dropout)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep_mask, dropout_p=dropout)
        batch, _, length, _ = out.shape
        out = self.out_proj(out.transpose(1, 2).reshape(batch, length, -1))
        return out, weights if return_weights else None
