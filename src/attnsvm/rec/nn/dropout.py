"""Inverted dropout with a cheaper random draw than torch's CPU kernel.

``y = x · m / (1 − p)`` with ``m_i ~ Bernoulli(1 − p)`` independently, as ``torch.nn.Dropout``.
torch's CPU dropout draws its mask with ``bernoulli_``, 7–8 ns per element on this project's
build machine (AVX2, 2 cores): a fifth of a SASRec+ training step on ML-1M went there. Drawing
31-bit uniform integers with ``random_`` and comparing them with ``p · 2³¹`` gives the same
distribution (``p`` rounded to a multiple of 2⁻³¹) in about half the time, forward and backward
together. The mask comes from torch's global generator, so ``torch.manual_seed`` fixes it and a
saved RNG state replays it.
"""

from __future__ import annotations

import torch
from torch import nn

_RANGE = 2**31  # random_() on int32 draws uniformly from [0, 2³¹)


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``x`` with each element zeroed with probability ``p`` and the rest scaled by 1/(1 − p)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must lie in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    draws = torch.empty(x.shape, dtype=torch.int32, device=x.device).random_()
    # the scaled keep-mask, not a boolean one: autograd saves it for the backward product
    scaled_keep = draws.ge_(round(p * _RANGE)).to(x.dtype).mul_(1.0 / (1.0 - p))
    return x * scaled_keep


class Dropout(nn.Dropout):
    """``torch.nn.Dropout`` (same ``p``, same train/eval switch) drawing its mask as ``dropout``."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)
