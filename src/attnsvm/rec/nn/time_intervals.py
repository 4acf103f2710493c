"""Event times as attention terms and as inputs: interval biases, a recency gain, a time encoding.

All three read event times ``t`` (B, L) aligned with a left-padded window (seconds; values at
padding are ignored). The pair terms follow each *query's* own time, ``Δ_ij = max(t_i − t_j, 0)``,
so under all-position (causal) training every position sees only intervals to its own past.

- ``IntervalBias``: an additive per-head attention bias ``(B, H, L, L)``, either
  ``−λ_h · log(1 + Δ_ij / unit)`` with ``λ_h = softplus(ρ_h) ≥ 0`` learned per head (``"log"``:
  ALiBi's linear distance penalty, Press et al. 2022, on log time intervals instead of
  positions), or a learned scalar per head and log₂ bucket of Δ (``"bucket"``: T5's bucketed
  relative-position bias, Raffel et al. 2020, on time intervals).
- ``RecencyGain``: a per-pair value gain ``1 + α_h · exp(−Δ_ij / (unit · κ_h))``, ``α_h`` learned
  from 0 (no gain at initialisation), ``κ_h = softplus(·)`` learned, from one unit.
- ``TimeEncoding``: a learned embedding of each event's log₂ time bucket, either the gap since
  the row's previous event (``"gap"``, the first event its own bucket 0) or the age relative to
  the window's last event (``"age"``, which reads the last event's time: last-position training
  only).

Buckets: ``1 + ⌊log₂(1 + seconds / 60)⌋``, capped at ``num_buckets − 1`` (minute resolution at
the short end, doubling intervals beyond); bucket 0 is "no previous event".
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

BIASES = ("log", "bucket")
ENCODINGS = ("gap", "age")


def pair_intervals(times: torch.Tensor) -> torch.Tensor:
    """``(B, L, L)`` seconds ``max(t_i − t_j, 0)``, computed in the times' own precision."""
    return (times[:, :, None] - times[:, None, :]).clamp(min=0)


def time_buckets(seconds: torch.Tensor, num_buckets: int) -> torch.Tensor:
    """Long bucket ids ``1 + ⌊log₂(1 + seconds / 60)⌋``, at most ``num_buckets − 1``."""
    octaves = torch.floor(torch.log2(1 + seconds.clamp(min=0).double() / 60))
    return (1 + octaves).clamp(max=num_buckets - 1).long()


def _inverse_softplus(value: float) -> float:
    return math.log(math.expm1(value))


class IntervalBias(nn.Module):
    """Per-head additive attention bias from the time intervals (module docstring)."""

    def __init__(self, kind: str, num_heads: int, unit: float, num_buckets: int) -> None:
        super().__init__()
        if kind not in BIASES:
            raise ValueError(f"the interval bias must be one of {BIASES}, got {kind!r}")
        self.kind, self.unit, self.num_buckets = kind, unit, num_buckets
        if kind == "log":
            # λ = 0.5 at the start: a 30-day-old item's logit lowered by 1.7
            self.raw_slope = nn.Parameter(torch.full((num_heads,), _inverse_softplus(0.5)))
        else:
            self.bucket_bias = nn.Embedding(num_buckets, num_heads)

    def forward(self, seconds: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``(B, H, L, L)`` bias for ``seconds`` (B, L, L) intervals."""
        if self.kind == "log":
            slope = F.softplus(self.raw_slope).to(dtype)
            distance = torch.log1p(seconds / self.unit).to(dtype)
            return -slope[None, :, None, None] * distance[:, None]
        return self.bucket_bias(time_buckets(seconds, self.num_buckets)).permute(0, 3, 1, 2)


class RecencyGain(nn.Module):
    """Per-head value gain ``1 + α_h exp(−Δ / (unit κ_h))`` for recent keys (module docstring)."""

    def __init__(self, num_heads: int, unit: float) -> None:
        super().__init__()
        self.unit = unit
        self.amplitude = nn.Parameter(torch.zeros(num_heads))
        self.raw_scale = nn.Parameter(torch.full((num_heads,), _inverse_softplus(1.0)))

    def forward(self, seconds: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``(B, H, L, L)`` gain for ``seconds`` (B, L, L) intervals."""
        scale = F.softplus(self.raw_scale).to(dtype)[None, :, None, None]
        units = (seconds / self.unit).to(dtype)[:, None]
        return 1 + self.amplitude.to(dtype)[None, :, None, None] * torch.exp(-units / scale)


class TimeEncoding(nn.Module):
    """A learned embedding of each event's time bucket (module docstring), zero at padding."""

    def __init__(self, kind: str, dim: int, num_buckets: int) -> None:
        super().__init__()
        if kind not in ENCODINGS:
            raise ValueError(f"the time encoding must be one of {ENCODINGS}, got {kind!r}")
        self.kind, self.num_buckets = kind, num_buckets
        self.embedding = nn.Embedding(num_buckets, dim)

    def forward(self, times: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """``(B, L, D)`` for ``times`` and ``valid`` (B, L) of left-padded windows."""
        if self.kind == "age":
            buckets = time_buckets(times[:, -1:] - times, self.num_buckets)
        else:
            buckets = time_buckets(times[:, 1:] - times[:, :-1], self.num_buckets)
            # a row's first event (its left neighbour is padding) has no previous event
            follows_an_event = valid[:, 1:] & valid[:, :-1]
            buckets = F.pad(torch.where(follows_an_event, buckets, 0), (1, 0))
        return self.embedding(buckets) * valid.unsqueeze(-1)
