"""BiCAT (Jiang et al., arXiv 2112.06460): SASRec trained on reversed and augmented histories.

The network is SASRec (the official TF code is the SASRec TF code plus ASReP's augmentation):
one encoder serves every stream. What BiCAT adds is how it is trained, in three stages, which
``attnsvm train --recipe bicat`` runs end to end (``attnsvm.rec.train.recipe``):

1. **Reverse pre-training** (``data.reverse_train = true``): every training row newest first,
   so the trainer's causal BCE predicts the item *before* each position (ASReP), plus the
   auxiliary term ``forward`` (weight ``forward_weight``, λ): the same encoder's BCE on the row in
   chronological order, the "forward constraint". It reads the row before the reversal from the
   ``source`` training stream (``attnsvm.rec.train.streams``).
2. **Generation** (``attnsvm.rec.train.generate``): the pre-trained model writes up to k
   pseudo-prior items for every user shorter than M, greedily, as a versioned artefact marked
   synthetic.
3. **Self-distillation fine-tuning** (``train.init_from`` the pre-trained run,
   ``data.synthetic_prefix`` the artefact): the trainer's BCE on the augmented row, counted at the
   last ``clip_k`` positions only (``loss.last_targets``, "informative positive sampling"), plus
   ``kl`` (weight ``kl_weight``, α): the symmetric KL between the softmax of the hidden states
   of the augmented row and of the original row (the ``source`` stream), position by position
   with both right-aligned.

**From the official code** (juyongjiang/BiCAT ``model.py``, ``sampler.py``, ``util.py``,
``run_*.sh``; the paper could not be read in full): the SASRec layout, the reversed main
stream, the forward stream's window (the newest items of the row, predicting each next item),
λ = 0.4 and α = 1.0 for Beauty, the hidden-state (not item-logit) KL and the generation
procedure. The BCE there is the unhalved
sum ``softplus(−s⁺) + softplus(s⁻)``: the presets train with ``loss.scale = 2`` (the platform's
BCE is the mean of the two terms) and ``forward`` uses the same sum.

**Our reading (switches):**

- ``forward_negatives``: the stored ``model.py`` computes the forward term's negative half on the
  *reversed* stream's negative logits (the main loss's own negative term, counted again) and
  multiplies the forward term by 1 although the script passes λ = 0.4. The trainer's negatives
  are not visible here, so ``"own"`` (default) gives the forward stream its own uniform
  negatives (a proper BCE) and ``"none"`` keeps its positive half only.
- ``kl_positions``: the KL version of ``model.py`` is not in the stored snapshot (the research
  notes read it: softmax over the d hidden units, every position of the window).
  ``"augmented"`` (default) takes every real position of the augmented window, where the
  original row has padding (a zero hidden state, a uniform softmax) at the synthetic positions;
  ``"original"`` only the positions both rows share.
- ``aux_mean``: ``"window"`` (default) averages a term over the whole ``max_len`` window, padding
  included, as an element-wise mean over the official ``(B, maxlen, d)`` tensors does;
  ``"positions"`` over the real positions only. The trainer weights length groups by their
  share of the batch's targets, so ``"window"`` is the official mean exactly when a batch is one
  group (``train.length_groups = 1``) and a re-weighting of the groups' means otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnsvm.rec.models.sasrec import SASRec, SASRecConfig


@dataclass(frozen=True)
class BiCATConfig(SASRecConfig):
    """SASRec's fields plus the weights of the two auxiliary terms (0: the term is off)."""

    forward_weight: float = 0.0  # λ, stage 1: BCE of the row in chronological order
    forward_negatives: str = "own"  # "own" | "none" (see the module docstring)
    kl_weight: float = 0.0  # α, stage 3: symmetric KL between augmented and original rows
    kl_positions: str = "augmented"  # "augmented" | "original"
    aux_mean: str = "window"  # "window" | "positions"

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("forward_weight", "kl_weight"):
            if getattr(self, name) < 0:
                raise ValueError(f"BiCATConfig.{name} must be ≥ 0, got {getattr(self, name)}")
        self._choice("forward_negatives", ("own", "none"))
        self._choice("kl_positions", ("augmented", "original"))
        self._choice("aux_mean", ("window", "positions"))


class BiCAT(SASRec):
    config_class = BiCATConfig

    def auxiliary_weights(self) -> dict[str, float]:
        return {"forward": self.config.forward_weight, "kl": self.config.kl_weight}

    def auxiliary_streams(self) -> tuple[str, ...]:
        active = self.config.forward_weight or self.config.kl_weight
        return ("source",) if active else ()

    def auxiliary_losses(
        self, names: list[str], item_seq: torch.Tensor, hidden: torch.Tensor, *, source
    ) -> dict[str, torch.Tensor]:
        """``source`` (B, W + 1): each window's row before the data transforms, its last item
        the window's final target (chronological when the trainer reads reversed rows; without
        the synthetic prefix when it reads augmented ones)."""
        terms = {}
        if "forward" in names:
            terms["forward"] = self.forward_term(source)
        if "kl" in names:
            terms["kl"] = self.kl_term(item_seq, hidden, source[:, :-1])
        return terms

    def _mean(self, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``values`` (B, L) averaged over ``mask``'s positions or over the whole window."""
        total = (values * mask).sum()
        if self.config.aux_mean == "window":
            return total / (values.shape[0] * self.config.max_len)
        return total / mask.sum().clamp(min=1)

    def forward_term(self, source: torch.Tensor) -> torch.Tensor:
        """BCE (the official unhalved sum) of every position of the source row predicting its
        next item, in a second forward pass of the encoder."""
        inputs, targets = source[:, :-1], source[:, 1:]
        mask = (inputs != 0).to(self.items.input.weight.dtype)
        hidden = self(inputs)
        table = self.output_embedding()
        loss = F.softplus(-(hidden * table[targets]).sum(-1))
        if self.config.forward_negatives == "own":
            negatives = torch.randint(1, self.num_items + 1, targets.shape, device=targets.device)
            loss = loss + F.softplus((hidden * table[negatives]).sum(-1))
        return self._mean(loss, mask)

    def kl_term(
        self, item_seq: torch.Tensor, hidden: torch.Tensor, original: torch.Tensor
    ) -> torch.Tensor:
        """½[KL(p_aug ‖ p_org) + KL(p_org ‖ p_aug)] of the softmax over the hidden units, per
        position, averaged over the units (an element-wise mean) and over the positions."""
        original_hidden = self(original)
        log_p, log_q = hidden.log_softmax(-1), original_hidden.log_softmax(-1)
        per_unit = 0.5 * (log_p.exp() * (log_p - log_q) + log_q.exp() * (log_q - log_p))
        positions = item_seq if self.config.kl_positions == "augmented" else original
        mask = (positions != 0).to(hidden.dtype)
        return self._mean(per_unit.mean(-1), mask)
