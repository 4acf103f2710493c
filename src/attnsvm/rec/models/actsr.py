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
updates only the attack projections. Both streams' losses read the last position only, so
``last_hidden`` (which the trainer trains through, ``trains_last_hidden``) and the attack step
compute the last layer for the last query alone: its spatial scores, gate, softmaxes and FFN —
all but the perturbed stream's attack mask, whose every row the mask penalty reads. The attack
step also cuts padding as the trainer's length groups do (``perturbed_last_position``): the ε of
every layer is drawn whole for the full window first, in the full forward's order, and each
group reads its part, and the penalty's padding rows and columns (M one-hot on the diagonal of a
padding query; 0 at a padding key) are added in closed form, so the step is the full window's.

The official configs switch position embeddings off (the calibrator supplies order); the Beauty
config is 3 layers, 4 heads, d = 64, FFN 128, dropout 0.5, max_len 50, lr 1e-4, CE at the last
position, λ = 0.03.
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
#: the attack step's length groups, as many as the trainer's default ``train.length_groups``
ATTACK_GROUPS = 4


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


def padded_mean(norms: torch.Tensor, window: int | None) -> torch.Tensor:
    """Mean ``‖1 − M‖₂`` over the ``(B, H, window)`` rows of a left-padded window from the norms
    ``(B, H, L)`` of its last ``L`` rows over its last ``L`` columns. The cut columns are padding
    keys (M = 0: each adds 1 to ‖·‖²); the cut rows, padding queries, attend their diagonal
    alone (M one-hot: ‖1 − M‖₂ = √(window − 1))."""
    batch, heads, length = norms.shape
    missing = 0 if window is None else window - length
    if missing == 0:
        return norms.mean()
    cut_rows = batch * heads * missing * math.sqrt(window - 1)
    return ((norms.pow(2) + missing).sqrt().sum() + cut_rows) / (batch * heads * window)


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
        # mean ‖1 − M‖₂ over the rows of M the last forward computed, for the attack
        self.mask_penalty = torch.zeros(())

    def attack_parameters(self) -> list[nn.Parameter]:
        return [*self.attack_q.parameters(), *self.attack_k.parameters()]

    def spatial_scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """``(S + order + distance) / √d_h`` for the queries ``q``, the last ``L_q`` of the
        ``L_k`` key positions (all of them, or the last one alone)."""
        keys = torch.arange(k.shape[2], device=q.device)
        queries = keys[k.shape[2] - q.shape[2] :]
        later = (keys[None, :] > queries[:, None]).to(q.dtype)  # y_ij = 1[j > i]
        order = self.order_query(q) + self.order_key(k).transpose(-2, -1)  # (B, H, L_q, L_k)
        # y log σ(o) + (1 − y) log(1 − σ(o)) = y·o − softplus(o): one softplus, not two
        order_term = later * order - F.softplus(order)
        distance = self.distance_query(q) + self.distance_key(k).transpose(-2, -1)
        gap = torch.log((keys[None, :] - queries[:, None]).abs().to(q.dtype) + 1)
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
        last_query_only: bool = False,
        noise: torch.Tensor | None = None,
        window: int | None = None,
    ) -> torch.Tensor:
        """``(B, L_q, D)``; with ``last_query_only``, ``(B, 1, D)`` of the last query alone.
        ``noise``: the perturbed stream's ε (B, H, L, L), drawn here if None. ``window``: the
        width of the left-padded window this input is the last columns of (the penalty's mean
        runs over its rows and columns); this input's width if None."""
        rows = slice(-1, None) if last_query_only else slice(None)
        q, k, v = self._project(query_input[:, rows], key_input)
        keep = keep_mask[..., rows, :]

        def masked_softmax(scores: torch.Tensor, keep: torch.Tensor = keep) -> torch.Tensor:
            return scores.masked_fill(~keep, float("-inf")).softmax(dim=-1)

        spatial = masked_softmax(self.spatial_scores(q, k))
        # the perturbed stream's penalty reads every row of M; the calibrated stream, its rows
        attack_rows = slice(None) if stream == "perturbed" else rows
        attack_q = self._heads(self.attack_q(query_input[:, attack_rows]))
        attack_k = self._heads(self.attack_k(key_input))
        mask = masked_softmax(
            attack_q @ attack_k.transpose(-2, -1) / math.sqrt(q.shape[-1]),
            keep_mask[..., attack_rows, :],
        )
        self.mask_penalty = padded_mean(torch.linalg.vector_norm(1 - mask, dim=-1), window)
        if stream == "perturbed":
            if noise is None:
                noise = torch.randn_like(mask)  # drawn whole: the full forward's ε
            noise = noise[..., rows, :]
            mask = mask[..., rows, :]
            weights = masked_softmax(spatial * mask + noise * (1 - mask))
        else:
            # M is the adversary's: the recommendation loss must not train the attack projections
            calibrated = masked_softmax(spatial * torch.exp(1 - mask.detach()))
            gate = torch.sigmoid(self.gate(q)[..., self.max_len - k.shape[2] :])
            weights = masked_softmax(gate * spatial + (1 - gate) * calibrated)
        self._record(weights, query_input[:, rows], key_input, key_positions)
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

    def forward(self, x, keep_mask, stream: str, last_query_only: bool = False, **perturbation):
        """``perturbation``: the attention's ``noise`` and ``window``, where given."""
        attended = self.attention(
            x, x, keep_mask, stream=stream, last_query_only=last_query_only, **perturbation
        )
        x = self.attention_norm(x[:, -attended.shape[1] :] + self.dropout(attended))
        return self.ffn_norm(x + self.ffn(x))


class ACTSR(SequentialRecommender):
    objective = "last"
    config_class = ACTSRConfig
    padding_free = True
    trains_last_hidden = True

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
        return self._encode(item_seq, stream, last_query_only=False)

    def last_hidden(self, item_seq: torch.Tensor, stream: str = "calibrated") -> torch.Tensor:
        return self._encode(item_seq, stream, last_query_only=True)[:, -1]

    def perturbed_last_position(self, item_seq: torch.Tensor) -> torch.Tensor:
        """``(B, 1, D)``: ``forward(item_seq, "perturbed")[:, -1:]`` with the same ε and, left in
        each layer's ``mask_penalty``, the same penalty, computed on ``ATTACK_GROUPS`` groups of
        rows of similar length, each cut to its longest row (AC-TSR is ``padding_free``)."""
        self.check_input(item_seq)
        batch, width = item_seq.shape
        # every layer's ε for the whole window, in the order the full forward draws them
        shape = (batch, self.config.num_heads, width, width)
        dtype = self.items.input.weight.dtype
        noise = [torch.randn(shape, dtype=dtype, device=item_seq.device) for _ in self.blocks]
        lengths = (item_seq != 0).sum(dim=1)
        order = torch.argsort(lengths, stable=True)
        hidden, penalties = [], [0.0] * len(self.blocks)
        for rows in torch.tensor_split(order, min(ATTACK_GROUPS, batch)):
            cut = max(1, int(lengths[rows[-1]]))
            parts = [part[rows][..., -cut:, -cut:] for part in noise]
            hidden.append(self._encode(item_seq[rows, -cut:], "perturbed", True, parts, width))
            for index, block in enumerate(self.blocks):
                penalties[index] = penalties[index] + block.attention.mask_penalty * (
                    len(rows) / batch
                )
        for block, penalty in zip(self.blocks, penalties, strict=True):
            block.attention.mask_penalty = penalty
        return torch.cat(hidden)[torch.argsort(order)]

    def _encode(
        self,
        item_seq: torch.Tensor,
        stream: str,
        last_query_only: bool,
        noise: list[torch.Tensor] | None = None,
        window: int | None = None,
    ) -> torch.Tensor:
        """(B, L, D) hidden states of ``stream``, zero at padding; (B, 1, D) of the last position
        alone with ``last_query_only`` (the last block computes one query). ``noise``: each
        block's ε; ``window``: the width the penalties average over (``CalibratedAttention``)."""
        self.check_input(item_seq)
        if stream not in STREAMS:
            raise ValueError(f"stream must be one of {STREAMS}, got {stream!r}")
        valid = item_seq != 0
        keep_mask = attention_mask(valid, causal=True)
        x = self.embed(item_seq)
        for index, block in enumerate(self.blocks):
            last = last_query_only and index == len(self.blocks) - 1
            perturbation = {} if noise is None else {"noise": noise[index]}
            x = block(x, keep_mask, stream, last, window=window, **perturbation)
        if last_query_only:
            valid = valid[:, -1:]
        return x * valid.unsqueeze(-1).to(x.dtype)


def adversarial_step(
    model: ACTSR,
    item_seq: torch.Tensor,
    loss_of_hidden: Callable[[torch.Tensor], torch.Tensor],
    attack_optimizer: torch.optim.Optimizer,
) -> float:
    """One ascent step of the attack projections on ``−loss(perturbed) + λ · mask penalty``.

    ``loss_of_hidden`` maps hidden states to the recommendation loss the calibrated stream is
    trained with: under the paper's objective ``last`` that of the last position, and it gets
    ``(B, 1, D)``, that position alone; under ``causal`` that of every position, and it gets
    the perturbed stream's ``(B, L, D)``. Gradients are taken with respect to the attack
    projections only, so no other parameter (nor its ``.grad``) is touched.
    """
    attack = model.attack_parameters()
    if model.objective == "last":  # the last block's one query, padding cut
        hidden = model.perturbed_last_position(item_seq)
    else:
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
