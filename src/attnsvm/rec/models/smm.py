"""Transformer-SMM (Redjdal, Pinto & Desmarais, "Optimizing Encoder-Only Transformers for
Session-Based Recommendation Systems", arXiv 2410.11150): a bidirectional encoder trained by
sequential masked modelling on the windows of anonymous sessions.

The paper's (from its abstract and a third-party summary; no code was found, the tables were
not readable): a BERT-style encoder; **sequential masked modelling** = sliding-window
augmentation of each session + masking of the token after the last observed item, whose output
predicts that item; **weight tying**, **pre-LayerNorm** and **contextual position encoding**
(CoPE) as architectural changes; P@20 / MRR@20 on the SR-GNN splits.

Our reading (config switches where it is uncertain):

- Windows, stride 1: every prefix ``s_1 … s_k`` of a training session (its last
  ``max_len − 1`` items) is one example, followed by the mask token ``num_items + 1``; the
  target is ``s_{k+1}``. This is the platform's ``"last"`` objective (``data/batches.py``: every
  prefix predicts its next item) with ``scoring_input`` appending the mask token, which the
  trainer applies to training windows as the evaluator does to histories. CE over the whole
  catalogue at the mask position; no random masking (BERT4Rec's cloze is the ablation).
- ``sep``: a ``[SEP]`` token (``num_items + 2``) after the mask, as a BERT input ends; it is
  appended inside ``forward`` and its state is not returned. Off by default. No ``[CLS]``: its
  output is not used for the masked-item prediction.
- ``cope``: CoPE in every attention layer (``attnsvm.rec.nn.cope``), with ``cope_positions``
  integer positions (0: ``max_len``). Learned absolute positions stay unless ``position =
  "none"``. Off by default.
- ``head``: BERT's masked-LM transform (dense → GELU → LayerNorm) before the tied output table,
  with an output bias (``BertForMaskedLM``'s); on by default.

Defaults: d = 64, 2 pre-LN blocks, 2 heads, FFN 256, GELU, dropout 0.1, window 20 tokens.

Cost (issue 33): every prefix is its own window (the encoder is bidirectional within the
prefix, so no state is shared between a session's prefixes and one pass per session would
compute another function); training runs the last layer for the mask token's query alone
(``trains_last_hidden``), the trainer cuts the padding (padding-free unless positions count from
the start), and the full CE over the catalogue is the rest of the step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attnsvm.rec.models.base import SequentialRecommender, TransformerConfig
from attnsvm.rec.nn.cope import CoPEAttention


@dataclass(frozen=True)
class SMMConfig(TransformerConfig):
    num_heads: int = 2
    ffn_size: int = 256
    norm: str = "pre"
    activation: str = "gelu"
    scale_embeddings: bool = False
    max_len: int = 20  # tokens, the mask (and [SEP]) included
    head: bool = True
    output_bias: bool = True
    sep: bool = False
    cope: bool = False
    cope_positions: int = 0  # CoPE's integer positions; 0: max_len

    def __post_init__(self) -> None:
        super().__post_init__()
        smallest = 3 if self.sep else 2
        if self.max_len < smallest:
            raise ValueError(
                f"SMMConfig.max_len must be ≥ {smallest} (an item, the mask"
                f"{', [SEP]' if self.sep else ''}), got {self.max_len}"
            )
        if self.cope_positions < 0 or self.cope_positions == 1:
            raise ValueError(
                f"SMMConfig.cope_positions must be 0 (max_len) or ≥ 2, got {self.cope_positions}"
            )


class SMM(SequentialRecommender):
    objective = "last"
    config_class = SMMConfig
    # the loss reads the mask token's state alone: training runs the last layer for its query
    # only (``training_forward``), as scoring does
    trains_last_hidden = True

    def __init__(self, num_items: int, config: SMMConfig | None = None) -> None:
        config = config or SMMConfig()
        super().__init__(num_items, config)
        self.mask_token = num_items + 1
        self.sep_token = num_items + 2 if config.sep else None
        # outputs do not depend on left padding unless positions are counted from the start
        self.padding_free = config.position != "learned_from_start"
        self.build_embeddings(
            layer_norm=True, num_special=2 if config.sep else 1, output_bias=config.output_bias
        )
        positions = config.cope_positions or config.max_len

        def attention() -> nn.Module:
            heads, d = config.num_heads, config.hidden_size
            return CoPEAttention(d, heads, config.attention_dropout, positions)

        self.encoder = self.build_encoder(
            causal=False, attention=attention if config.cope else None
        )
        d = config.hidden_size
        self.head = (
            nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d)) if config.head else None
        )
        self.init_weights()

    def scoring_input(self, item_seq: torch.Tensor) -> torch.Tensor:
        """The window's items, then the mask token, dropping the oldest columns so that the
        tokens (with ``[SEP]``) fit in ``max_len``."""
        room = self.config.max_len - (2 if self.sep_token is not None else 1)
        item_seq = item_seq[:, -room:] if item_seq.shape[1] > room else item_seq
        mask_column = torch.full_like(item_seq[:, :1], self.mask_token)
        return torch.cat([item_seq, mask_column], dim=1)

    def _encode(self, item_seq: torch.Tensor, last_query_only: bool) -> torch.Tensor:
        self.check_input(item_seq)
        tokens = item_seq
        if self.sep_token is not None:
            if tokens.shape[1] >= self.config.max_len:
                raise ValueError(f"with [SEP], item_seq must be shorter than {self.config.max_len}")
            tokens = torch.cat([tokens, torch.full_like(tokens[:, :1], self.sep_token)], dim=1)
            last_query_only = False  # the last token is [SEP]: its query is not the one needed
        valid = tokens != 0
        hidden = self.encoder(self.embed(tokens), valid, last_query_only=last_query_only)
        if self.sep_token is not None:
            hidden, valid = hidden[:, :-1], valid[:, :-1]
        elif last_query_only:
            valid = valid[:, -1:]
        if self.head is not None:
            hidden = self.head(hidden) * valid.unsqueeze(-1).to(hidden.dtype)
        return hidden

    def forward(self, item_seq: torch.Tensor) -> torch.Tensor:
        """Hidden states (B, L, D) of ``item_seq`` (which ends with the mask token where it is a
        training window or a scored history: ``scoring_input``), zero at padding."""
        return self._encode(item_seq, last_query_only=False)

    def last_hidden(self, item_seq: torch.Tensor) -> torch.Tensor:
        return self._encode(item_seq, last_query_only=True)[:, -1]
