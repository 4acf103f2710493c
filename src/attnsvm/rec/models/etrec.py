"""ETRec (Towards Efficient and Effective Transformers for Sequential Recommendation, DASFAA 2023),
as reconstructed here: SASRec's stack with local attention for short-term preferences, attention
over pooled blocks of items ("interests") for long-term ones, and one FFN shared by every layer.

**What is the paper's and what is our reading.** Only the abstract could be read. From it:
scalable long- and short-term preference learning, blocks of items aggregated as interests, and
a parameter-efficient FFN shared across layers. Everything else is our reading (spec: research
``remaining_models.md`` §1), each part a config switch:

- short term: causal local attention over the last ``local_window`` items (sliding-window
  attention as in Longformer, Beltagy et al. 2020), computed in chunks at ``O(L · w)``
  (``attnsvm.rec.nn.local_attention``); ``local_window ≥ max_len`` is full causal attention;
- long term (``block_branch``): each query attends the pooled blocks of ``block_size`` items
  that end at or before it, ``O(L²/b)`` (``attnsvm.rec.nn.block_attention``); ``block_size = 0``
  takes ``b = ⌈√max_len⌉``, so a window of L costs ``O(L^1.5)``; blocks pooled by their mean or
  by a learned attention query (``block_pooling``: "mean" | "attentive");
- the two mixed per dimension by a sigmoid gate on both outputs (as BlossomRec, a later paper,
  gates its local and block-level sparse attention), or summed (``branch_mix``: "gate" | "sum");
- ``share_ffn``: one FFN for all layers (ALBERT-style sharing, Lan et al. 2020), saving
  ``(num_blocks − 1)(2·d·d_ff + d + d_ff)`` parameters.

The rest is SASRec (``attnsvm.rec.models.sasrec``): embeddings × √d plus learned positions, the
"sasrec" block layout, causal all-position training, the same defaults. With ``block_branch``
off, ``local_window ≥ max_len`` and ``share_ffn`` off the model is SASRec, output for output, and
draws the same initial weights from the same seed (a test checks both).

The stack is kept off the ``encoder`` attribute on purpose: the lens's last-position shortcut
assumes every block is plain softmax attention over the window, so under another name the lens
re-runs the whole model for its counterfactual scores, which holds for any attention.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from attnsvm.rec.models.base import SequentialRecommender
from attnsvm.rec.models.sasrec import SASRecConfig
from attnsvm.rec.nn.block_attention import (
    MIXES,
    POOLINGS,
    BlockAttention,
    LongShortAttention,
)
from attnsvm.rec.nn.local_attention import LocalAttention


@dataclass(frozen=True)
class ETRecConfig(SASRecConfig):
    """SASRec's fields (see its module) plus the switches of the module docstring."""

    local_window: int = 16
    block_branch: bool = True
    block_size: int = 8  # 0: ⌈√max_len⌉
    block_pooling: str = "mean"
    branch_mix: str = "gate"
    share_ffn: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.local_window < 1:
            raise ValueError(f"ETRecConfig.local_window must be ≥ 1, got {self.local_window}")
        if self.block_size < 0:
            raise ValueError(f"ETRecConfig.block_size must be ≥ 0, got {self.block_size}")
        self._choice("block_pooling", POOLINGS)
        self._choice("branch_mix", MIXES)
        if self.share_ffn and self.ffn_size < 1:
            raise ValueError("ETRecConfig.share_ffn needs an FFN to share (ffn_size ≥ 1)")


class ETRec(SequentialRecommender):
    objective = "causal"
    config_class = ETRecConfig
    padding_free = True  # the windows and the blocks are counted from the right

    def __init__(self, num_items: int, config: ETRecConfig | None = None) -> None:
        config = config or ETRecConfig()
        super().__init__(num_items, config)
        self.build_embeddings(layer_norm=False)
        self.stack = self.build_encoder(
            causal=True,
            share_ffn=config.share_ffn,
            attention=self._attention,
            pair_mask=False,  # local and block attention apply their own order
            attention_output_dropout=config.attention_output_dropout,
        )
        self.init_weights()

    def _attention(self) -> nn.Module:
        """One layer's attention: local alone, or local and block attention mixed."""
        config = self.config
        dim, heads, dropout = config.hidden_size, config.num_heads, config.attention_dropout
        short = LocalAttention(dim, heads, config.local_window, dropout)
        if not config.block_branch:
            return short
        # from max_len, not from a batch's window: the partition must not depend on padding
        size = config.block_size or math.ceil(math.sqrt(config.max_len))
        long = BlockAttention(dim, heads, size, config.block_pooling, dropout)
        return LongShortAttention(short, long, config.branch_mix)

    def forward(self, item_seq: torch.Tensor) -> torch.Tensor:
        self.check_input(item_seq)
        return self.stack(self.embed(item_seq), item_seq != 0)

    def last_hidden(self, item_seq: torch.Tensor) -> torch.Tensor:
        self.check_input(item_seq)
        return self.stack(self.embed(item_seq), item_seq != 0, last_query_only=True)[:, -1]
