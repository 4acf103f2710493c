"""RLT4Rec (Rajapakse & Leith 2024): a reward-conditioned transformer over (rating, item) tokens.

Ported from the official code (``dilina-r/RLT4Rec``: ``model_gpt.py`` ``GPT.forward``,
``train_rlt.py``, ``DataLoaderGPT.evaluate_online``); the paper itself could not be read in
full here. What is the official code's:

- tokens ``[r_1, a_1, r_2, a_2, …]``: a rating token ``tanh(Linear(r))`` before the item it
  rates, an item token ``tanh(E[a])``, plus a learned position per token (from the episode's
  first token, zero-initialised), dropout, then a causal pre-LN GPT stack (2 blocks, 4 heads,
  d = 128, GELU FFN of 4d, dropout 0.1) and a final LayerNorm;
- the **action head** reads the rating token: ``logits_t = W h(r_t) + b`` (after dropout)
  predicts the item ``a_t`` that earned rating ``r_t``: the model is conditioned on the rating
  it should obtain;
- the **rating head** (the "inner-product bottleneck"): ``r̃_{t+1} = tanh(W_s h(a_t)) ·
  tanh(E[a_{t+1}])`` predicts the rating of the next item; loss = CE(actions) + MSE(ratings);
- acting: the rating token of the next step is the target rating (5, ``target_rating``); the
  best-scored item not yet shown is recommended, and its observed rating replaces the target;
- initialisation: Normal(0, 0.02) for the blocks, the item table and the head, torch's default
  for the rating embedding and the rating head, zero positions.

Ours, and where it departs:

- **padding**: the official batches pad actions with item 0, a real item of its 0-based
  catalogue, and ``train_rlt.py`` overwrites the targets with the actions (``targets =
  clone(actions)``), so every padded step trains "recommend item 0". Here ids are 1-based,
  padding is 0, padding keys are masked and padded steps carry no target;
- the official ``global_pos_emb`` is indexed by ``max(1, tlen − 25)``, always 1 for its episodes
  of ≤ 25 steps: a constant added to every token, which the learned positions already span;
  it is left out;
- sequences are left-padded (the platform's convention) with positions counted from the first
  real token, so outputs do not depend on the padding (``padding_free``);
- under the platform's trainer (``attnsvm train --model rlt4rec``, ``objective = "causal"``,
  ``extra_inputs = ("ratings",)``) position t's output is the state of the rating token of
  item t + 1, conditioned on that item's *logged* rating; the last position (whose target's
  rating the window does not hold) and every recommendation are conditioned on
  ``target_rating``. The rating head is the auxiliary term ``rating`` (weight
  ``rating_loss_weight``; it re-encodes the window, a second pass the official single-pass
  loss in ``rec/sim/rlt4rec_training.py`` does not need). That trainer sees no "first item from
  nothing" step, so cold-start episodes use the model trained by ``rlt4rec_training``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from attnsvm.rec.models.base import SequentialRecommender, TransformerConfig
from attnsvm.rec.nn.dropout import Dropout
from attnsvm.rec.nn.embedding import ItemEmbedding


@dataclass(frozen=True)
class RLT4RecConfig(TransformerConfig):
    """The official ``train_rlt.py`` sizes; ``max_len`` is the episode length (25)."""

    hidden_size: int = 128
    num_blocks: int = 2
    num_heads: int = 4
    ffn_size: int = 512  # minGPT's 4·d
    max_len: int = 25
    norm: str = "pre"
    activation: str = "gelu"
    position: str = "learned_from_start"
    scale_embeddings: bool = False
    separate_output_embedding: bool = True  # the action head is its own table (and bias)
    #: the rating asked for when acting (and at the last training position); 5 in the code
    target_rating: float = 5.0
    #: weight of the rating head's MSE beside the action CE (1 in the official loss)
    rating_loss_weight: float = 1.0
    ffn_optional: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        fixed = {
            "position": "learned_from_start",
            "scale_embeddings": False,
            "separate_output_embedding": True,
            "item_dropout": 0.0,
        }
        for name, value in fixed.items():
            if getattr(self, name) != value:
                raise ValueError(
                    f"RLT4RecConfig.{name} must be {value!r} (the official token model), "
                    f"got {getattr(self, name)!r}"
                )
        if self.rating_loss_weight < 0:
            raise ValueError(
                f"RLT4RecConfig.rating_loss_weight must be ≥ 0, got {self.rating_loss_weight}"
            )


class RLT4Rec(SequentialRecommender):
    objective = "causal"
    config_class = RLT4RecConfig
    extra_inputs = ("ratings",)
    padding_free = True
    attention_over_items = False  # 2L + 1 interleaved rating and item tokens

    def __init__(self, num_items: int, config: RLT4RecConfig | None = None) -> None:
        config = config or RLT4RecConfig()
        super().__init__(num_items, config)
        dim = config.hidden_size
        self.items = ItemEmbedding(num_items, dim, separate_output=True, output_bias=True)
        self.rating_embedding = nn.Linear(1, dim)
        self.position = nn.Embedding(2 * config.max_len + 1, dim)  # + the target's token
        self.dropout = Dropout(config.dropout)
        self.encoder = self.build_encoder(causal=True)
        self.head_dropout = Dropout(config.dropout)
        self.rating_state = nn.Linear(dim, dim, bias=False)
        self.init_weights()
        # the official code builds these after its Normal(0, 0.02) pass: torch's defaults
        self.rating_embedding.reset_parameters()
        self.rating_state.reset_parameters()
        nn.init.zeros_(self.position.weight)

    def token_states(
        self, item_seq: torch.Tensor, ratings: torch.Tensor, next_rating: float | None = None
    ) -> torch.Tensor:
        """Encoder states of ``[r_1, a_1, …, r_L, a_L]`` (B, 2L, D), and of a last rating token
        ``next_rating`` (B, 2L + 1, D) when it is given."""
        self.check_input(item_seq)
        batch, length = item_seq.shape
        dtype = self.rating_embedding.weight.dtype
        if ratings.shape != item_seq.shape:
            raise ValueError(
                f"ratings {tuple(ratings.shape)} must align with item_seq {tuple(item_seq.shape)}"
            )
        rated = torch.tanh(self.rating_embedding(ratings.to(dtype).unsqueeze(-1)))
        chosen = torch.tanh(self.items(item_seq))
        tokens = torch.stack([rated, chosen], dim=2).reshape(batch, 2 * length, -1)
        valid = (item_seq != 0).repeat_interleave(2, dim=1)
        if next_rating is not None:
            target = torch.full((batch, 1, 1), next_rating, dtype=dtype, device=item_seq.device)
            tokens = torch.cat([tokens, torch.tanh(self.rating_embedding(target))], dim=1)
            valid = torch.cat([valid, valid.new_ones(batch, 1)], dim=1)
        index = (valid.cumsum(dim=1) - 1).clamp(min=0)  # from the first real token
        x = self.dropout(tokens + self.position(index)) * valid.unsqueeze(-1).to(dtype)
        return self.encoder(x, valid)

    def forward(self, item_seq: torch.Tensor, ratings: torch.Tensor) -> torch.Tensor:
        """(B, L, D): position t holds the rating-token state that predicts item t + 1 (the
        logged rating of item t + 1, and ``target_rating`` after the last); zero at padding."""
        states = self.token_states(item_seq, ratings, self.config.target_rating)[:, 2::2]
        return self.head_dropout(states) * (item_seq != 0).unsqueeze(-1).to(states.dtype)

    def last_hidden(self, item_seq: torch.Tensor, ratings: torch.Tensor) -> torch.Tensor:
        """The target-rating token's state: the next recommendation, also after no history."""
        states = self.token_states(item_seq, ratings, self.config.target_rating)
        return self.head_dropout(states[:, -1])

    def rating_error(
        self, item_states: torch.Tensor, item_seq: torch.Tensor, ratings: torch.Tensor
    ) -> torch.Tensor:
        """Mean squared error of ``r̃_{t+1} = tanh(W_s h(a_t)) · tanh(E[a_{t+1}])`` over the
        pairs of consecutive real items; ``item_states`` (B, L, D) are the item tokens'."""
        predicted = (
            torch.tanh(self.rating_state(item_states[:, :-1]))
            * torch.tanh(self.items(item_seq[:, 1:]))
        ).sum(dim=-1)
        pairs = (item_seq[:, :-1] != 0) & (item_seq[:, 1:] != 0)
        error = (predicted - ratings[:, 1:].to(predicted.dtype)) ** 2
        return (error * pairs).sum() / pairs.sum().clamp(min=1)

    def episode_losses(
        self, item_seq: torch.Tensor, ratings: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The official training loss of a batch of episodes, in one pass: CE of every real
        item from its rating token (the first item too: a cold start) and the rating MSE."""
        states = self.token_states(item_seq, ratings)
        real = item_seq != 0
        logits = self.logits(self.head_dropout(states[:, 0::2][real]))
        actions = F.cross_entropy(logits, item_seq[real])
        return actions, self.rating_error(states[:, 1::2], item_seq, ratings)

    def auxiliary_weights(self) -> dict[str, float]:
        return {"rating": self.config.rating_loss_weight}

    def auxiliary_losses(
        self, names: list[str], item_seq: torch.Tensor, hidden: torch.Tensor, **extras
    ) -> dict[str, torch.Tensor]:
        if names != ["rating"]:
            raise NotImplementedError(f"RLT4Rec defines only the auxiliary loss 'rating': {names}")
        ratings = extras["ratings"]
        states = self.token_states(item_seq, ratings)
        return {"rating": self.rating_error(states[:, 1::2], item_seq, ratings)}
