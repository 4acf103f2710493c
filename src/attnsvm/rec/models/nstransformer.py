"""Non-Stationary transformer for pointwise recommendation (Liu, Li, Payne, Yue & Man,
"Non-Stationary Transformer Architecture: A Versatile Framework for Recommendation Systems",
Electronics 13(11):2075, 2024), as reconstructed here.

**What is whose.** Only the abstract of the recommendation paper could be read: a transformer
with "mechanisms accounting for non-stationary elements", judged by LogLoss and F1 (≈ 8 % lower
LogLoss, up to 2 % higher F1 than "other attention-related models"); no code, no datasets. The
mechanism is the time-series paper's (Liu et al., NeurIPS 2022), checked against its official
code (thuml/Nonstationary_Transformers, ``ns_models/ns_Transformer.py``, ``DSAttention``):
series stationarisation of the input, de-stationary attention ``softmax((τ QKᵀ + Δ) / √d_h)``
with τ and Δ learned from the removed statistics by the ``Projector`` MLPs (2 × 128 ReLU,
circular 3-tap series conv), the same τ, Δ in every layer, de-normalisation of the output,
statistics detached (``attnsvm.rec.nn.stationary`` has the formulas and its window adaptation).

**Our reading** (each a config switch where it is a choice):

- the "series" is the embedded history: token t = √d · E[item_t] + W_r [r_{t−1}/rating_scale,
  1] (``rating_input``: the *previous* event's rating, so no token carries its own label);
  stationarised, then learned positions (from the right) are added, as the official
  ``DataEmbedding`` runs on the normalised series;
- the task is pointwise (BST-style, the candidate is the last token): position t predicts
  whether item_t is liked (``rating_t ≥ like_threshold``) from the items ≤ t and the ratings
  < t: ``logit_t = w · H_t + b + b_item[item_t]``, trained with BCE (the auxiliary term
  ``pointwise``; the pointwise runner turns the next-item loss off, ``loss.scale = 0``, unless a
  loss is configured: a positive scale adds the next-item CE as a second task). A window's
  first item has no previous rating, also where the window is cut from a longer history;
- ``objective = "causal"`` (all-position training): every statistic of position t (μ_t, σ_t,
  τ_t, Δ_t) is a prefix statistic over positions ≤ t, so no position reads a later one (tested);
  ``"last"``: the official whole-window statistics, trained on the last position of every
  prefix only;
- ``stationarise = False`` is the comparison baseline, the same encoder, head, loss and inputs
  without stationarisation (τ = 1, Δ = 0, no normalisation): SASRec's embedding and blocks;
- ``denormalise`` (the official ``dec_out * std + mean``) and ``detach_statistics`` (official)
  are switches.

The encoder is causal in both objectives (the official encoder is bidirectional). The model
scores (history, candidate) pairs, not a next-item ranking: ``score_last`` refuses, and
``attnsvm.rec.train.pointwise`` trains and evaluates it (LogLoss, F1, AUC). Ratings are
required (``extra_inputs``): data without them is refused before training.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from attnsvm.errors import InvalidRequest
from attnsvm.rec.models.base import SequentialRecommender
from attnsvm.rec.models.sasrec import SASRecConfig
from attnsvm.rec.nn.dropout import Dropout
from attnsvm.rec.nn.embedding import ItemEmbedding
from attnsvm.rec.nn.stationary import (
    DestationaryAttention,
    DestationaryFactors,
    scaled_queries,
    window_statistics,
)


@dataclass(frozen=True)
class NSTransformerConfig(SASRecConfig):
    """SASRec's fields plus the switches of the module docstring."""

    max_len: int = 50
    dropout: float = 0.2
    attention_dropout: float = 0.2
    stationarise: bool = True
    objective: str = "causal"  # "causal": prefix statistics, all positions | "last"
    denormalise: bool = True
    detach_statistics: bool = True
    projector_hidden: int = 128
    projector_layers: int = 2
    rating_input: bool = True
    rating_scale: float = 5.0
    like_threshold: float = 4.0  # label: rating ≥ this
    pointwise_weight: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        self._choice("objective", ("causal", "last"))
        self._choice("position", ("learned", "none"))
        for name in ("projector_hidden", "projector_layers"):
            if getattr(self, name) < 1:
                raise ValueError(
                    f"NSTransformerConfig.{name} must be ≥ 1, got {getattr(self, name)}"
                )
        if not self.rating_scale > 0:
            raise ValueError(
                f"NSTransformerConfig.rating_scale must be > 0, got {self.rating_scale}"
            )
        if self.pointwise_weight < 0:
            raise ValueError(
                f"NSTransformerConfig.pointwise_weight must be ≥ 0, got {self.pointwise_weight}"
            )


def previous_ratings(ratings: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(B, L, 2): each position's previous event's rating and whether there is one (0, 0 at the
    window's first item and at padding)."""
    has_previous = torch.zeros_like(valid)
    has_previous[:, 1:] = valid[:, 1:] & valid[:, :-1]
    previous = torch.zeros_like(ratings)
    previous[:, 1:] = ratings[:, :-1]
    flag = has_previous.to(ratings.dtype)
    return torch.stack([previous * flag, flag], dim=-1)


class NSTransformer(SequentialRecommender):
    objective = "causal"
    config_class = NSTransformerConfig
    extra_inputs = ("ratings",)
    padding_free = True  # real positions only in the statistics; columns counted from the right

    def __init__(self, num_items: int, config: NSTransformerConfig | None = None) -> None:
        config = config or NSTransformerConfig()
        super().__init__(num_items, config)
        self.objective = config.objective
        dim = config.hidden_size
        self.items = ItemEmbedding(num_items, dim, output_bias=True)  # bias: b_item of the head
        self.scale = math.sqrt(dim) if config.scale_embeddings else 1.0
        self.rating = nn.Linear(2, dim, bias=False) if config.rating_input else None
        self.position = nn.Embedding(config.max_len, dim) if config.position != "none" else None
        self.dropout = Dropout(config.dropout)
        attention = None
        if config.stationarise:
            attention = partial(
                DestationaryAttention, dim, config.num_heads, config.attention_dropout
            )
        self.stack = self.build_encoder(
            causal=True,
            attention=attention,
            attention_output_dropout=config.attention_output_dropout,
        )
        self.head = nn.Linear(dim, 1)
        self.init_weights()
        self.factors = None
        if config.stationarise:  # drawn after the rest: the baseline's weights stay the same
            self.factors = DestationaryFactors(
                dim,
                config.max_len,
                dim // config.num_heads,
                config.projector_hidden,
                config.projector_layers,
            )
            self.init_weights(self.factors)

    def _check_ratings(self, item_seq: torch.Tensor, ratings: torch.Tensor | None) -> torch.Tensor:
        if ratings is None or ratings.shape != item_seq.shape:
            got = None if ratings is None else tuple(ratings.shape)
            raise InvalidRequest(
                f"NSTransformer needs ratings (B, L) aligned with item_seq "
                f"{tuple(item_seq.shape)}, got {got}: its labels and inputs are ratings"
            )
        return ratings

    def _encode(self, item_seq, ratings, last_query_only: bool) -> torch.Tensor:
        self.check_input(item_seq)
        ratings = self._check_ratings(item_seq, ratings)
        config = self.config
        valid = item_seq != 0
        keep = valid.unsqueeze(-1)
        raw = self.items(item_seq) * self.scale
        if self.rating is not None:
            features = previous_ratings(ratings.to(raw.dtype), valid)
            raw = raw + self.rating(features / torch.tensor([config.rating_scale, 1.0]).to(raw))
        raw = raw * keep.to(raw.dtype)
        x, bias, tau, mean, std = raw, None, None, None, None
        if self.factors is not None:
            prefix = self.objective == "causal"
            source = raw.detach() if config.detach_statistics else raw
            mean, std = window_statistics(source, valid, prefix)
            x = (raw - mean) / std
            tau, bias = self.factors(source, valid, mean, std, prefix)
        if self.position is not None:
            x = x + self.position.weight[config.max_len - item_seq.shape[1] :]
        x = self.dropout(x) * keep.to(x.dtype)
        with scaled_queries(self.stack, tau) if tau is not None else nullcontext():
            hidden = self.stack(x, valid, last_query_only, pair_bias=bias)
        if mean is not None and config.denormalise:
            columns = slice(-1, None) if last_query_only else slice(None)
            hidden = hidden * std[:, columns] + mean[:, columns]
            hidden = hidden * keep[:, columns].to(hidden.dtype)
        return hidden

    def forward(self, item_seq: torch.Tensor, ratings: torch.Tensor | None = None) -> torch.Tensor:
        return self._encode(item_seq, ratings, last_query_only=False)

    def last_hidden(
        self, item_seq: torch.Tensor, ratings: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self._encode(item_seq, ratings, last_query_only=True)[:, -1]

    def pointwise_logits(self, items: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """Logit that ``items`` (…) are liked, from the hidden states (…, D) at their positions."""
        return self.head(hidden).squeeze(-1) + self.items.bias[items]

    def score_pairs(self, item_seq: torch.Tensor, ratings: torch.Tensor) -> torch.Tensor:
        """(B,) logit that each window's last item is liked, given the items and ratings before
        it (the last item's own rating is never read)."""
        return self.pointwise_logits(item_seq[:, -1], self.last_hidden(item_seq, ratings))

    def score_last(self, item_seq: torch.Tensor, **extras: torch.Tensor) -> torch.Tensor:
        raise InvalidRequest(
            "nstransformer predicts whether a (history, candidate) pair is liked, not the next "
            "item: evaluate it pointwise (attnsvm.rec.train.pointwise.train_pointwise)"
        )

    def auxiliary_weights(self) -> dict[str, float]:
        return {"pointwise": self.config.pointwise_weight}

    def auxiliary_losses(self, names, item_seq, hidden, ratings=None, **_) -> dict:
        """``pointwise``: mean BCE of the like-logits against ``rating ≥ like_threshold`` over
        every real position (``causal``) or the last one of each window (``last``)."""
        ratings = self._check_ratings(item_seq, ratings)
        trained = item_seq != 0
        if self.objective == "last":
            trained[:, :-1] = False
        logits = self.pointwise_logits(item_seq[trained], hidden[trained])
        labels = (ratings[trained] >= self.config.like_threshold).to(logits.dtype)
        return {"pointwise": F.binary_cross_entropy_with_logits(logits, labels)}
