"""BSARec (Shin et al., AAAI 2024): a frequency-domain inductive bias beside self-attention.

Each layer mixes a Fourier filter with ordinary attention, then a GELU FFN::

    LP(x)  = irfft(rfft(x over positions) with bins ≥ c//2 + 1 zeroed)      (low-pass)
           = U Uᵀ x   (U: an orthonormal basis of the kept frequencies; computed this way)
    DSP(x) = LN(x + dropout(LP(x) + β² ⊙ (x − LP(x))))                       (β learnable, per dim)
    GSP(x) = LN(x + dropout(MHSA(x)))                                        (causal attention)
    h      = α · DSP(x) + (1 − α) · GSP(x);     out = LN(h + FFN(h))

as in the official ``FrequencyLayer``/``BSARecLayer``/``BSARecBlock``. Inputs are
``dropout(LN(E[s] + P))``; the last position scores the next item against the tied item table.

**Objective.** The FFT mixes every position with every other, future ones included, so training
all positions on their shifted targets (SASRec's objective) would let position t read its own
target at t + 1. BSARec is therefore trained only on last-position targets of every prefix
(``objective = "last"``, the official ``calculate_loss``) and its config refuses ``"causal"``.

**Last query only.** The loss and the scores read the last position of the last layer alone:
``last_hidden`` computes that layer's attention, filter output, FFN and norms for the last query
(every position still a key, and still in the Fourier filter's input), and the trainer trains
through it (``trains_last_hidden``): the same function as ``forward(…)[:, -1]``, one query of
the last layer instead of L. BSARec is not ``padding_free``: the filter runs over the whole
window, padding included, so its frequencies depend on the window's width.

Defaults are the official Beauty run (``BSARec_Beauty_best.log``): α = 0.7, c = 5, d = 64,
2 layers, 1 head, dropout 0.5, max_len 50, trained with full softmax CE.
"""

from __future__ import annotations

import math
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


def low_pass_basis(length: int, keep_bins: int) -> torch.Tensor:
    """``U`` (L, r), float64, orthonormal columns spanning the frequencies the low-pass keeps:
    the constant, the cosine and sine of each kept 0 < f < L/2, and (−1)^t where f = L/2 is
    kept. ``U Uᵀ x = irfft(rfft(x) with bins ≥ keep_bins zeroed)`` (both "ortho"): the official
    filter as r ≤ 2·keep_bins − 1 products over positions instead of two FFTs."""
    t = torch.arange(length, dtype=torch.float64)
    columns = [torch.full((length,), length**-0.5, dtype=torch.float64)]
    for f in range(1, min(keep_bins, length // 2 + 1)):
        if 2 * f == length:  # the Nyquist bin: real, one column
            columns.append((1 - 2 * (t % 2)) / math.sqrt(length))
        else:
            angle, scale = 2 * math.pi * f * t / length, math.sqrt(2 / length)
            columns += [scale * torch.cos(angle), scale * torch.sin(angle)]
    return torch.stack(columns, dim=1)


class FrequencyFilter(nn.Module):
    """``DSP(x)``: low-pass plus a learnable per-dimension β² times the high-pass, residual, LN."""

    def __init__(self, dim: int, cutoff: int, dropout: float) -> None:
        super().__init__()
        self.keep_bins = cutoff // 2 + 1
        self.sqrt_beta = nn.Parameter(torch.randn(1, 1, dim))
        self.dropout = Dropout(dropout)
        self.norm = nn.LayerNorm(dim)
        self._bases: dict[tuple, torch.Tensor] = {}  # per (length, dtype, device): a constant

    def low_pass(self, x: torch.Tensor, queries: slice = slice(None)) -> torch.Tensor:
        """``LP(x)`` (B, L, D) over positions, at the positions ``queries``."""
        key = (x.shape[1], x.dtype, x.device)
        if key not in self._bases:
            basis = low_pass_basis(x.shape[1], self.keep_bins)
            self._bases[key] = basis.to(device=x.device, dtype=x.dtype)
        basis = self._bases[key]
        return basis[queries] @ (basis.T @ x)

    def forward(self, x: torch.Tensor, queries: slice = slice(None)) -> torch.Tensor:
        """``DSP(x)`` at the positions ``queries`` (the low-pass still reads every position)."""
        low = self.low_pass(x, queries)
        x = x[:, queries]
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

    def forward(
        self, x: torch.Tensor, keep_mask: torch.Tensor, last_query_only: bool = False
    ) -> torch.Tensor:
        """(B, L, D), or (B, 1, D) of the last position alone with ``last_query_only``."""
        queries = slice(-1, None) if last_query_only else slice(None)
        attended = self.attention(x[:, queries], x, keep_mask[..., queries, :])
        attention_branch = self.attention_norm(x[:, queries] + self.dropout(attended))
        h = self.alpha * self.filter(x, queries) + (1 - self.alpha) * attention_branch
        return self.ffn_norm(h + self.ffn(h))


class BSARec(SequentialRecommender):
    objective = "last"
    config_class = BSARecConfig
    trains_last_hidden = True

    def __init__(self, num_items: int, config: BSARecConfig | None = None) -> None:
        config = config or BSARecConfig()
        super().__init__(num_items, config)
        self.build_embeddings(layer_norm=True)
        self.layers = nn.ModuleList(BSARecLayer(config) for _ in range(config.num_blocks))
        self.init_weights()

    def forward(self, item_seq: torch.Tensor) -> torch.Tensor:
        return self._encode(item_seq, last_query_only=False)

    def last_hidden(self, item_seq: torch.Tensor) -> torch.Tensor:
        return self._encode(item_seq, last_query_only=True)[:, -1]

    def _encode(self, item_seq: torch.Tensor, last_query_only: bool) -> torch.Tensor:
        """(B, L, D) hidden states, zero at padding; (B, 1, D) of the last position alone with
        ``last_query_only`` (the last layer computes one query)."""
        self.check_input(item_seq)
        valid = item_seq != 0
        keep_mask = attention_mask(valid, causal=True)
        x = self.embed(item_seq)
        for index, layer in enumerate(self.layers):
            x = layer(x, keep_mask, last_query_only and index == len(self.layers) - 1)
        if last_query_only:
            valid = valid[:, -1:]
        return x * valid.unsqueeze(-1).to(x.dtype)
