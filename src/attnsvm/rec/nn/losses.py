"""Next-item losses on gathered hidden states.

Every loss takes the hidden states ``hidden`` (N, D) of the N positions that have a target (the
caller has already dropped padding), the target ids ``positives`` (N,) in 1..num_items, and the
output table ``embedding`` (num_items + 1, D) with an optional ``bias`` (num_items + 1,); the
logit of item i at position n is ``s_ni = hidden_n · embedding_i + bias_i``. Sampled losses also
take ``negatives``, either per position (N, k) or shared by all positions (k,). All losses are
means over the N positions.

Accidental hits (a sampled negative equal to the position's positive) are removed: they add
nothing to BCE/gBCE and get logit −∞ in sampled softmax, as in TensorFlow's
``sampled_softmax_loss(remove_accidental_hits=True)``.

- ``bce_loss``: ``1/(k+1) · [softplus(−s⁺) + Σ_j softplus(s⁻_j)]`` (−log σ(s⁺) − Σ log(1 − σ(s⁻))).
- ``gbce_loss``: gSASRec (Petrov & Macdonald 2023): as BCE with the positive term raised to β,
  ``1/(k+1) · [−log σ(s⁺)^β − Σ_j log(1 − σ(s⁻_j))]``, ``β = α (t (1 − 1/α) + 1/α)``,
  ``α = k / (|I| − 1)``. t = 0 gives β = 1 (plain BCE); t = 1 gives calibrated probabilities.
  gSASRec's TF code feeds ``γ = log(1/(σ(s⁺)^(−β) − 1))`` to plain BCE; since
  ``−log σ(γ) = −β log σ(s⁺)`` exactly, we use ``β · softplus(−s⁺)``, which is stable in float32
  (as in gSASRec-pytorch's ``gbce.py``). |I| is the number of items, as in the paper
  (gSASRec-pytorch passes ``pool_size = num_items − 1`` and so uses k / (|I| − 2)).
- ``sampled_softmax_loss``: cross-entropy of the positive against the k negatives. With
  ``log_q`` (num_items + 1,), the log-probability that the sampler draws each item, every sampled
  logit, **the positive's included**, becomes ``s − log q`` (the log-q correction of Jean et al.
  2015 / Yi et al. 2019; it removes the bias of sampling popular items more often). With
  uniform negatives log q is constant and the correction changes nothing.
- ``full_ce_loss``: softmax cross-entropy over the whole catalogue (the padding item 0 excluded).
  ``chunk_size`` bounds memory: logits exist only for ``chunk_size`` rows at a time (see
  ``_ChunkedCrossEntropy``), so memory grows as chunk_size × items, never N × items.

``LossConfig`` names the loss a run trains with and its sampling; ``LossConfig.compute`` is the
one dispatch from that name to the functions above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnsvm.rec.config_base import Config


def _check(hidden: torch.Tensor, positives: torch.Tensor, embedding: torch.Tensor) -> None:
    if hidden.ndim != 2 or embedding.ndim != 2 or hidden.shape[1] != embedding.shape[1]:
        raise ValueError(
            f"hidden (N, D) and embedding (items + 1, D) disagree: {tuple(hidden.shape)} "
            f"vs {tuple(embedding.shape)}"
        )
    if hidden.shape[0] == 0:
        raise ValueError("no target positions: hidden has 0 rows")
    if positives.shape != hidden.shape[:1]:
        raise ValueError(f"positives has shape {tuple(positives.shape)}, expected ({len(hidden)},)")


def _sampled_logits(
    hidden: torch.Tensor,
    positives: torch.Tensor,
    embedding: torch.Tensor,
    negatives: torch.Tensor,
    bias: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(s⁺ (N,), s⁻ (N, k), hit (N, k))``; ``hit`` marks negatives equal to the positive."""
    _check(hidden, positives, embedding)
    positive_logits = (hidden * embedding[positives]).sum(-1)
    if negatives.ndim == 1:
        negative_logits = hidden @ embedding[negatives].T
        hit = negatives[None, :] == positives[:, None]
    elif negatives.ndim == 2 and negatives.shape[0] == hidden.shape[0]:
        negative_logits = torch.einsum("nd,nkd->nk", hidden, embedding[negatives])
        hit = negatives == positives[:, None]
    else:
        raise ValueError(
            f"negatives must have shape (N, k) or (k,) with N = {len(hidden)}, "
            f"got {tuple(negatives.shape)}"
        )
    if bias is not None:
        positive_logits = positive_logits + bias[positives]
        negative_logits = negative_logits + bias[negatives]
    return positive_logits, negative_logits, hit


def gbce_beta(num_negatives: int, num_items: int, t: float) -> float:
    """``β = α (t (1 − 1/α) + 1/α)`` with ``α = k / (|I| − 1)`` (gSASRec, eq. for gBCE)."""
    if not 0.0 <= t <= 1.0:
        raise ValueError(f"gbce t must lie in [0, 1], got {t}")
    if not 0 < num_negatives <= num_items - 1:
        raise ValueError(f"num_negatives must lie in [1, {num_items - 1}], got {num_negatives}")
    alpha = num_negatives / (num_items - 1)
    return alpha * (t * (1.0 - 1.0 / alpha) + 1.0 / alpha)


def _binary_loss(
    positive_logits: torch.Tensor, negative_logits: torch.Tensor, hit: torch.Tensor, beta: float
) -> torch.Tensor:
    negative_terms = F.softplus(negative_logits).masked_fill(hit, 0.0).sum(-1)
    per_position = beta * F.softplus(-positive_logits) + negative_terms
    return (per_position / (negative_logits.shape[1] + 1)).mean()


def bce_loss(
    hidden: torch.Tensor,
    positives: torch.Tensor,
    embedding: torch.Tensor,
    negatives: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    return _binary_loss(*_sampled_logits(hidden, positives, embedding, negatives, bias), beta=1.0)


def gbce_loss(
    hidden: torch.Tensor,
    positives: torch.Tensor,
    embedding: torch.Tensor,
    negatives: torch.Tensor,
    t: float,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """gBCE; |I| = ``embedding.shape[0] − 1`` items, k = the number of negatives per position."""
    logits = _sampled_logits(hidden, positives, embedding, negatives, bias)
    beta = gbce_beta(negatives.shape[-1], embedding.shape[0] - 1, t)
    return _binary_loss(*logits, beta=beta)


def sampled_softmax_loss(
    hidden: torch.Tensor,
    positives: torch.Tensor,
    embedding: torch.Tensor,
    negatives: torch.Tensor,
    bias: torch.Tensor | None = None,
    log_q: torch.Tensor | None = None,
) -> torch.Tensor:
    positive_logits, negative_logits, hit = _sampled_logits(
        hidden, positives, embedding, negatives, bias
    )
    if log_q is not None:
        positive_logits = positive_logits - log_q[positives]
        negative_logits = negative_logits - log_q[negatives]
    negative_logits = negative_logits.masked_fill(hit, float("-inf"))
    logits = torch.cat([positive_logits[:, None], negative_logits], dim=1)
    return (torch.logsumexp(logits, dim=1) - positive_logits).mean()


class _ChunkedCrossEntropy(torch.autograd.Function):
    """Mean softmax CE over all items, chunked over rows, gradients computed in the forward pass.

    For a chunk of rows, ``∂loss/∂logits = (softmax − onehot) / N`` is known as soon as the logits
    are, so the forward pass accumulates ``∂/∂hidden`` (N, D), ``∂/∂embedding`` and ``∂/∂bias``
    chunk by chunk and frees each chunk's logits; backward only scales them by the incoming
    gradient. Three matmuls per chunk, as for the naive loss, but peak memory chunk_size × items.

    ``matmul_dtype=torch.bfloat16`` (under bf16 autocast) runs the three matmuls on bfloat16
    copies of their operands, which the CPU's bf16 units (AVX-512-BF16, AMX) multiply several
    times faster than float32 (the logits matmul of SASRec+ on ML-1M: 1.0 against 6.5 ms a
    chunk on an AVX-512-BF16 EPYC); the softmax, the loss and every accumulator stay float32,
    and the parameters are the caller's float32 masters.
    """

    @staticmethod
    def forward(ctx, hidden, positives, embedding, bias, chunk_size, matmul_dtype=None):
        need_hidden, _, need_embedding, need_bias, _, _ = ctx.needs_input_grad
        need_any = need_hidden or need_embedding or need_bias
        rows = hidden.shape[0]
        # float32 accumulation (float64 kept for reference checks), whatever autocast produced
        acc = torch.float64 if hidden.dtype == torch.float64 else torch.float32
        low = matmul_dtype if matmul_dtype is not None and acc == torch.float32 else acc
        weight = embedding.to(low)  # the bf16 path multiplies only bf16 copies
        grad_hidden = torch.empty_like(hidden, dtype=acc) if need_hidden else None
        grad_embedding = torch.zeros_like(weight, dtype=acc) if need_embedding else None
        grad_bias = torch.zeros_like(bias, dtype=acc) if need_bias else None
        total = hidden.new_zeros((), dtype=acc)
        # one logits buffer reused by every chunk: fresh large allocations page-fault on CPU
        buffer = hidden.new_empty((min(chunk_size, rows), weight.shape[0]), dtype=acc)
        for start in range(0, rows, chunk_size):
            h = hidden[start : start + chunk_size].to(low)
            target = positives[start : start + chunk_size]
            if low == acc:
                logits = torch.mm(h, weight.T, out=buffer[: len(h)])
            else:
                logits = buffer[: len(h)].copy_(torch.mm(h, weight.T))
            if bias is not None:
                logits += bias.to(acc)
            logits[:, 0] = float("-inf")
            target_logits = logits.gather(1, target[:, None]).squeeze(1)
            peak = logits.amax(dim=1, keepdim=True)
            probs = logits.sub_(peak).exp_()  # in place: unnormalised softmax of the chunk
            norm = probs.sum(dim=1)
            total += (peak.squeeze(1) + norm.log() - target_logits).sum()
            if need_any:
                grad_logits = probs.div_(norm[:, None] * rows)
                grad_logits[torch.arange(len(target), device=target.device), target] -= 1.0 / rows
                if low != acc:
                    grad_low = grad_logits.to(low)
                    if need_hidden:
                        grad_hidden[start : start + chunk_size] = torch.mm(grad_low, weight)
                    if need_embedding:
                        grad_embedding += torch.mm(grad_low.T, h)
                else:
                    if need_hidden:
                        torch.mm(grad_logits, weight, out=grad_hidden[start : start + chunk_size])
                    if need_embedding:
                        grad_embedding.addmm_(grad_logits.T, h)
                if need_bias:
                    grad_bias += grad_logits.sum(0)
        ctx.save_for_backward(
            *(
                g if g is not None else torch.empty(0)
                for g in (grad_hidden, grad_embedding, grad_bias)
            )
        )
        ctx.dtypes = (hidden.dtype, embedding.dtype, None if bias is None else bias.dtype)
        return total / rows

    @staticmethod
    def backward(ctx, grad_output):
        grad_hidden, grad_embedding, grad_bias = ctx.saved_tensors
        need_hidden, _, need_embedding, need_bias, _, _ = ctx.needs_input_grad
        hidden_dtype, embedding_dtype, bias_dtype = ctx.dtypes
        return (
            (grad_hidden * grad_output).to(hidden_dtype) if need_hidden else None,
            None,
            (grad_embedding * grad_output).to(embedding_dtype) if need_embedding else None,
            (grad_bias * grad_output).to(bias_dtype) if need_bias else None,
            None,
            None,
        )


def full_ce_loss(
    hidden: torch.Tensor,
    positives: torch.Tensor,
    embedding: torch.Tensor,
    bias: torch.Tensor | None = None,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Softmax CE over items 1..num_items; ``chunk_size=None`` materialises all N × items logits.
    Under CPU bf16 autocast the chunked loss multiplies in bfloat16 (see ``_ChunkedCrossEntropy``),
    as autocast would if the loss were built from its ops."""
    _check(hidden, positives, embedding)
    if chunk_size is None:
        logits = hidden @ embedding.T
        if bias is not None:
            logits = logits + bias
        logits[:, 0] = float("-inf")
        return F.cross_entropy(logits, positives)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size}")
    device = hidden.device.type
    low = None
    if torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device) == torch.bfloat16:
        low = torch.bfloat16
    return _ChunkedCrossEntropy.apply(hidden, positives, embedding, bias, chunk_size, low)


LOSS_NAMES = ("bce", "sampled_softmax", "ce", "gbce")
SAMPLERS = ("uniform", "popularity")


@dataclass(frozen=True)
class LossConfig(Config):
    """Which loss the trainer optimises and how it samples negatives (``attnsvm.rec.nn.losses``).

    ``num_negatives`` is per target position for bce/gbce/sampled_softmax and unused by ``ce``;
    ``logq_correction`` applies to sampled_softmax; ``ce_chunk_size`` rows of logits at a time for
    ``ce`` (None: all at once). ``negatives_avoid_row`` keeps every item of a training row (its
    window's inputs and targets) out of that row's negatives, as Klenitskiy & Vasilev's sampler
    does (SASRec's avoids the user's whole training sequence, the same for windows that hold all
    of it); by default only the positive itself is avoided. ``scale`` multiplies the loss (2 with
    BCE and one negative gives the official SASRec codes' unhalved sum ``softplus(−s⁺) +
    softplus(s⁻)``; 0 leaves only the model's auxiliary terms, as a pre-training stage that
    trains on them alone). ``last_targets = k`` counts only the targets at the last k positions
    of each window (BiCAT's ``clip_k``); None counts them all.
    """

    name: str = "ce"
    num_negatives: int = 1
    sampler: str = "uniform"
    logq_correction: bool = False
    gbce_t: float = 0.75
    # CE fwd + bwd of 13.5k rows × 3,417 items, 2 threads: 162–167 ms with 256–512-row chunks,
    # 188 ms with 1,024 (the chunk's logits then outgrow the caches)
    ce_chunk_size: int | None = 512
    negatives_avoid_row: bool = False
    #: weight of ``½‖E‖²`` on the input item table, added to the loss as the auxiliary term
    #: ``l2_emb`` (the official SASRec's ``--l2_emb``; 0 there and here)
    l2_emb: float = 0.0
    scale: float = 1.0
    last_targets: int | None = None

    def __post_init__(self) -> None:
        self._choice("name", LOSS_NAMES)
        if not (self.scale >= 0 and math.isfinite(self.scale)):
            raise ValueError(f"LossConfig.scale must be a finite number ≥ 0, got {self.scale}")
        if self.last_targets is not None and self.last_targets < 1:
            raise ValueError(
                f"LossConfig.last_targets must be ≥ 1 or None, got {self.last_targets}"
            )
        self._choice("sampler", SAMPLERS)
        if self.num_negatives < 1:
            raise ValueError(f"LossConfig.num_negatives must be ≥ 1, got {self.num_negatives}")
        self._range("gbce_t", 0.0, 1.0)
        if not (self.l2_emb >= 0 and math.isfinite(self.l2_emb)):
            raise ValueError(f"LossConfig.l2_emb must be a finite number ≥ 0, got {self.l2_emb}")
        if self.ce_chunk_size is not None and self.ce_chunk_size < 1:
            raise ValueError(
                f"LossConfig.ce_chunk_size must be ≥ 1 or None, got {self.ce_chunk_size}"
            )

    @property
    def sampled(self) -> bool:
        return self.name != "ce"

    def compute(
        self,
        hidden: torch.Tensor,
        positives: torch.Tensor,
        embedding: torch.Tensor,
        bias: torch.Tensor | None = None,
        negatives: torch.Tensor | None = None,
        log_q: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """This loss on gathered positions; ``log_q`` (items + 1,) is used iff logq_correction."""
        if self.name == "ce":
            return full_ce_loss(hidden, positives, embedding, bias, self.ce_chunk_size)
        if negatives is None:
            raise ValueError(f"loss {self.name!r} needs sampled negatives")
        if self.name == "bce":
            return bce_loss(hidden, positives, embedding, negatives, bias)
        if self.name == "gbce":
            return gbce_loss(hidden, positives, embedding, negatives, self.gbce_t, bias)
        if self.logq_correction and log_q is None:
            raise ValueError("logq_correction needs log_q, the sampler's log-probabilities")
        return sampled_softmax_loss(
            hidden, positives, embedding, negatives, bias, log_q if self.logq_correction else None
        )
