"""Items encoded from their features (SRT): no row per item, so no parameter per item.

Each item is ``F`` fields (MovieLens: title and genres; S3-Rec: attributes) of up to ``T`` token
ids each (``attnsvm.rec.data.features.hashed_tokens``: id 0 pads, ids < ``num_buckets``). An
item's vector is the sum of its tokens' embeddings per field, the fields concatenated and
projected to the model's width, as SRT's ``FeatureSeqEmbLayer`` (sum pooling) and adapter::

    e_i = W [Σ_{w ∈ f_1(i)} E[w] ; … ; Σ_{w ∈ f_F(i)} E[w]] + b

The parameters are ``E`` (``num_buckets × token_size``) and the adapter: their shapes do not
depend on the catalogue, so a model trained on one catalogue loads into another and scores
items it never saw. The token ids are a non-persistent buffer: they belong to the catalogue,
not to the weights (another catalogue's external ids would mean other items).
"""

from __future__ import annotations

import torch
from torch import nn


class FeatureItemTower(nn.Module):
    def __init__(
        self, item_tokens: torch.Tensor, num_buckets: int, token_size: int, dim: int
    ) -> None:
        """``item_tokens``: ``(num_items + 1, F, T)`` token ids per item (row 0 is padding)."""
        super().__init__()
        if item_tokens.ndim != 3 or item_tokens.dtype != torch.long:
            raise ValueError("item_tokens must be a (items, fields, tokens) LongTensor")
        if item_tokens.numel() and (item_tokens.min() < 0 or item_tokens.max() >= num_buckets):
            raise ValueError(f"token ids must lie in 0..{num_buckets - 1}")
        self.register_buffer("item_tokens", item_tokens, persistent=False)
        self.tokens = nn.Embedding(num_buckets, token_size, padding_idx=0)
        self.adapter = nn.Linear(item_tokens.shape[1] * token_size, dim)

    @property
    def embedding_dim(self) -> int:
        return self.adapter.out_features

    def encode(self, tokens: torch.Tensor) -> torch.Tensor:
        """``(…, F, T)`` token ids → ``(…, dim)`` item vectors."""
        pooled = self.tokens(tokens).sum(dim=-2)  # (…, F, token_size)
        return self.adapter(pooled.flatten(start_dim=-2))

    def table(self) -> torch.Tensor:
        """``(num_items + 1, dim)``: every item's vector (row 0, padding, is the adapter bias)."""
        return self.encode(self.item_tokens)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Vectors of the items ``ids`` (any shape), rows of ``table()``: a batch's windows
        repeat items, and encoding the catalogue once costs about what encoding them would."""
        return self.table()[ids]
