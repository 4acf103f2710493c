"""BSARec (Shin et al., AAAI 2024): a frequency-domain inductive bias beside self-attention.

Each layer mixes a Fourier filter with ordinary attention, then a GELU FFN::

    LP(x)  = irfft(rfft(x over positions) with bins ≥ c//2 + 1 zeroed)      (low-pass)
    DSP(x) = LN(x + dropout(LP(x) + β² ⊙ (x − LP(x))))                       (β learnable, per dim)
    GSP(x) = LN(x + dropout(MHSA(x)))                                        (causal attention)
    h      = α · DSP(x) + (1 − α) · GSP(x);     out = LN(h + FFN(h))

as in the official ``FrequencyLayer``/``BSARecLayer``/``BSARecBlock``. Inputs are
``dropout(LN(E[s] + P))``; the last position scores the next item against the tied item table.

**Objective.** The FFT mixes every position with every other, future ones included, so training
all positions on their shifted targets (SASRec's objective) would let position t read its own
target at t + 1. BSARec is therefore trained only on last-position targets of every prefix
(``objective = "last"``, the official ``calculate_loss``) and its config refuses ``"causal"``.

Defaults are the official Beauty run (``BSARec_Beauty_best.log``): α = 0.7, c = 5, d = 64,
2 layers, 1 head, dropout 0.5, max_len 50, trained with full softmax CE.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from attnsvm.rec.models.base import SequentialRecommender, TransformerConfig
from attnsvm.rec.nn.attention import MultiHeadAttention, attention_mask
from attnsvm.rec.nn.dropout import Dropout
from attnsvm.rec.nn.ffn import PointwiseFFN


@dataclass(frozen=True)
class BSARecConfig(TransformerConfig):
    ffn_optional: ClassVar[bool] = False  # its own FFN is always there
    ffn_size: int = 256
    dropout: float = 0.5
    attention_dropout: float = 0.5
    max_len: int = 50
    norm: str = "post"
    activation: str = "gelu"
    scale_embeddings: bool = False
    alpha: float = 0.7  # weight of the frequency branch
    cutoff: int = 5  # c: the low-pass keeps the first c // 2 + 1 frequency bins
    objective: str = "last"

    def __post_init__(self) -> None:
        super().__post_init__()
        self._range("alpha", 0.0, 1.0)
        if self.cutoff < 1:
            raise ValueError(f"BSARecConfig.cutoff must be ≥ 1, got {self.cutoff}")
        if self.objective != "last":
            raise ValueError(
                f"BSARecConfig.objective must be 'last', got {self.objective!r}: the FFT filter "
                "mixes future positions into every output, so all-position (causal) targets "
                "would put each target inside its own input; train on last-position targets"
            )


class FrequencyFilter(nn.Module):
    """``DSP(x)``: low-pass plus a learnable per-dimension β² times the high-pass, residual, LN."""

    def __init__(self, dim: int, cutoff: int, dropout: float) -> None:
        super().__init__()
        self.keep_bins = cutoff // 2 + 1
        self.sqrt_beta = nn.Parameter(torch.randn(1, 1, dim))
        self.dropout = Dropout(dropout)
        self.norm = nn.LayerNorm(dim)

    def low_pass(self, x: torch.Tensor) -> torch.Tensor:
        spectrum = torch.fft.rfft(x, dim=1, norm="ortho")
        spectrum[:, self.keep_bins :] = 0
        return torch.fft.irfft(spectrum, n=x.shape[1], dim=1, norm="ortho")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        low = self.low_pass(x)
        mixed = low + self.sqrt_beta**2 * (x - low)
        return self.norm(x + self.dropout(mixed))


class BSARecLayer(nn.Module):
    def __init__(self, config: BSARecConfig) -> None:
        super().__init__()
        dim = config.hidden_size
        self.alpha = config.alpha
        self.filter = FrequencyFilter(dim, config.cutoff, config.dropout)
        self.attention = MultiHeadAttention(dim, config.num_heads, config.attention_dropout)
        self.attention_norm = nn.LayerNorm(dim)
        self.ffn = PointwiseFFN(dim, config.ffn_size, config.activation, config.dropout)
        self.ffn_norm = nn.LayerNorm(dim)
        self.dropout = Dropout(config.dropout)

    def forward(self, x: torch.Tensor, keep_mask: torch.Tensor) -> torch.Tensor:
        attention_branch = self.attention_norm(x + self.dropout(self.attention(x, x, keep_mask)))
        h = self.alpha * self.filter(x) + (1 - self.alpha) * attention_branch
        return self.ffn_norm(h + self.ffn(h))


class BSARec(SequentialRecommender):
    objective = "last"
    config_class = BSARecConfig

    def __init__(self, num_items: int, config: BSARecConfig | None = None) -> None:
        config = config or BSARecConfig()
        super().__init__(num_items, config)
        self.build_embeddings(layer_norm=True)
        self.layers = nn.ModuleList(BSARecLayer(config) for _ in range(config.num_blocks))
        self.init_weights()

    def forward(self, item_seq: torch.Tensor) -> torch.Tensor:
        self.check_input(item_seq)
        valid = item_seq != 0
        keep_mask = attention_mask(valid, causal=True)
        x = self.embed(item_seq)
        for layer in self.layers:
            x = layer(x, keep_mask)
        return x * valid.unsqueeze(-1).to(x.dtype)
