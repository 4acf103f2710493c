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

The sums are one fused ``embedding_bag`` over each (item, field)'s real tokens, not a gather of
every padded slot and a sum: the whole catalogue is encoded for each step's output scores, and
the padded gather (``F·T`` rows an item, most of them padding) and its dense backward were most
of SRT's step. For the same reason a training step encodes the catalogue once for all of its
length groups (``shared_table``), not once a group.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
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
        self.tokens = nn.EmbeddingBag(num_buckets, token_size, mode="sum", padding_idx=0)
        self.adapter = nn.Linear(item_tokens.shape[1] * token_size, dim)
        #: inside ``shared_table``: the step's table (with its graph) and the detached copy
        #: handed out, whose gradient gathers every use's
        self._shared: dict[str, torch.Tensor] | None = None

    @property
    def embedding_dim(self) -> int:
        return self.adapter.out_features

    def _project(self, pooled: torch.Tensor, items: int) -> torch.Tensor:
        """``(items · F, token_size)`` field sums → ``(items, dim)`` item vectors."""
        return self.adapter(pooled.reshape(items, -1))

    def encode(self, tokens: torch.Tensor) -> torch.Tensor:
        """``(…, F, T)`` token ids → ``(…, dim)`` item vectors."""
        bags = tokens.reshape(-1, tokens.shape[-1])
        vectors = self._project(self.tokens(bags), bags.shape[0] // tokens.shape[-2])
        return vectors.reshape(*tokens.shape[:-2], -1)

    def table(self) -> torch.Tensor:
        """``(num_items + 1, dim)``: every item's vector (row 0, padding, is the adapter bias)."""
        shared = self._shared
        if shared is None or not torch.is_grad_enabled():
            return self._encode_table()
        if "copy" not in shared:
            shared["table"] = self._encode_table()
            shared["copy"] = shared["table"].detach().requires_grad_()
        return shared["copy"]

    @contextmanager
    def shared_table(self) -> Iterator[None]:
        """Within, ``table()`` with gradients is one encoding of the catalogue, its uses' (length
        groups') gradients summed on a detached copy; on leaving, that sum is back-propagated
        through the encoder once. The same gradient (the table's is the sum of its uses'), in
        one encoder pass and one backward instead of one each a use."""
        self._shared = {}
        try:
            yield
            copy = self._shared.get("copy")
            if copy is not None and copy.grad is not None:
                self._shared["table"].backward(copy.grad)
        finally:
            self._shared = None

    def _encode_table(self) -> torch.Tensor:
        # the (item, field) bags without their padding, bag b's tokens from starts[b] on
        bags = self.item_tokens.reshape(-1, self.item_tokens.shape[-1])
        real = bags != 0
        counts = real.sum(dim=1)
        starts = torch.cumsum(counts, 0) - counts
        pooled = F.embedding_bag(bags[real], self.tokens.weight, starts, mode="sum")
        return self._project(pooled, self.item_tokens.shape[0])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Vectors of the items ``ids`` (any shape): each distinct item encoded once (a batch's
        windows repeat items, and hold far fewer than the catalogue)."""
        distinct, where = torch.unique(ids, return_inverse=True)
        return self.encode(self.item_tokens[distinct])[where]
