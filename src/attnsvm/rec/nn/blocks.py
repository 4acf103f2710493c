"""Transformer blocks (three normalisation layouts) and the encoder stack.

Layouts, with ``Attn(q, k)`` taking queries from q and keys/values from k:

- ``"pre"``    (GPT-2):      ``x ← x + Attn(LN x, LN x)``;         ``x ← x + FFN(LN x)``
- ``"post"``   (BERT):       ``x ← LN(x + Attn(x, x))``;           ``x ← LN(x + FFN(x))``
- ``"sasrec"`` (official SASRec code): ``q = LN x``; ``x ← q + Attn(q, x)``; ``x ← LN x``;
  ``x ← x + FFN(x)`` — only the queries are normalised before attention.

"pre" and "sasrec" end with a final LayerNorm; "post" does not need one. ``ffn_size = 0``
leaves the FFN out (``FFN(x) = 0``, the LayerNorms stay): attention followed by a linear
readout, the model of the Att-SVM theory.

Options of the stack, all off by default: one FFN shared by every block (``shared_ffn``; the
blocks are then built without their own), per-pair attention terms passed to every block's
attention (``pair_bias``, ``value_gain``: see ``attnsvm.rec.nn.attention``), a block
``attention`` module other than ``MultiHeadAttention`` (local or block attention), and
``pair_mask = False``, under which the blocks get only the keys' validity ``(B, 1, 1, L)`` and
their attention applies its own order, so no ``L × L`` mask is ever built.
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
        attention: nn.Module | None = None,
    ) -> None:
        """``attention``: the block's attention, called as ``MultiHeadAttention`` is (queries,
        keys, keep-mask); a ``MultiHeadAttention(dim, num_heads, attention_dropout)`` if None."""
        super().__init__()
        if norm not in NORM_LAYOUTS:
            raise ValueError(f"norm must be one of {NORM_LAYOUTS}, got {norm!r}")
        self.norm = norm
        if attention is None:
            attention = MultiHeadAttention(dim, num_heads, attention_dropout)
        self.attention = attention
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
        last_query_only: bool = False,
        *,
        shared_ffn: PointwiseFFN | None = None,
        pair_bias: torch.Tensor | None = None,
        value_gain: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``last_query_only``: the block's output at the last position only, (B, 1, D); every
        position still serves as a key (what scoring the next item needs of the last block).
        ``shared_ffn``: the stack's FFN, used where the block has none of its own; ``pair_bias``
        and ``value_gain`` (B, H or 1, L, L) go to the attention."""
        queries = slice(-1, None) if last_query_only else slice(None)
        pair = {"bias": pair_bias, "value_gain": value_gain}
        pair = {name: term for name, term in pair.items() if term is not None}
        if last_query_only:
            keep_mask = keep_mask[..., -1:, :]
            pair = {name: term[..., -1:, :] for name, term in pair.items()}
        if self.norm == "pre":
            h = self.attention_norm(x)
            attended = self.attention(h[:, queries], h, keep_mask, **pair)
            x = x[:, queries] + self.dropout(attended)
            return x + self.feed_forward(self.ffn_norm(x), shared_ffn)
        if self.norm == "post":
            attended = self.attention(x[:, queries], x, keep_mask, **pair)
            x = self.attention_norm(x[:, queries] + self.dropout(attended))
            return self.ffn_norm(x + self.feed_forward(x, shared_ffn))
        q = self.attention_norm(x)
        attended = self.attention(q[:, queries], x, keep_mask, **pair)
        x = self.ffn_norm(q[:, queries] + self.dropout(attended))
        return x + self.feed_forward(x, shared_ffn)

    def feed_forward(self, x: torch.Tensor, shared: PointwiseFFN | None = None) -> torch.Tensor:
        """``FFN(x)`` with the block's own FFN, else ``shared``; zero when there is neither."""
        ffn = self.ffn if self.ffn is not None else shared
        return ffn(x) if ffn is not None else torch.zeros_like(x)


class TransformerEncoder(nn.Module):
    """A stack of blocks over embedded sequences; ``causal`` fixes the attention direction.

    The blocks are built by the caller (``SequentialRecommender.build_encoder`` from a model's
    config) and share one layout; a final LayerNorm follows unless the layout is "post".
    ``shared_ffn`` and ``pair_mask``: the stack's options of the module docstring."""

    def __init__(
        self,
        blocks: list[TransformerBlock],
        causal: bool,
        *,
        shared_ffn: PointwiseFFN | None = None,
        pair_mask: bool = True,
    ) -> None:
        super().__init__()
        if not blocks or len({block.norm for block in blocks}) != 1:
            raise ValueError("a TransformerEncoder needs one or more blocks of one layout")
        if shared_ffn is not None and any(block.ffn is not None for block in blocks):
            raise ValueError("blocks that share the stack's FFN must have none of their own")
        self.causal = causal
        self.pair_mask = pair_mask
        self.blocks = nn.ModuleList(blocks)
        dim = blocks[0].attention_norm.normalized_shape[0]
        self.final_norm = nn.LayerNorm(dim) if blocks[0].norm != "post" else nn.Identity()
        self.shared_ffn = shared_ffn

    def forward(
        self,
        x: torch.Tensor,
        valid: torch.Tensor,
        last_query_only: bool = False,
        *,
        pair_bias: torch.Tensor | None = None,
        value_gain: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Hidden states (B, L, D), zero at padding, of ``x`` (B, L, D) embedded inputs, ``valid``
        (B, L) True at non-padding positions.

        ``last_query_only``: the hidden state of the last position only, (B, 1, D). The last
        block then computes one query instead of L (earlier blocks still need every position,
        as keys of the next): about half the work of a 2-block model when scoring.
        ``pair_bias`` and ``value_gain`` (B, H or 1, L, L) go to every block's attention."""
        if self.pair_mask:
            keep_mask = attention_mask(valid, self.causal)
        else:
            keep_mask = valid[:, None, None, :]
        for index, block in enumerate(self.blocks):
            last = last_query_only and index == len(self.blocks) - 1
            x = block(
                x,
                keep_mask,
                last,
                shared_ffn=self.shared_ffn,
                pair_bias=pair_bias,
                value_gain=value_gain,
            )
        if last_query_only:
            valid = valid[:, -1:]
        return self.final_norm(x) * valid.unsqueeze(-1).to(x.dtype)
