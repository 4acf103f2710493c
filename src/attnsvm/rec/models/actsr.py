"""AC-TSR (Zhou et al., CIKM 2023): attention calibration as a plug-in for SASRec.

Per head, with raw scores ``S_ij = q_i · k_j`` and the causal/padding mask:

- **Spatial calibrator.** Two heads read the pair ``[q_i ; k_j]``: order ``o_ij`` with target
  ``y_ij = 1[j > i]`` adds ``y log σ(o) + (1 − y) log(1 − σ(o))``, and distance ``d_ij`` adds
  ``−(log(|i − j| + 1) − d_ij)² · s² / 2`` (s learnable). A linear head on a concatenation is a
  sum of one term per half, so ``o_ij = a·q_i + b·k_j + c`` is formed by broadcasting, never as
  the B·H·L²·2d tensor. ``A_sp = softmax(mask((S + order + distance) / √d))``.
- **Adversarial calibrator.** Separate attack projections give ``M = softmax(mask(Q′K′ᵀ/√d))``;
  the perturbed stream attends with ``softmax(mask(A_sp ⊙ M + ε ⊙ (1 − M)))`` (ε ~ N(0, 1)),
  the calibrated stream with ``A_cal = softmax(mask(A_sp ⊙ exp(1 − M)))`` mixed by the gate
  ``g = σ(Linear_{d_h→L}(q_i))``: ``A = softmax(mask(g ⊙ A_sp + (1 − g) ⊙ A_cal))``.

Training is min–max (``adversarial_step``): the recommendation loss of the calibrated stream
updates everything except the attack projections; ``−loss(perturbed) + λ · mean ‖1 − M‖₂``
updates only the attack projections. The official configs switch position embeddings off (the
calibrator supplies order); the Beauty config is 3 layers, 4 heads, d = 64, FFN 128, dropout
0.5, max_len 50, lr 1e-4, CE at the last position, λ = 0.03.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from attnsvm.rec.models.base import SequentialRecommender, TransformerConfig
from attnsvm.rec.nn.attention import MultiHeadAttention, attention_mask
from attnsvm.rec.nn.dropout import Dropout
from attnsvm.rec.nn.dropout import dropout as drop
from attnsvm.rec.nn.ffn import PointwiseFFN

STREAMS = ("calibrated", "perturbed")


@dataclass(frozen=True)
class ACTSRConfig(TransformerConfig):
    ffn_optional: ClassVar[bool] = False  # its own FFN is always there
    num_blocks: int = 3
    num_heads: int = 4
    ffn_size: int = 128
    dropout: float = 0.5
    attention_dropout: float = 0.5
    max_len: int = 50
    norm: str = "post"
    activation: str = "gelu"
    position: str = "none"
    scale_embeddings: bool = False
    mask_loss_weight: float = 0.03  # λ of the attack loss
    objective: str = "last"  # "last" | "causal"

    def __post_init__(self) -> None:
        super().__post_init__()
        self._choice("objective", ("causal", "last"))


class CalibratedAttention(MultiHeadAttention):
    """Multi-head attention with AC-TSR's spatial and adversarial calibrators.

    ``q_proj``/``k_proj`` are the ordinary projections (what the lens reads); ``attack_q``/
    ``attack_k`` are the adversary's. Its weights are always explicit, and a recording keeps
    the calibrated (or perturbed) ones it used.
    """

    def __init__(self, dim: int, num_heads: int, max_len: int, dropout: float) -> None:
        super().__init__(dim, num_heads, dropout)
        head = dim // num_heads
        self.order_query, self.order_key = nn.Linear(head, 1), nn.Linear(head, 1, bias=False)
        self.distance_query = nn.Linear(head, 1)
        self.distance_key = nn.Linear(head, 1, bias=False)
        self.distance_scale = nn.Parameter(torch.ones(()))
        self.attack_q = nn.Linear(dim, dim)
        self.attack_k = nn.Linear(dim, dim)
        self.gate = nn.Linear(head, max_len)
        self.max_len = max_len
        self.mask_penalty = torch.zeros(())  # mean ‖1 − M‖₂ of the last forward, for the attack

    def attack_parameters(self) -> list[nn.Parameter]:
        return [*self.attack_q.parameters(), *self.attack_k.parameters()]

    def spatial_scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        length = q.shape[2]
        positions = torch.arange(length, device=q.device)
        later = (positions[None, :] > positions[:, None]).to(q.dtype)  # y_ij = 1[j > i]
        order = self.order_query(q) + self.order_key(k).transpose(-2, -1)  # (B, H, L, L)
        order_term = -(later * F.softplus(-order) + (1 - later) * F.softplus(order))
        distance = self.distance_query(q) + self.distance_key(k).transpose(-2, -1)
        gap = torch.log((positions[None, :] - positions[:, None]).abs().to(q.dtype) + 1)
        distance_term = -((gap - distance) ** 2) * self.distance_scale**2 / 2
        return (q @ k.transpose(-2, -1) + order_term + distance_term) / math.sqrt(q.shape[-1])

    def forward(
        self,
        query_input: torch.Tensor,
        key_input: torch.Tensor,
        keep_mask: torch.Tensor,
        *,
        key_positions: torch.Tensor | None = None,
        stream: str = "calibrated",
    ) -> torch.Tensor:
        q, k, v = self._project(query_input, key_input)

        def masked_softmax(scores: torch.Tensor) -> torch.Tensor:
            return scores.masked_fill(~keep_mask, float("-inf")).softmax(dim=-1)

        spatial = masked_softmax(self.spatial_scores(q, k))
        attack_q = self._heads(self.attack_q(query_input))
        attack_k = self._heads(self.attack_k(key_input))
        mask = masked_softmax(attack_q @ attack_k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
        self.mask_penalty = torch.linalg.vector_norm(1 - mask, dim=-1).mean()
        if stream == "perturbed":
            noise = torch.randn_like(spatial)
            weights = masked_softmax(spatial * mask + noise * (1 - mask))
        else:
            # M is the adversary's: the recommendation loss must not train the attack projections
            calibrated = masked_softmax(spatial * torch.exp(1 - mask.detach()))
            length = q.shape[2]
            gate = torch.sigmoid(self.gate(q)[..., self.max_len - length :])
            weights = masked_softmax(gate * spatial + (1 - gate) * calibrated)
        self._record(weights, query_input, key_input, key_positions)
        dropout = self.dropout if self.training else 0.0
        return self._merge(drop(weights, dropout) @ v)


class ACTSRBlock(nn.Module):
    """Post-LN transformer block around ``CalibratedAttention`` (the streams share the FFN)."""

    def __init__(self, config: ACTSRConfig) -> None:
        super().__init__()
        dim = config.hidden_size
        self.attention = CalibratedAttention(
            dim, config.num_heads, config.max_len, config.attention_dropout
        )
        self.attention_norm = nn.LayerNorm(dim)
        self.ffn = PointwiseFFN(dim, config.ffn_size, config.activation, config.dropout)
        self.ffn_norm = nn.LayerNorm(dim)
        self.dropout = Dropout(config.dropout)

    def forward(self, x, keep_mask, stream: str):
        x = self.attention_norm(x + self.dropout(self.attention(x, x, keep_mask, stream=stream)))
        return self.ffn_norm(x + self.ffn(x))


class ACTSR(SequentialRecommender):
    objective = "last"
    config_class = ACTSRConfig
    padding_free = True

    def __init__(self, num_items: int, config: ACTSRConfig | None = None) -> None:
        config = config or ACTSRConfig()
        super().__init__(num_items, config)
        self.objective = config.objective
        self.build_embeddings(layer_norm=True)
        self.blocks = nn.ModuleList(ACTSRBlock(config) for _ in range(config.num_blocks))
        self.init_weights()

    def attack_parameters(self) -> list[nn.Parameter]:
        return [p for block in self.blocks for p in block.attention.attack_parameters()]

    def mask_penalty(self) -> torch.Tensor:
        """Mean ``‖1 − M‖₂`` over the layers of the last forward pass."""
        return torch.stack([block.attention.mask_penalty for block in self.blocks]).mean()

    def adversarial_step(
        self,
        item_seq: torch.Tensor,
        loss_of_hidden: Callable[[torch.Tensor], torch.Tensor],
        attack_optimizer: torch.optim.Optimizer,
    ) -> float:
        """The attack projections' ascent step (:func:`adversarial_step`)."""
        return adversarial_step(self, item_seq, loss_of_hidden, attack_optimizer)

    def forward(self, item_seq: torch.Tensor, stream: str = "calibrated") -> torch.Tensor:
        self.check_input(item_seq)
        if stream not in STREAMS:
            raise ValueError(f"stream must be one of {STREAMS}, got {stream!r}")
        valid = item_seq != 0
        keep_mask = attention_mask(valid, causal=True)
        x = self.embed(item_seq)
        for block in self.blocks:
            x = block(x, keep_mask, stream)
        return x * valid.unsqueeze(-1).to(x.dtype)


def adversarial_step(
    model: ACTSR,
    item_seq: torch.Tensor,
    loss_of_hidden: Callable[[torch.Tensor], torch.Tensor],
    attack_optimizer: torch.optim.Optimizer,
) -> float:
    """One ascent step of the attack projections on ``−loss(perturbed) + λ · mask penalty``.

    ``loss_of_hidden`` maps the (B, L, D) hidden states to the recommendation loss (the same
    one the calibrated stream is trained with). Gradients are taken with respect to the attack
    projections only, so no other parameter (nor its ``.grad``) is touched.
    """
    attack = model.attack_parameters()
    hidden = model(item_seq, stream="perturbed")
    loss = -loss_of_hidden(hidden) + model.config.mask_loss_weight * model.mask_penalty()
    gradients = torch.autograd.grad(loss, attack)
    attack_optimizer.zero_grad(set_to_none=True)
    for parameter, gradient in zip(attack, gradients, strict=True):
        parameter.grad = gradient
    attack_optimizer.step()
    return float(loss.detach())


def calibrated_parameters(model: ACTSR) -> list[nn.Parameter]:
    """Everything the calibrated-stream loss trains: all parameters but the attack projections."""
    attack = {id(p) for p in model.attack_parameters()}
    return [p for p in model.parameters() if id(p) not in attack]
