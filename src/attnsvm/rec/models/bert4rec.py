"""BERT4Rec (Sun et al., CIKM 2019): a bidirectional encoder trained by the cloze task.

``x = dropout(LN(E[s] + P))`` → ``num_blocks`` bidirectional post-LN blocks (GELU FFN) → head
``LN(GELU(W h + b))`` (the original ``get_masked_lm_output``) → logits ``h · E_i + b_i`` with the
tied item table and an output bias. Training replaces a random subset of items by the mask token
``num_items + 1`` and predicts them (``mask_items``); at inference the mask token is appended
after the history and its prediction is the next item.

Defaults follow the original ML-1M run and Klenitskiy & Vasilev's config: d = 64, 2 blocks,
2 heads, FFN 256, dropout 0.1, max_len 200, mask probability 0.2; masked items are always replaced
by the mask token (no BERT-style 10 % random / 10 % kept).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attnsvm.rec.models.base import SequentialRecommender, TransformerConfig


@dataclass(frozen=True)
class BERT4RecConfig(TransformerConfig):
    num_heads: int = 2
    ffn_size: int = 256
    norm: str = "post"
    activation: str = "gelu"
    scale_embeddings: bool = False
    head: bool = True  # dense → GELU → LayerNorm before the output table
    output_bias: bool = True
    mask_prob: float = 0.2
    force_last_mask_prob: float = 0.0  # probability that a sequence has only its last item masked

    def __post_init__(self) -> None:
        super().__post_init__()
        self._range("mask_prob", 0.0, 1.0)
        self._range("force_last_mask_prob", 0.0, 1.0)


class BERT4Rec(SequentialRecommender):
    objective = "cloze"
    config_class = BERT4RecConfig

    def __init__(self, num_items: int, config: BERT4RecConfig | None = None) -> None:
        config = config or BERT4RecConfig()
        super().__init__(num_items, config)
        self.mask_token = num_items + 1
        self.build_embeddings(layer_norm=True, num_special=1, output_bias=config.output_bias)
        self.encoder = self.build_encoder(causal=False)
        d = config.hidden_size
        self.head = (
            nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d)) if config.head else None
        )
        self.init_weights()

    def forward(self, item_seq: torch.Tensor) -> torch.Tensor:
        self.check_input(item_seq)
        valid = item_seq != 0
        hidden = self.encoder(self.embed(item_seq), valid)
        if self.head is not None:
            hidden = self.head(hidden) * valid.unsqueeze(-1).to(hidden.dtype)
        return hidden

    def scoring_input(self, item_seq: torch.Tensor) -> torch.Tensor:
        """Append the mask token, dropping the oldest column when the sequence is full."""
        if item_seq.shape[1] == self.config.max_len:
            item_seq = item_seq[:, 1:]
        mask_column = torch.full_like(item_seq[:, :1], self.mask_token)
        return torch.cat([item_seq, mask_column], dim=1)

    def mask_items(
        self, item_seq: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Cloze corruption: ``(masked_seq, targets)``, targets 0 where nothing is predicted.

        Each real item is masked with probability ``mask_prob``; a sequence where none was drawn
        gets one uniformly chosen item masked. With probability ``force_last_mask_prob`` a
        sequence instead has only its last item masked (the inference situation).
        """
        valid = item_seq != 0
        noise = torch.rand(item_seq.shape, generator=generator, device=item_seq.device)
        masked = valid & (noise < self.config.mask_prob)
        fallback = noise.masked_fill(~valid, -1.0).argmax(dim=1)
        empty = ~masked.any(dim=1) & valid.any(dim=1)
        masked[empty, fallback[empty]] = True
        force = torch.rand(item_seq.shape[0], generator=generator, device=item_seq.device)
        force_last = force < self.config.force_last_mask_prob
        masked[force_last] = False
        masked[force_last, -1] = valid[force_last, -1]
        targets = torch.where(masked, item_seq, torch.zeros_like(item_seq))
        return item_seq.masked_fill(masked, self.mask_token), targets
