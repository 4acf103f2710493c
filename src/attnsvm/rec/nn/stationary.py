"""Series stationarisation and de-stationary attention (Liu et al., "Non-stationary Transformers",
NeurIPS 2022; official code thuml/Nonstationary_Transformers), for left-padded item windows.

The official model, on a series ``X`` (B, S, E):

    μ = mean_t X,  σ = sqrt(var_t X + 1e-5)          (per series and channel; detached)
    X' = (X − μ) / σ                                  series stationarisation
    log τ = MLP([Conv(X) ; σ]),   Δ = MLP([Conv(X) ; μ]) ∈ ℝ^S      (``Projector``)
    A = softmax((τ · Q Kᵀ + 1 Δᵀ) / √d_h)             de-stationary attention, every layer
    Y = σ ⊙ Y' + μ                                    de-normalisation of the output

``Conv`` is the official ``series_conv``: a ``Conv1d`` whose *input channels are the S time
steps*, one output channel, kernel 3 with circular padding over the E features, no bias: each
time step has its own 3-tap kernel over the features and the steps are summed. The MLP has
ReLU hidden layers (official default 2 × 128) and a bias-free output layer.

**Our adaptation to windows** (what is not in the official code):

- only real (non-padding) positions count in μ, σ and the conv sum; the time-step kernels and
  Δ's outputs are indexed from the right of the window (the newest item is always the last
  column), so the outputs at real positions do not depend on how much left padding there is;
- ``prefix = True`` (all-position training): position t gets μ_t, σ_t, τ_t and Δ_t computed
  from the positions ≤ t only (cumulative sums), so no statistic of position t reads a later
  one; ``prefix = False`` is the official whole-window form (for last-position training).
  Δ_t is then one bias per key for query t (the official Δ is one per key, shared by queries).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from attnsvm.rec.nn.attention import MultiHeadAttention

EPS = 1e-5  # the official variance floor


def window_statistics(
    x: torch.Tensor, valid: torch.Tensor, prefix: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(μ, σ)`` of ``x`` (B, L, D) over its real positions: per position from positions ≤ t
    (``prefix``: (B, L, D)) or over the whole window ((B, 1, D)); σ = sqrt(population variance
    + 1e-5). Positions before the first real item get μ = 0, σ = sqrt(1e-5)."""
    weight = valid.unsqueeze(-1).to(x.dtype)
    x = x * weight
    if prefix:
        count = weight.cumsum(1).clamp(min=1.0)
        mean = x.cumsum(1) / count
        variance = ((x * x).cumsum(1) / count - mean * mean).clamp(min=0.0)
    else:
        count = weight.sum(1, keepdim=True).clamp(min=1.0)
        mean = x.sum(1, keepdim=True) / count
        variance = (((x - mean) * weight) ** 2).sum(1, keepdim=True) / count
    return mean, torch.sqrt(variance + EPS)


class FactorProjector(nn.Module):
    """The official ``Projector``: ``MLP([series_conv(X) ; statistic])``, per position with
    ``prefix`` (the conv summed over positions ≤ t) or once per window."""

    def __init__(self, dim: int, max_len: int, hidden: int, layers: int, outputs: int) -> None:
        super().__init__()
        # one 3-tap kernel over the features per window column (the Conv1d's input channels)
        bound = 1.0 / math.sqrt(3 * max_len)  # Conv1d's default init for that fan-in
        self.series_weight = nn.Parameter(torch.empty(max_len, 3).uniform_(-bound, bound))
        widths = [2 * dim] + [hidden] * layers
        mlp: list[nn.Module] = []
        for width_in, width_out in itertools.pairwise(widths):
            mlp += [nn.Linear(width_in, width_out), nn.ReLU()]
        mlp.append(nn.Linear(widths[-1], outputs, bias=False))
        self.mlp = nn.Sequential(*mlp)

    def forward(
        self, raw: torch.Tensor, valid: torch.Tensor, statistic: torch.Tensor, prefix: bool
    ) -> torch.Tensor:
        """(B, L, outputs) with ``prefix``, else (B, 1, outputs)."""
        kernel = self.series_weight[-raw.shape[1] :].to(raw.dtype)  # right-aligned columns
        conv = (
            kernel[:, 0, None] * torch.roll(raw, 1, dims=-1)  # feature e − 1 (circular)
            + kernel[:, 1, None] * raw
            + kernel[:, 2, None] * torch.roll(raw, -1, dims=-1)  # feature e + 1
        ) * valid.unsqueeze(-1).to(raw.dtype)
        series = conv.cumsum(1) if prefix else conv.sum(1, keepdim=True)
        return self.mlp(torch.cat([series, statistic], dim=-1))


class DestationaryFactors(nn.Module):
    """τ (B, L) > 0 per query and the attention bias Δ / √d_h (B, 1, L, L) of each query over
    each key, from the raw window and its statistics (official ``tau_learner``,
    ``delta_learner``); whole-window factors are broadcast to every query."""

    def __init__(self, dim: int, max_len: int, head_dim: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.head_scale = 1.0 / math.sqrt(head_dim)
        self.tau = FactorProjector(dim, max_len, hidden, layers, 1)
        self.delta = FactorProjector(dim, max_len, hidden, layers, max_len)

    def forward(
        self,
        raw: torch.Tensor,
        valid: torch.Tensor,
        mean: torch.Tensor,
        std: torch.Tensor,
        prefix: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch, length, _ = raw.shape
        tau = self.tau(raw, valid, std, prefix).squeeze(-1).exp().expand(batch, length)
        delta = self.delta(raw, valid, mean, prefix)[..., -length:]  # keys' columns, from right
        delta = delta.expand(batch, length, length)
        return tau, (delta * self.head_scale).unsqueeze(1)


class DestationaryAttention(MultiHeadAttention):
    """``MultiHeadAttention`` whose logits are ``τ_t · q_t·k_s / √d_h`` (+ the pair bias, which
    carries Δ): the queries are scaled by τ while ``scaled_queries`` holds it, so the fast
    (SDPA) and the reference paths both apply it. The lens reads W_Q, W_K without τ."""

    #: (B, L) per-query factor, set only inside ``scaled_queries``
    query_scale: torch.Tensor | None = None

    def _project(self, query_input: torch.Tensor, key_input: torch.Tensor):
        q, k, v = super()._project(query_input, key_input)
        if self.query_scale is not None:
            # the last L_q columns: a last-query-only block computes the last query alone
            scale = self.query_scale[:, -q.shape[2] :].to(q.dtype)
            q = q * scale[:, None, :, None]
        return q, k, v


@contextmanager
def scaled_queries(model: nn.Module, tau: torch.Tensor) -> Iterator[None]:
    """Every ``DestationaryAttention`` of ``model`` scales its queries by ``tau`` (B, L) inside
    the block; the factor is dropped on leaving it, so no later call sees a stale one."""
    modules = [m for m in model.modules() if isinstance(m, DestationaryAttention)]
    for module in modules:
        module.query_scale = tau
    try:
        yield
    finally:
        for module in modules:
            del module.query_scale  # back to the class default: no scaling
