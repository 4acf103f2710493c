"""ConvFormer (Wang et al., 2023): LighTCN, an attention-free large-kernel convolution mixer.

Self-attention is replaced by a depth-wise (one filter per channel) 1-D convolution whose
kernel covers most of the window (the official runs use 30–45 for max_len 50)::

    y_t = Σ_{m=0}^{k−1} w_{k−1−m} ⊙ x_{t−m}        (x_{t<0} = 0)
    x  ← LN(x + dropout(y));   x ← LN(x + FFN(x))

The paper's three criteria — order sensitivity, a large receptive field, a light model — are
the kernel's position-specific weights, its length and its d·k parameters.

**Causality.** The official code pads on the left circularly or by reflection, which wraps the
end of the window into its first outputs; with per-position targets that lets early positions
see later items. Here the padding is zero, so output t reads only ``x_{≤t}`` and the model can
be trained on all positions (``objective = "causal"``, as the official BCE trainer does).

**FFT path.** With ``fft=True`` the same convolution is computed as
``irfft(rfft(x, n) · rfft(h, n))[:L]`` with ``n ≥ L + k − 1`` (no wrap-around), O(L log L)
instead of O(L k) — the official ``FConvLayer`` for long kernels. Both paths agree to float
precision (tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from attnsvm.rec.models.base import SequentialRecommender, TransformerConfig
from attnsvm.rec.nn.dropout import Dropout
from attnsvm.rec.nn.ffn import PointwiseFFN


@dataclass(frozen=True)
class ConvFormerConfig(TransformerConfig):
    ffn_optional: ClassVar[bool] = False  # its own FFN is always there
    ffn_size: int = 256
    dropout: float = 0.5
    attention_dropout: float = 0.0  # unused: there is no attention
    max_len: int = 50
    norm: str = "post"
    activation: str = "gelu"
    scale_embeddings: bool = False
    kernel_size: int = 40
    kernel_init_std: float = 5e-3  # the official small init of the large kernel
    fft: bool = False
    objective: str = "causal"  # "causal" | "last"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.kernel_size < 1:
            raise ValueError(f"ConvFormerConfig.kernel_size must be ≥ 1, got {self.kernel_size}")
        self._choice("objective", ("causal", "last"))


class CausalDepthwiseConv(nn.Module):
    """Per-channel causal convolution with a length-k kernel, direct or through the FFT."""

    def __init__(self, dim: int, kernel_size: int, init_std: float, fft: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim, 1, kernel_size) * init_std)
        self.fft = fft

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (B, L, D) → (B, L, D)."""
        kernel = self.weight.shape[-1]
        if not self.fft:
            padded = F.pad(x.transpose(1, 2), (kernel - 1, 0))
            return F.conv1d(padded, self.weight, groups=x.shape[-1]).transpose(1, 2)
        length = x.shape[1]
        n = length + kernel - 1
        impulse = self.weight[:, 0].flip(-1).T  # h_m = w_{k−1−m}, (k, D)
        spectrum = torch.fft.rfft(x, n=n, dim=1) * torch.fft.rfft(impulse, n=n, dim=0)
        return torch.fft.irfft(spectrum, n=n, dim=1)[:, :length]


class ConvFormerLayer(nn.Module):
    def __init__(self, config: ConvFormerConfig) -> None:
        super().__init__()
        dim = config.hidden_size
        self.conv = CausalDepthwiseConv(dim, config.kernel_size, config.kernel_init_std, config.fft)
        self.conv_norm = nn.LayerNorm(dim)
        self.ffn = PointwiseFFN(dim, config.ffn_size, config.activation, config.dropout)
        self.ffn_norm = nn.LayerNorm(dim)
        self.dropout = Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_norm(x + self.dropout(self.conv(x)))
        return self.ffn_norm(x + self.ffn(x))


class ConvFormer(SequentialRecommender):
    objective = "causal"
    config_class = ConvFormerConfig
    padding_free = True

    def __init__(self, num_items: int, config: ConvFormerConfig | None = None) -> None:
        config = config or ConvFormerConfig()
        super().__init__(num_items, config)
        self.objective = config.objective
        self.build_embeddings(layer_norm=True)
        self.layers = nn.ModuleList(ConvFormerLayer(config) for _ in range(config.num_blocks))
        self.init_weights()

    def forward(self, item_seq: torch.Tensor) -> torch.Tensor:
        self.check_input(item_seq)
        valid = (item_seq != 0).unsqueeze(-1).to(torch.get_default_dtype())
        x = self.embed(item_seq)
        for layer in self.layers:
            # padding stays zero, so a padded window reads exactly like zero-padded history
            x = layer(x) * valid.to(x.dtype)
        return x
