"""Transformer blocks (three normalisation layouts) and the encoder stack.

Layouts, with ``Attn(q, k)`` taking queries from q and keys/values from k:

- ``"pre"``    (GPT-2):      ``x ← x + Attn(LN x, LN x)``;         ``x ← x + FFN(LN x)``
- ``"post"``   (BERT):       ``x ← LN(x + Attn(x, x))``;           ``x ← LN(x + FFN(x))``
- ``"sasrec"`` (official SASRec code): ``q = LN x``; ``x ← q + Attn(q, x)``; ``x ← LN x``;
  ``x ← x + FFN(x)`` — only the queries are normalised before attention.

"pre" and "sasrec" end with a final LayerNorm; "post" does not need one. ``ffn_size = 0``
leaves the FFN out (``FFN(x) = 0``, the LayerNorms stay): attention followed by a linear
readout, the model of the Att-SVM theory.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from attnsvm.rec.nn.attention import MultiHeadAttention, attention_mask
from attnsvm.rec.nn.dropout import Dropout
from attnsvm.rec.nn.ffn import PointwiseFFN

NORM_LAYOUTS = ("pre", "post", "sasrec")


class AttentionInput(NamedTuple):
    """What a layer's attention consumed: queries from ``query``, keys and values from ``key``."""

    query: torch.Tensor  # (B, L, D)
    key: torch.Tensor  # (B, L, D); the same tensor as query for "pre" and "post"
    # (B, n) window column of each key where the keys are a per-row subset of the window
    # (STRec's later layers); None: the keys are the whole window, in order
    key_positions: torch.Tensor | None = None


class EncoderOutput(NamedTuple):
    hidden: torch.Tensor  # (B, L, D), zero at padding positions
    attention: list[torch.Tensor] | None  # per layer (B, H, L, L), from the reference path
    layer_inputs: list[AttentionInput] | None  # per layer


class TransformerBlock(nn.Module):
    def __init__(
        self,
        dim: int,
        num_heads: int,
        ffn_size: int,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        activation: str = "relu",
        norm: str = "pre",
        attention_output_dropout: bool = True,
    ) -> None:
        super().__init__()
        if norm not in NORM_LAYOUTS:
            raise ValueError(f"norm must be one of {NORM_LAYOUTS}, got {norm!r}")
        self.norm = norm
        self.attention = MultiHeadAttention(dim, num_heads, attention_dropout)
        self.attention_norm = nn.LayerNorm(dim)
        if ffn_size < 0:
            raise ValueError(f"ffn_size must be ≥ 0 (0: no FFN), got {ffn_size}")
        self.ffn = PointwiseFFN(dim, ffn_size, activation, dropout) if ffn_size else None
        self.ffn_norm = nn.LayerNorm(dim)
        self.dropout = Dropout(dropout if attention_output_dropout else 0.0)

    def forward(
        self,
        x: torch.Tensor,
        keep_mask: torch.Tensor,
        return_weights: bool = False,
        last_query_only: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, AttentionInput]:
        """``last_query_only``: the block's output at the last position only, (B, 1, D); every
        position still serves as a key (what scoring the next item needs of the last block)."""
        queries = slice(-1, None) if last_query_only else slice(None)
        if last_query_only:
            keep_mask = keep_mask[..., -1:, :]
        if self.norm == "pre":
            h = self.attention_norm(x)
            attended, weights = self.attention(h[:, queries], h, keep_mask, return_weights)
            inputs = AttentionInput(h, h)
            x = x[:, queries] + self.dropout(attended)
            x = x + self.feed_forward(self.ffn_norm(x))
        elif self.norm == "post":
            attended, weights = self.attention(x[:, queries], x, keep_mask, return_weights)
            inputs = AttentionInput(x, x)
            x = self.attention_norm(x[:, queries] + self.dropout(attended))
            x = self.ffn_norm(x + self.feed_forward(x))
        else:
            q = self.attention_norm(x)
            attended, weights = self.attention(q[:, queries], x, keep_mask, return_weights)
            inputs = AttentionInput(q, x)
            x = self.ffn_norm(q[:, queries] + self.dropout(attended))
            x = x + self.feed_forward(x)
        return x, weights, inputs

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        """``FFN(x)``, zero when the block has none."""
        return self.ffn(x) if self.ffn is not None else torch.zeros_like(x)


class TransformerEncoder(nn.Module):
    """A stack of blocks over embedded sequences; ``causal`` fixes the attention direction."""

    def __init__(
        self,
        dim: int,
        num_blocks: int,
        num_heads: int,
        ffn_size: int,
        causal: bool,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        activation: str = "relu",
        norm: str = "pre",
        attention_output_dropout: bool = True,
    ) -> None:
        super().__init__()
        self.causal = causal
        self.blocks = nn.ModuleList(
            TransformerBlock(
                dim,
                num_heads,
                ffn_size,
                dropout,
                attention_dropout,
                activation,
                norm,
                attention_output_dropout,
            )
            for _ in range(num_blocks)
        )
        self.final_norm = nn.LayerNorm(dim) if norm != "post" else nn.Identity()

    def forward(
        self,
        x: torch.Tensor,
        valid: torch.Tensor,
        return_attention: bool = False,
        return_layer_inputs: bool = False,
        last_query_only: bool = False,
    ) -> EncoderOutput:
        """``x`` (B, L, D) embedded inputs, ``valid`` (B, L) True at non-padding positions.

        ``last_query_only``: the hidden state of the last position only, (B, 1, D). The last
        block then computes one query instead of L (earlier blocks still need every position,
        as keys of the next): about half the work of a 2-block model when scoring."""
        keep_mask = attention_mask(valid, self.causal)
        attention: list[torch.Tensor] = []
        layer_inputs: list[AttentionInput] = []
        for index, block in enumerate(self.blocks):
            last = last_query_only and index == len(self.blocks) - 1
            x, weights, inputs = block(x, keep_mask, return_attention, last)
            if return_attention:
                attention.append(weights)
            if return_layer_inputs:
                layer_inputs.append(inputs)
        if last_query_only:
            valid = valid[:, -1:]
        hidden = self.final_norm(x) * valid.unsqueeze(-1).to(x.dtype)
        return EncoderOutput(
            hidden,
            attention if return_attention else None,
            layer_inputs if return_layer_inputs else None,
        )
