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
- ``full_ce_loss``: softmax cross-entropy over the whole catalogue (the padding item 0 excluded),
  its memory bounded by row and item chunks (``attnsvm.rec.nn.full_ce``).

``LossConfig`` names the loss a run trains with and its sampling; ``LossConfig.compute`` is the
one dispatch from that name to the functions above, and ``LossConfig.shared_negatives`` draws a
step's negatives shared by all its positions (from the sampler, the batch's targets or both)
with their log-q correction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from attnsvm.rec.config_base import Config
from attnsvm.rec.nn.embedding import SPARSE_ROWS, table_rows
from attnsvm.rec.nn.full_ce import check_inputs, full_ce_loss

if TYPE_CHECKING:
    from attnsvm.rec.data.samplers import PopularitySampler, UniformSampler


#: per-position negatives are picked from every item's logit (``hidden @ tableᵀ``) where the
#: table has at most this many rows per negative: one matrix product then costs less than
#: gathering N·k table rows and scattering their gradient back (gSASRec's 256 negatives over
#: ML-1M's 3,417 items: a 3.4× cheaper step, benchmarks/gsasrec_cost.py)
DENSE_ROWS_PER_NEGATIVE = 32
#: the all-item logits are formed for chunks of rows of at most this many scores at once
DENSE_CHUNK_SCORES = 2**24


def _picked_from_all_items(
    hidden: torch.Tensor, embedding: torch.Tensor, picks: torch.Tensor
) -> torch.Tensor:
    """``(N, m)``: ``hidden[n] · embedding[picks[n, j]]``, read off ``hidden @ embeddingᵀ``."""
    rows = max(1, DENSE_CHUNK_SCORES // embedding.shape[0])
    parts = [
        (hidden[start : start + rows] @ embedding.T).gather(1, picks[start : start + rows])
        for start in range(0, len(hidden), rows)
    ]
    return torch.cat(parts)


def _sampled_logits(
    hidden: torch.Tensor,
    positives: torch.Tensor,
    embedding: torch.Tensor,
    negatives: torch.Tensor,
    bias: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(s⁺ (N,), s⁻ (N, k), hit (N, k))``; ``hit`` marks negatives equal to the positive."""
    check_inputs(hidden, positives, embedding)
    per_position = negatives.ndim == 2 and negatives.shape[0] == hidden.shape[0]
    dense = embedding.shape[0] <= DENSE_ROWS_PER_NEGATIVE * negatives.shape[-1]
    if per_position and dense and not getattr(embedding, SPARSE_ROWS, False):
        picked = _picked_from_all_items(
            hidden, embedding, torch.cat([positives[:, None], negatives], dim=1)
        )
        positive_logits, negative_logits = picked[:, 0], picked[:, 1:]
        hit = negatives == positives[:, None]
    elif negatives.ndim == 1:
        # one gather for positives and negatives: its backward fills one dense gradient of the
        # whole table, not two (over a large catalogue such fills are much of a step)
        rows = table_rows(embedding, torch.cat([positives, negatives]))
        positive_logits = (hidden * rows[: len(positives)]).sum(-1)
        negative_logits = hidden @ rows[len(positives) :].T
        hit = negatives[None, :] == positives[:, None]
    elif per_position:
        positive_logits = (hidden * table_rows(embedding, positives)).sum(-1)
        negative_logits = torch.einsum("nd,nkd->nk", hidden, table_rows(embedding, negatives))
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


LOSS_NAMES = ("bce", "sampled_softmax", "ce", "gbce")
SAMPLERS = ("uniform", "popularity")
#: where a sampled loss's negatives come from (``LossConfig.negatives``)
NEGATIVE_SOURCES = ("per_position", "shared", "in_batch", "mixed")


@dataclass(frozen=True)
class LossConfig(Config):
    """Which loss the trainer optimises and how it samples negatives (``attnsvm.rec.nn.losses``).

    ``num_negatives`` is per target position for bce/gbce/sampled_softmax (per step where they
    are shared, ``negatives`` below) and unused by ``ce``; ``logq_correction`` applies to
    sampled_softmax; ``ce_chunk_size`` rows of logits at a time for ``ce`` (None: all at once).
    ``negatives_avoid_row`` keeps every item of a training row (its window's inputs and targets)
    out of that row's negatives, as Klenitskiy & Vasilev's sampler does (SASRec's avoids the
    user's whole training sequence, the same for windows that hold all of it); by default only
    the positive itself is avoided. ``scale`` multiplies the loss (2 with BCE and one negative
    gives the official SASRec codes' unhalved sum ``softplus(−s⁺) + softplus(s⁻)``; 0 leaves
    only the model's auxiliary terms, as a pre-training stage that trains on them alone).
    ``last_targets = k`` counts only the targets at the last k positions of each window (BiCAT's
    ``clip_k``); None counts them all.

    ``negatives`` says where a sampled loss's ``num_negatives`` negatives come from:
    ``per_position`` (default) draws them for every target position, the positive excluded;
    the others draw one set per step that every position of the batch shares, so the loss is
    one ``(positions × d) @ (d × k)`` product (``shared_negatives``): ``shared`` from the
    sampler, ``in_batch`` from the batch's own targets, ``mixed`` half from each. A shared
    negative equal to a position's positive is masked for that position. ``ce_item_chunk``
    items at a time for ``ce`` (None: every item at once), with ``ce_chunk_size`` rows: the
    logits of one tile at a time, whatever the catalogue (``_ItemChunkedCrossEntropy``).
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
    negatives: str = "per_position"
    ce_item_chunk: int | None = None

    def __post_init__(self) -> None:
        self._choice("name", LOSS_NAMES)
        self._choice("negatives", NEGATIVE_SOURCES)
        if self.negatives != "per_position":
            if self.name == "ce":
                raise ValueError(
                    f"LossConfig.negatives = {self.negatives!r} needs a sampled loss "
                    "(bce, gbce, sampled_softmax); ce scores every item"
                )
            if self.negatives_avoid_row:
                raise ValueError(
                    "LossConfig.negatives_avoid_row needs negatives = 'per_position': a shared "
                    "set cannot avoid every row's own items"
                )
        if self.negatives == "mixed" and self.num_negatives < 2:
            raise ValueError(
                "LossConfig.negatives = 'mixed' draws half of num_negatives from the sampler "
                f"and half from the batch: num_negatives must be ≥ 2, got {self.num_negatives}"
            )
        if self.ce_item_chunk is not None and self.ce_item_chunk < 1:
            raise ValueError(
                f"LossConfig.ce_item_chunk must be ≥ 1 or None, got {self.ce_item_chunk}"
            )
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
            return full_ce_loss(
                hidden, positives, embedding, bias, self.ce_chunk_size, self.ce_item_chunk
            )
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

    def shared_negatives(
        self,
        sampler: UniformSampler | PopularitySampler,
        targets: torch.Tensor | np.ndarray,
        sampler_log_q: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One step's ``(num_negatives,)`` negatives shared by all its target positions, and the
        ``log_q`` (items + 1,) that ``compute`` corrects them with (None without
        ``logq_correction``).

        ``targets`` are the step's target items (every one of the global batch, so every process
        draws the same set). ``shared``: k draws from ``sampler`` (whose log-probabilities are
        ``sampler_log_q``); ``in_batch``: k draws of a target occurrence, so an item is drawn in
        proportion to its count c among the N targets; ``mixed``: ⌈k/2⌉ and ⌊k/2⌋ of each. The
        correction is the log of each item's expected number of draws, ``log(k₁ q + k₂ c / N)``:
        for one source a constant shift of log q (which the softmax ignores), for two the
        balance-heuristic weight of a sample drawn from both. Draws use ``sampler.rng``, so the
        run's seed fixes them.
        """
        if self.negatives == "per_position":
            raise ValueError("negatives = 'per_position' draws per position: use the sampler")
        pool = np.asarray(torch.as_tensor(targets).reshape(-1).cpu(), dtype=np.int64)
        k = self.num_negatives
        from_sampler = {"shared": k, "in_batch": 0, "mixed": k - k // 2}[self.negatives]
        from_batch = k - from_sampler
        drawn = [np.asarray(sampler.draw(from_sampler), dtype=np.int64)]
        drawn.append(pool[sampler.rng.integers(0, pool.size, size=from_batch)])
        negatives = torch.from_numpy(np.concatenate(drawn))
        if not self.logq_correction:
            return negatives, None
        if not from_batch:
            return negatives, sampler_log_q
        expected = from_batch * np.bincount(pool, minlength=len(sampler_log_q)) / pool.size
        if from_sampler:
            expected = expected + from_sampler * np.exp(sampler_log_q.double().numpy())
        with np.errstate(divide="ignore"):  # items never drawn: −∞, never read
            return negatives, torch.from_numpy(np.log(expected)).to(sampler_log_q.dtype)
