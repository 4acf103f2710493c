"""SSE-PT (Wu, Li, Hsieh & Sharpnack, RecSys 2020): SASRec personalised by a user embedding.

Every input position carries ``[E[s_t] ; U[u]]`` (item part ``hidden_size − user_size`` wide,
user part ``user_size``), plus a position embedding over the concatenation, into a causal SASRec
encoder of width ``hidden_size``. Candidates are scored as ``[e_i ; w]``: the user half of the
hidden state meets a learned vector ``w`` that is the same for every item. (The RecBole
reimplementation concatenates the user's own embedding there instead; either way the term is
constant across items, so rankings and softmax losses do not see it — it only acts as a learned
per-position bias under BCE.)

**Regularisation.** Stochastic Shared Embeddings (``attnsvm.rec.nn.sse``) replace, in training
only, the user id with probability ``user_sse`` and each input item with probability
``item_sse`` by a uniform random one (official flags ``--threshold_user 0.08
--threshold_item 0.9`` → 0.92 and 0.1).

**Users.** ``forward(item_seq, users=...)`` takes internal user ids 0..num_users−1 (set
``num_users`` in the config). Without ``users``, or for an id ≥ ``num_users`` (a user the model
never saw — user embeddings are transductive), the model uses a learned "unknown user" vector
(table row 0), so it still recommends from the item history alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from attnsvm.rec.models.base import SequentialRecommender, TransformerConfig
from attnsvm.rec.nn.dropout import Dropout
from attnsvm.rec.nn.embedding import ItemEmbedding
from attnsvm.rec.nn.sse import StochasticSharedEmbedding


@dataclass(frozen=True)
class SSEPTConfig(TransformerConfig):
    num_users: int = 0
    user_size: int = 32
    user_sse: float = 0.92
    item_sse: float = 0.1
    objective: str = "causal"  # "causal" | "last"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.user_size < self.hidden_size:
            raise ValueError(
                f"SSEPTConfig.user_size must lie in [1, hidden_size), got {self.user_size}"
            )
        if self.num_users < 0:
            raise ValueError(f"SSEPTConfig.num_users must be ≥ 0, got {self.num_users}")
        self._range("user_sse", 0.0, 1.0)
        self._range("item_sse", 0.0, 1.0)
        self._choice("objective", ("causal", "last"))


class SSEPT(SequentialRecommender):
    objective = "causal"
    config_class = SSEPTConfig
    padding_free = True

    extra_inputs = ("users",)

    def __init__(self, num_items: int, config: SSEPTConfig | None = None) -> None:
        config = config or SSEPTConfig()
        super().__init__(num_items, config)
        self.objective = config.objective
        dim, user_size = config.hidden_size, config.user_size
        self.items = ItemEmbedding(num_items, dim - user_size, table_dropout=config.item_dropout)
        self.users = nn.Embedding(config.num_users + 1, user_size)  # row 0: unknown user
        self.candidate_user_part = nn.Parameter(torch.zeros(user_size))
        if config.position == "learned_from_start":
            raise ValueError(
                "SSEPTConfig.position: 'learned_from_start' is not implemented for "
                "SSE-PT; use 'learned' or 'none'"
            )
        self.position = nn.Embedding(config.max_len, dim) if config.position == "learned" else None
        self.item_sse = StochasticSharedEmbedding(num_items, config.item_sse)
        self.user_sse = StochasticSharedEmbedding(config.num_users, config.user_sse)
        self.dropout = Dropout(config.dropout)
        self.encoder = self.build_encoder(causal=True)
        self.init_weights()

    def user_rows(self, users: torch.Tensor | None, batch: int, device) -> torch.Tensor:
        """Table rows: ``user + 1`` for known users, 0 for None or unseen ids."""
        if users is None:
            return torch.zeros(batch, dtype=torch.long, device=device)
        users = users.to(device=device, dtype=torch.long)
        if users.shape != (batch,):
            raise ValueError(f"users must have shape ({batch},), got {tuple(users.shape)}")
        known = (users >= 0) & (users < self.config.num_users)
        return self.user_sse(torch.where(known, users + 1, 0))

    def embed(self, item_seq: torch.Tensor, users: torch.Tensor | None) -> torch.Tensor:
        batch, length = item_seq.shape
        items = self.items(self.item_sse(item_seq))
        user = self.users(self.user_rows(users, batch, item_seq.device))
        x = torch.cat([items, user[:, None, :].expand(-1, length, -1)], dim=-1)
        if self.config.scale_embeddings:
            x = x * math.sqrt(self.config.hidden_size)
        if self.position is not None:
            x = x + self.position.weight[self.config.max_len - length :]
        return self.dropout(x) * (item_seq != 0).unsqueeze(-1).to(x.dtype)

    def forward(self, item_seq: torch.Tensor, users: torch.Tensor | None = None) -> torch.Tensor:
        self.check_input(item_seq)
        return self.encoder(self.embed(item_seq, users), item_seq != 0)

    def output_embedding(self) -> torch.Tensor:
        items = self.items.output_weight()
        user_part = self.candidate_user_part.expand(items.shape[0], -1)
        return torch.cat([items, user_part], dim=1)
