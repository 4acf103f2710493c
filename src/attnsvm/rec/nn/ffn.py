"""Point-wise feed-forward network: the same two-layer MLP applied at every position."""

from __future__ import annotations

import torch
from torch import nn

from attnsvm.rec.nn.dropout import Dropout

# "swish" is RecBole's name for SiLU, x·σ(x) (AdaMCT's official configs use it)
ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "swish": nn.SiLU}


class PointwiseFFN(nn.Module):
    """``dropout(W₂ · dropout(act(W₁ x + b₁)) + b₂)`` (SASRec's two 1×1 convolutions)."""

    def __init__(self, dim: int, hidden: int, activation: str = "relu", dropout: float = 0.0):
        super().__init__()
        if hidden < 1:
            raise ValueError(f"the FFN's hidden size must be ≥ 1, got {hidden}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}")
        self.inner = nn.Linear(dim, hidden)
        self.activation = ACTIVATIONS[activation]()
        self.outer = nn.Linear(hidden, dim)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.outer(self.dropout(self.activation(self.inner(x)))))
