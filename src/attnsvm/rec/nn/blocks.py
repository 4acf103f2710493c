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

import torch
from torch import nn

from attnsvm.rec.nn.attention import MultiHeadAttention, attention_mask
from attnsvm.rec.nn.dropout import Dropout
from attnsvm.rec.nn.ffn import PointwiseFFN

NORM_LAYOUTS = ("pre", "post", "sasrec")


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
        self, x: torch.Tensor, keep_mask: torch.Tensor, last_query_only: bool = False
    ) -> torch.Tensor:
        """``last_query_only``: the block's output at the last position only, (B, 1, D); every
        position still serves as a key (what scoring the next item needs of the last block)."""
        queries = slice(-1, None) if last_query_only else slice(None)
        if last_query_only:
            keep_mask = keep_mask[..., -1:, :]
        if self.norm == "pre":
            h = self.attention_norm(x)
            attended = self.attention(h[:, queries], h, keep_mask)
            x = x[:, queries] + self.dropout(attended)
            return x + self.feed_forward(self.ffn_norm(x))
        if self.norm == "post":
            attended = self.attention(x[:, queries], x, keep_mask)
            x = self.attention_norm(x[:, queries] + self.dropout(attended))
            return self.ffn_norm(x + self.feed_forward(x))
        q = self.attention_norm(x)
        attended = self.attention(q[:, queries], x, keep_mask)
        x = self.ffn_norm(q[:, queries] + self.dropout(attended))
        return x + self.feed_forward(x)

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        """``FFN(x)``, zero when the block has none."""
        return self.ffn(x) if self.ffn is not None else torch.zeros_like(x)


class TransformerEncoder(nn.Module):
    """A stack of blocks over embedded sequences; ``causal`` fixes the attention direction.

    The blocks are built by the caller (``SequentialRecommender.build_encoder`` from a model's
    config) and share one layout; a final LayerNorm follows unless the layout is "post"."""

    def __init__(self, blocks: list[TransformerBlock], causal: bool) -> None:
        super().__init__()
        if not blocks or len({block.norm for block in blocks}) != 1:
            raise ValueError("a TransformerEncoder needs one or more blocks of one layout")
        self.causal = causal
        self.blocks = nn.ModuleList(blocks)
        dim = blocks[0].attention_norm.normalized_shape[0]
        self.final_norm = nn.LayerNorm(dim) if blocks[0].norm != "post" else nn.Identity()

    def forward(
        self, x: torch.Tensor, valid: torch.Tensor, last_query_only: bool = False
    ) -> torch.Tensor:
        """Hidden states (B, L, D), zero at padding, of ``x`` (B, L, D) embedded inputs, ``valid``
        (B, L) True at non-padding positions.

        ``last_query_only``: the hidden state of the last position only, (B, 1, D). The last
        block then computes one query instead of L (earlier blocks still need every position,
        as keys of the next): about half the work of a 2-block model when scoring."""
        keep_mask = attention_mask(valid, self.causal)
        for index, block in enumerate(self.blocks):
            x = block(x, keep_mask, last_query_only and index == len(self.blocks) - 1)
        if last_query_only:
            valid = valid[:, -1:]
        return self.final_norm(x) * valid.unsqueeze(-1).to(x.dtype)
