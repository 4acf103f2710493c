"""MaTrRec (Zhang, Zhang & Yang, 2024): a Mamba block followed by a transformer layer.

Inputs are ``dropout(LN(E[s]))`` with **no** position embedding (the state-space recurrence
supplies order). Each layer is ``x ← LN(x + dropout(Mamba(x)))`` and then a post-LN causal
transformer block (FFN 4d). Mamba (Gu & Dao 2023, ``mamba_simple.py``) in plain PyTorch::

    [u, z] = W_in x;   u ← SiLU(causal depth-wise conv_4(u))
    [δ, B, C] = W_x u;  Δ = softplus(W_Δ δ + b_Δ);  A = −exp(A_log)          (A: d_in × N)
    h_t = exp(Δ_t A) ⊙ h_{t−1} + Δ_t B_t u_t;   y_t = C_t · h_t + D ⊙ u_t     (selective scan)
    out = W_out (y ⊙ SiLU(z))

``selective_scan`` runs the recurrence either as a sequential loop over time (vectorised over
batch, channels and states, its gradient written out: ``SequentialScan``; the fast choice on
CPU for L ≤ 200) or as a Hillis–Steele parallel
prefix scan of the affine maps ``h ↦ a h + b`` (log₂ L steps); both equal a naive per-step
reference to 1e-5 (tested). ``backend="mamba_ssm"`` uses the CUDA kernel of the ``mamba-ssm``
package instead, where it is installed. Left padding is made inert: Δ = 0 there, so the state
passes padding unchanged and a padded window reads like its unpadded self.

**Last query only.** ``last_hidden`` runs the last layer's transformer block for the last query
alone (its keys, and the selective scan, still cover every position); the trainer trains
objective ``"last"`` through it (``trains_last_hidden``): the function of ``forward(…)[:, -1]``.

Defaults: the official Amazon config (1 layer, d = 64, 1 head, d_state 32, d_conv 4, expand 2,
dropout 0.4, max_len 50) and its loss, CE at the last position.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnsvm.rec.models.base import SequentialRecommender, TransformerConfig
from attnsvm.rec.nn.attention import attention_mask
from attnsvm.rec.nn.blocks import TransformerBlock
from attnsvm.rec.nn.dropout import Dropout

SCANS = ("sequential", "parallel")
BACKENDS = ("torch", "mamba_ssm")


@dataclass(frozen=True)
class MaTrRecConfig(TransformerConfig):
    num_blocks: int = 1
    ffn_size: int = 256
    dropout: float = 0.4
    attention_dropout: float = 0.4
    max_len: int = 50
    norm: str = "post"
    activation: str = "gelu"
    position: str = "none"
    scale_embeddings: bool = False
    state_size: int = 32
    conv_size: int = 4
    expand: int = 2
    scan: str = "sequential"
    backend: str = "torch"
    objective: str = "last"  # "last" | "causal": both Mamba and the attention are causal

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("state_size", "conv_size", "expand"):
            if getattr(self, name) < 1:
                raise ValueError(f"MaTrRecConfig.{name} must be ≥ 1, got {getattr(self, name)}")
        self._choice("scan", SCANS)
        self._choice("backend", BACKENDS)
        self._choice("objective", ("causal", "last"))
        if self.backend == "mamba_ssm" and importlib.util.find_spec("mamba_ssm") is None:
            raise ValueError(
                "MaTrRecConfig.backend 'mamba_ssm' needs the mamba-ssm package (CUDA only); "
                "it is not installed — use backend 'torch'"
            )


def selective_scan(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    scan: str = "sequential",
) -> torch.Tensor:
    """``y`` (b, L, d) of the recurrence above; u, Δ (b, L, d), A (d, N), B, C (b, L, N), D (d,)."""
    if scan == "sequential":
        y = SequentialScan.apply(u, delta, A, B, C)
    elif scan == "parallel":
        a = torch.exp(delta.unsqueeze(-1) * A)  # (b, L, d, N)
        b = (delta * u).unsqueeze(-1) * B.unsqueeze(2)  # Δ_t B_t u_t
        offset = 1
        while offset < u.shape[1]:  # compose each prefix with the one `offset` steps earlier
            a_prev = F.pad(a[:, :-offset], (0, 0, 0, 0, offset, 0), value=1.0)
            b_prev = F.pad(b[:, :-offset], (0, 0, 0, 0, offset, 0))
            a, b = a * a_prev, a * b_prev + b
            offset *= 2
        y = torch.einsum("bldn,bln->bld", b, C)
    else:
        raise ValueError(f"scan must be one of {SCANS}, got {scan!r}")
    return y + u * D


class SequentialScan(torch.autograd.Function):
    """``Σ_n C_t,n h_t,n`` of the recurrence, step by step, with its gradient written out: the
    backward runs the recurrence's adjoint back in time (``g ← a_t g``), recomputing each
    ``a_t = exp(Δ_t A)`` instead of keeping it. Every step reads and writes one (b, d, N) state
    a few times, where autograd's graph of the same loop took about twice the passes (and a
    node, an allocation, per operation). States are kept time-major, (L, b, d, N), so a step's
    state is one contiguous block."""

    @staticmethod
    @torch.autocast("cpu", enabled=False)  # out= buffers: every product in the inputs' dtype
    @torch.autocast("cuda", enabled=False)
    def forward(ctx, u, delta, A, B, C):
        du = delta * u
        states = u.new_empty(u.shape[1], u.shape[0], u.shape[2], A.shape[1])
        y = u.new_empty(u.shape)
        decay = u.new_empty(states.shape[1:])
        for t in range(u.shape[1]):
            torch.mul(du[:, t, :, None], B[:, t, None, :], out=states[t])  # Δ_t B_t u_t
            if t:
                torch.exp(torch.mul(delta[:, t, :, None], A, out=decay), out=decay)
                states[t].addcmul_(decay, states[t - 1])
            # products with a vector per row: (b, d, N) @ (b, N, 1) as bmm is b tiny gemvs
            y[:, t] = torch.mul(states[t], C[:, t, None, :], out=decay).sum(dim=-1)
        ctx.save_for_backward(u, delta, A, B, C, states)
        return y

    @staticmethod
    @torch.autocast("cpu", enabled=False)
    @torch.autocast("cuda", enabled=False)
    def backward(ctx, grad_y):
        u, delta, A, B, C, states = ctx.saved_tensors
        grad_y = grad_y.contiguous()
        grad_du, grad_delta = torch.empty_like(u), torch.zeros_like(u)
        grad_B, grad_C = torch.empty_like(B), torch.empty_like(C)
        grad_A = torch.zeros_like(A)
        carried = torch.zeros_like(states[0])  # ∂loss/∂h_t through the later steps
        decay, product = torch.empty_like(carried), torch.empty_like(carried)
        for t in range(u.shape[1] - 1, -1, -1):
            grad_y_t = grad_y[:, t, :, None]
            grad_C[:, t] = torch.mul(states[t], grad_y_t, out=product).sum(dim=1)
            carried.addcmul_(grad_y_t, C[:, t, None, :])  # now ∂loss/∂h_t
            grad_du[:, t] = torch.mul(carried, B[:, t, None, :], out=product).sum(dim=-1)
            du_t = (delta[:, t] * u[:, t])[:, :, None]
            grad_B[:, t] = torch.mul(carried, du_t, out=product).sum(dim=1)
            if t:
                torch.exp(torch.mul(delta[:, t, :, None], A, out=decay), out=decay)
                # ∂loss/∂(Δ_t A) = ∂loss/∂h_t ⊙ h_{t−1} ⊙ a_t
                torch.mul(carried, states[t - 1], out=product).mul_(decay)
                grad_delta[:, t] = (product * A).sum(dim=-1)
                grad_A += (product * delta[:, t, :, None]).sum(dim=0)
                carried.mul_(decay)
        grad_delta.addcmul_(grad_du, u)
        return grad_du * delta, grad_delta, grad_A, grad_B, grad_C


class Mamba(nn.Module):
    def __init__(
        self, dim: int, state_size: int, conv_size: int, expand: int, scan: str, backend: str
    ) -> None:
        super().__init__()
        inner = expand * dim
        self.rank = math.ceil(dim / 16)
        self.state_size, self.scan, self.backend = state_size, scan, backend
        self.in_proj = nn.Linear(dim, 2 * inner, bias=False)
        self.conv = nn.Conv1d(inner, inner, conv_size, groups=inner, padding=conv_size - 1)
        self.x_proj = nn.Linear(inner, self.rank + 2 * state_size, bias=False)
        self.dt_proj = nn.Linear(self.rank, inner)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, state_size + 1.0)).repeat(inner, 1))
        self.D = nn.Parameter(torch.ones(inner))
        self.out_proj = nn.Linear(inner, dim, bias=False)

    def reset_dt(self) -> None:
        """Mamba's Δ init: bias so that softplus(bias) is log-uniform in [1e-3, 0.1]."""
        dt = torch.exp(torch.rand(self.dt_proj.out_features) * math.log(100) + math.log(1e-3))
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        u, z = self.in_proj(x).chunk(2, dim=-1)
        u = F.silu(self.conv((u * valid).transpose(1, 2))[..., :length].transpose(1, 2))
        low, B, C = self.x_proj(u).split([self.rank, self.state_size, self.state_size], dim=-1)
        delta = F.softplus(self.dt_proj(low)) * valid  # Δ = 0 at padding: the state passes by
        A = -torch.exp(self.A_log.float())
        if self.backend == "mamba_ssm":
            from mamba_ssm.ops.selective_scan_interface import selective_scan_fn

            y = selective_scan_fn(
                u.transpose(1, 2).contiguous(),
                delta.transpose(1, 2).contiguous(),
                A,
                B.transpose(1, 2).contiguous(),
                C.transpose(1, 2).contiguous(),
                self.D.float(),
            ).transpose(1, 2)
        else:
            y = selective_scan(u, delta, A.to(u.dtype), B, C, self.D, self.scan)
        return self.out_proj(y * F.silu(z))


class MaTrRecLayer(nn.Module):
    def __init__(self, config: MaTrRecConfig) -> None:
        super().__init__()
        dim = config.hidden_size
        self.mamba = Mamba(
            dim, config.state_size, config.conv_size, config.expand, config.scan, config.backend
        )
        self.mamba_norm = nn.LayerNorm(dim)
        self.dropout = Dropout(config.dropout)
        self.transformer = TransformerBlock(
            dim,
            config.num_heads,
            config.ffn_size,
            config.dropout,
            config.attention_dropout,
            config.activation,
            "post",
        )

    def forward(self, x, keep_mask, valid, last_query_only: bool = False):
        x = self.mamba_norm(x + self.dropout(self.mamba(x, valid))) * valid
        return self.transformer(x, keep_mask, last_query_only)


class MaTrRec(SequentialRecommender):
    objective = "last"
    config_class = MaTrRecConfig
    padding_free = True
    trains_last_hidden = True

    def __init__(self, num_items: int, config: MaTrRecConfig | None = None) -> None:
        config = config or MaTrRecConfig()
        super().__init__(num_items, config)
        self.objective = config.objective
        self.build_embeddings(layer_norm=True)
        self.layers = nn.ModuleList(MaTrRecLayer(config) for _ in range(config.num_blocks))
        self.init_weights()
        for layer in self.layers:
            layer.mamba.reset_dt()

    def forward(self, item_seq: torch.Tensor) -> torch.Tensor:
        return self._encode(item_seq, last_query_only=False)

    def last_hidden(self, item_seq: torch.Tensor) -> torch.Tensor:
        return self._encode(item_seq, last_query_only=True)[:, -1]

    def _encode(self, item_seq: torch.Tensor, last_query_only: bool) -> torch.Tensor:
        """(B, L, D) hidden states, zero at padding; (B, 1, D) of the last position alone with
        ``last_query_only`` (the last layer's transformer block computes one query)."""
        self.check_input(item_seq)
        keep_mask = attention_mask(item_seq != 0, causal=True)
        x = self.embed(item_seq)
        valid = (item_seq != 0).unsqueeze(-1).to(x.dtype)
        for index, layer in enumerate(self.layers):
            last = last_query_only and index == len(self.layers) - 1
            x = layer(x, keep_mask, valid, last) * (valid[:, -1:] if last else valid)
        return x
