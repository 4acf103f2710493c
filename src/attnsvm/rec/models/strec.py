"""STRec (Li et al., RecSys 2023): sparse cross-attention over a shrinking set of query positions.

Layer l keeps ``k_l`` of the current tokens as queries; keys and values are all current tokens
(the previous layer's outputs), so the token set shrinks layer by layer down to one token, the
user representation at the last position. Which tokens are kept is decided by *time*::

    s_i = LN_positions(MLP(t_i − t_last)) + ε_i,    ε ~ N(0, 1) in training only
    (the last position is always kept; MLP: 1 → 64 → 1 with tanh)

and the kept tokens stay in chronological order. Each layer is a post-LN block whose attention
queries are the kept tokens (residual on them) with a causal mask by original position, then
an FFN. The official code shrinks 50 → 50 → 20 → 20 → 5 → … → 1 over 8 layers; here
``k_l = max(1, round(L^(1 − l / num_blocks)))`` — geometric from the window length L to 1.

**Timestamps are required.** The selection score is a function of the time gap to the last
event, so ``forward(item_seq, timestamps)`` takes a (B, L) float tensor of event times aligned
with ``item_seq`` (values at padding are ignored). Leave-one-out data carries no time in its
``Sequences``; the caller aligns the interaction timestamps (e.g. ml-100k, ml-latest-small,
yoochoose). The output is one token, so the model trains on last-position targets only and
``forward`` returns ``(B, 1, D)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from attnsvm.rec.models.base import SequentialRecommender, TransformerConfig
from attnsvm.rec.nn.attention import MultiHeadAttention
from attnsvm.rec.nn.dropout import Dropout
from attnsvm.rec.nn.ffn import PointwiseFFN


@dataclass(frozen=True)
class STRecConfig(TransformerConfig):
    ffn_optional: ClassVar[bool] = False  # its own FFN is always there
    num_blocks: int = 3
    max_len: int = 50
    norm: str = "post"
    activation: str = "gelu"
    scale_embeddings: bool = False
    time_hidden: int = 64
    time_scale: float = 86400.0  # seconds per unit of the time gap fed to the MLP (one day)


def query_counts(length: int, num_blocks: int) -> list[int]:
    """Tokens kept by each layer: geometric from ``length`` down to 1."""
    return [max(1, round(length ** (1 - layer / num_blocks))) for layer in range(1, num_blocks + 1)]


class TimeSelector(nn.Module):
    """Scores tokens by their time gap to the last event and keeps the top k (last forced in)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(1, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, gaps: torch.Tensor, valid: torch.Tensor, k: int) -> torch.Tensor:
        """Indices (B, k), ascending, of the kept tokens among ``gaps`` (B, n)."""
        raw = self.mlp(gaps.unsqueeze(-1)).squeeze(-1)
        count = valid.sum(1, keepdim=True).clamp(min=1)
        mean = (raw * valid).sum(1, keepdim=True) / count
        std = (((raw - mean) * valid) ** 2).sum(1, keepdim=True).div(count).add(1e-5).sqrt()
        score = (raw - mean) / std
        if self.training:
            score = score + torch.randn_like(score)
        score = score.masked_fill(~valid, float("-inf"))
        score[:, -1] = float("inf")
        return torch.topk(score, k, dim=1).indices.sort(dim=1).values


class STRecLayer(nn.Module):
    def __init__(self, config: STRecConfig) -> None:
        super().__init__()
        dim = config.hidden_size
        self.selector = TimeSelector(config.time_hidden)
        self.attention = MultiHeadAttention(dim, config.num_heads, config.attention_dropout)
        self.attention_norm = nn.LayerNorm(dim)
        self.ffn = PointwiseFFN(dim, config.ffn_size, config.activation, config.dropout)
        self.ffn_norm = nn.LayerNorm(dim)
        self.dropout = Dropout(config.dropout)

    def forward(self, x, positions, gaps, valid, k: int):
        kept = self.selector(gaps, valid, k)
        gather = kept.unsqueeze(-1).expand(-1, -1, x.shape[-1])
        queries = torch.gather(x, 1, gather)
        query_positions = torch.gather(positions, 1, kept)
        earlier = positions[:, None, :] <= query_positions[:, :, None]
        # a query may always read itself, so a padding query kept for want of events stays finite
        itself = positions[:, None, :] == query_positions[:, :, None]
        keep_mask = (earlier & valid[:, None, :]) | itself
        attended = self.attention(queries, x, keep_mask[:, None], key_positions=positions)
        out = self.attention_norm(queries + self.dropout(attended))
        return self.ffn_norm(out + self.ffn(out)), kept


class STRec(SequentialRecommender):
    objective = "last"
    config_class = STRecConfig
    extra_inputs = ("timestamps",)

    def __init__(self, num_items: int, config: STRecConfig | None = None) -> None:
        config = config or STRecConfig()
        super().__init__(num_items, config)
        self.build_embeddings(layer_norm=True)
        self.layers = nn.ModuleList(STRecLayer(config) for _ in range(config.num_blocks))
        self.init_weights()

    def forward(
        self, item_seq: torch.Tensor, timestamps: torch.Tensor | None = None
    ) -> torch.Tensor:
        self.check_input(item_seq)
        if timestamps is None or timestamps.shape != item_seq.shape:
            got = None if timestamps is None else tuple(timestamps.shape)
            raise ValueError(
                f"STRec needs timestamps (B, L) aligned with item_seq {tuple(item_seq.shape)}, "
                f"got {got}: its query selection scores each event by its time gap to the last"
            )
        batch, length = item_seq.shape
        x = self.embed(item_seq)
        valid = item_seq != 0
        gaps = (timestamps - timestamps[:, -1:]).to(x.dtype) / self.config.time_scale
        positions = torch.arange(length, device=item_seq.device).expand(batch, -1)
        for layer, k in zip(self.layers, query_counts(length, len(self.layers)), strict=True):
            x, kept = layer(x, positions, gaps, valid, k)
            positions, gaps, valid = (torch.gather(t, 1, kept) for t in (positions, gaps, valid))
        return x
