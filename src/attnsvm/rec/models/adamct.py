"""AdaMCT (Jiang et al., CIKM 2023): attention and a local CNN mixed per user by a learned gate.

Per layer, as the official ``adamct.py``::

    x_en = LN(dropout(W x))
    g    = SE_g(MHSA(x_en))                           global branch (causal attention)
    l    = SE_l(act(LN(Conv1d_k(x_en))))              local branch, centred kernel k
    α    = σ(w · mean_positions(x))  ∈ ℝ^{B×1×1}      layer-aware adaptive mixture, per user
    out  = LN(dropout(W_o((1 − α) g + α l)) + x)

``SE`` is squeeze-excitation over *positions*: ``a = σ(W₂ ReLU(W₁ mean_channels(h)))`` ∈ ℝ^L
(L → L / r → L), ``h ← h ⊙ a``; a sigmoid, not a softmax, so several items can be active at
once. SE acts on the position axis, so the official layer reads a fixed length, ``max_len``,
left-padded. Both branches are zero at padding, so a padding column adds nothing to the squeeze
and its excitation multiplies zero: a window of ``w ≤ max_len`` columns uses the last ``w``
columns of ``W₁`` and rows of ``W₂``, and the mean over positions in α divides by ``max_len``.
The model is therefore ``padding_free`` (every real position reads the same at any window
width), and the trainer cuts each batch into length groups of similar rows, each at its own
width: the official batch of 2048 runs as 4 micro-batches of 512 rows (``train.length_groups``).

**Objective.** The centred convolution and the SE gate read later positions, so only the last
position may be trained (``objective = "last"``, the official CE at the last position); the
config refuses ``"causal"``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnsvm.rec.models.base import SequentialRecommender, TransformerConfig
from attnsvm.rec.nn.attention import MultiHeadAttention, attention_mask
from attnsvm.rec.nn.dropout import Dropout
from attnsvm.rec.nn.ffn import ACTIVATIONS


@dataclass(frozen=True)
class AdaMCTConfig(TransformerConfig):
    dropout: float = 0.5
    attention_dropout: float = 0.5
    max_len: int = 50
    activation: str = "gelu"
    scale_embeddings: bool = False
    kernel_size: int = 3
    se_ratio: int = 2  # squeeze-excitation bottleneck L → L / r → L
    objective: str = "last"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.kernel_size < 1 or self.kernel_size % 2 == 0:
            raise ValueError(
                f"AdaMCTConfig.kernel_size must be odd and ≥ 1 (a centred kernel), "
                f"got {self.kernel_size}"
            )
        if not 1 <= self.se_ratio <= self.max_len:
            raise ValueError(f"AdaMCTConfig.se_ratio must lie in [1, max_len], got {self.se_ratio}")
        if self.objective != "last":
            raise ValueError(
                f"AdaMCTConfig.objective must be 'last', got {self.objective!r}: the centred "
                "convolution and the position-wise squeeze-excitation read later items, so "
                "all-position (causal) targets would leak; train on last-position targets"
            )


class PositionSqueezeExcitation(nn.Module):
    def __init__(self, length: int, ratio: int) -> None:
        super().__init__()
        self.squeeze = nn.Linear(length, max(1, length // ratio))
        self.excite = nn.Linear(max(1, length // ratio), length)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """``h`` (B, w, D), zero at padding, the last ``w`` of ``max_len`` positions: the columns
        left of it would be zero padding, which the squeeze ignores and no output reads."""
        width = h.shape[1]
        squeezed = F.relu(
            F.linear(h.mean(dim=-1), self.squeeze.weight[:, -width:], self.squeeze.bias)
        )
        weights = torch.sigmoid(
            F.linear(squeezed, self.excite.weight[-width:], self.excite.bias[-width:])
        )
        return h * weights.unsqueeze(-1)


class AdaMCTLayer(nn.Module):
    def __init__(self, config: AdaMCTConfig) -> None:
        super().__init__()
        dim, length = config.hidden_size, config.max_len
        self.max_len = length
        self.enter = nn.Linear(dim, dim)
        self.enter_norm = nn.LayerNorm(dim)
        self.attention = MultiHeadAttention(dim, config.num_heads, config.attention_dropout)
        self.conv = nn.Conv1d(dim, dim, config.kernel_size, padding=config.kernel_size // 2)
        self.conv_norm = nn.LayerNorm(dim)
        self.activation = ACTIVATIONS[config.activation]()
        self.global_se = PositionSqueezeExcitation(length, config.se_ratio)
        self.local_se = PositionSqueezeExcitation(length, config.se_ratio)
        self.mixture = nn.Linear(dim, 1)
        self.out = nn.Linear(dim, dim)
        self.out_norm = nn.LayerNorm(dim)
        self.dropout = Dropout(config.dropout)

    def forward(self, x, keep_mask, valid):
        x_en = self.enter_norm(self.dropout(self.enter(x))) * valid
        global_branch = self.global_se(self.attention(x_en, x_en, keep_mask) * valid)
        local = self.conv(x_en.transpose(1, 2)).transpose(1, 2)
        local_branch = self.local_se(self.activation(self.conv_norm(local)) * valid)
        # the mean over the official max_len positions: x is zero at padding
        alpha = torch.sigmoid(self.mixture(x.sum(dim=1, keepdim=True) / self.max_len))  # (B,1,1)
        mixed = (1 - alpha) * global_branch + alpha * local_branch
        return self.out_norm(self.dropout(self.out(mixed)) + x) * valid


class AdaMCT(SequentialRecommender):
    objective = "last"
    config_class = AdaMCTConfig
    padding_free = True

    def __init__(self, num_items: int, config: AdaMCTConfig | None = None) -> None:
        config = config or AdaMCTConfig()
        super().__init__(num_items, config)
        self.build_embeddings(layer_norm=True)
        self.layers = nn.ModuleList(AdaMCTLayer(config) for _ in range(config.num_blocks))
        self.init_weights()

    def forward(self, item_seq: torch.Tensor) -> torch.Tensor:
        self.check_input(item_seq)
        keep_mask = attention_mask(item_seq != 0, causal=True)
        x = self.embed(item_seq)
        valid = (item_seq != 0).unsqueeze(-1).to(x.dtype)
        for layer in self.layers:
            x = layer(x, keep_mask, valid)
        return x
