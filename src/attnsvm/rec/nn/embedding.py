"""Item and position embeddings for left-padded item sequences.

Ids: 0 is padding, 1..num_items are items, and ``num_special`` further ids after them are special
tokens (BERT4Rec's mask token is ``num_items + 1``). The output table that scores items has
``num_items + 1`` rows (row 0 is the padding item, never a valid target); it is either the input
table's first ``num_items + 1`` rows (tied, as in SASRec) or a separate table (gSASRec).

Large catalogues: a table marked by ``sparse_row_gradients`` gets, from every lookup of its rows
(``table_rows``: the input ids, a loss's positives and negatives), a sparse gradient that its
dense ``.grad`` adds in place. Without it each backward first fills a gradient of the whole
table (a million items × d = 64: 256 MB per lookup, per length group) and then adds that; with
it a step writes only the rows it read. The sum is the same (up to the order of additions).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from attnsvm.rec.nn.dropout import Dropout, dropout

POSITION_KINDS = ("learned", "learned_from_start", "none")
#: the attribute that marks an item-table parameter for sparse row gradients
SPARSE_ROWS = "_attnsvm_sparse_rows"


def table_rows(table: torch.Tensor, ids: torch.Tensor, padding_idx: int | None = None):
    """``table[ids]``, with a sparse gradient where ``table`` is a parameter marked by
    ``sparse_row_gradients``; ``padding_idx``: a row that gets no gradient (as nn.Embedding's)."""
    sparse = getattr(table, SPARSE_ROWS, False)
    if padding_idx is None and not sparse:
        return table[ids]
    return F.embedding(ids, table, padding_idx=padding_idx, sparse=sparse)


#: from this many items the trainer gives item tables sparse row gradients and runs AdamW
#: fused (``optim.adamw``): below it the tables cost little, and runs keep their earlier bits
SPARSE_ROWS_FROM_ITEMS = 100_000


def sparse_row_gradients(model: nn.Module, num_items: int | None = None) -> list[nn.Parameter]:
    """Mark the item tables of ``model`` (its ``ItemEmbedding`` modules) for sparse row
    gradients and give each a dense zero ``.grad`` that they add into; returns them (none
    where ``num_items`` is below ``SPARSE_ROWS_FROM_ITEMS``). The optimiser must keep these
    gradients (``zero_grad(set_to_none=False)``), since AdamW takes no sparse gradient."""
    if num_items is not None and num_items < SPARSE_ROWS_FROM_ITEMS:
        return []
    tables = []
    for module in model.modules():
        if isinstance(module, ItemEmbedding) and not module.table_dropout:
            tables += [e.weight for e in (module.input, module.output) if e is not None]
    for table in tables:
        setattr(table, SPARSE_ROWS, True)
        if table.grad is None:
            table.grad = torch.zeros_like(table)
    return tables


class ItemEmbedding(nn.Module):
    """Input item table, optional separate output table, optional output bias."""

    def __init__(
        self,
        num_items: int,
        dim: int,
        num_special: int = 0,
        separate_output: bool = False,
        output_bias: bool = False,
        table_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.num_items = num_items
        self.input = nn.Embedding(num_items + 1 + num_special, dim, padding_idx=0)
        self.output = nn.Embedding(num_items + 1, dim, padding_idx=0) if separate_output else None
        self.bias = nn.Parameter(torch.zeros(num_items + 1)) if output_bias else None
        self.table_dropout = table_dropout
        self._dropped: torch.Tensor | None = None  # the last training forward's input table

    @property
    def embedding_dim(self) -> int:
        return self.input.embedding_dim

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if not (self.training and self.table_dropout):
            return table_rows(self.input.weight, ids, padding_idx=0)
        # RecTools' item network: dropout on the whole table, one draw per forward, which the
        # items scored after this forward (``output_weight``) share with the inputs
        self._dropped = dropout(self.input.weight, self.table_dropout)
        return self._dropped[ids]

    def output_weight(self) -> torch.Tensor:
        """The ``(num_items + 1, dim)`` table that item logits are dot products with; in
        training with ``table_dropout``, the table the last forward drew (a fresh draw for a
        separate output table)."""
        if self.output is not None:
            return dropout(self.output.weight, self.table_dropout, self.training)
        if self.training and self.table_dropout:
            if self._dropped is None:
                self._dropped = dropout(self.input.weight, self.table_dropout)
            return self._dropped[: self.num_items + 1]
        if self.input.num_embeddings == self.num_items + 1:
            return self.input.weight  # the whole table: no slice, whose backward is a dense copy
        return self.input.weight[: self.num_items + 1]

    def train(self, mode: bool = True) -> ItemEmbedding:
        self._dropped = None  # never score with a table drawn before a switch of mode
        return super().train(mode)


class SequenceEmbedding(nn.Module):
    """``x_t = dropout(LN?(item(s_t) · (√d if scaled) + p_t))``, zero at padding positions.

    ``"learned"`` counts positions from the right: the most recent item always gets position
    ``max_len − 1``, whatever the sequence length, because sequences are left-padded.
    ``"learned_from_start"`` counts them from the window's first item (position 0), as the
    right-padded official SASRec code and K&V's do: the most recent item's position is then the
    window's length − 1. Both ignore how much padding precedes the items.
    """

    def __init__(
        self,
        items: nn.Module,
        max_len: int,
        position: str = "learned",
        scale: bool = False,
        layer_norm: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if position not in POSITION_KINDS:
            raise ValueError(f"position must be one of {POSITION_KINDS}, got {position!r}")
        dim = items.embedding_dim  # an ItemEmbedding, or any ids → vectors module (SRT's tower)
        self.items = items
        self.max_len = max_len
        self.position = nn.Embedding(max_len, dim) if position != "none" else None
        self.from_start = position == "learned_from_start"
        self.scale = math.sqrt(dim) if scale else 1.0
        self.norm = nn.LayerNorm(dim) if layer_norm else None
        self.dropout = Dropout(dropout)

    def forward(self, item_seq: torch.Tensor, added: torch.Tensor | None = None) -> torch.Tensor:
        """``added`` (B, L, D): a further per-position input, summed with the items and
        positions before the normalisation and dropout (SDAT's time encoding)."""
        length = item_seq.shape[1]
        x = self.items(item_seq)
        if self.scale != 1.0:
            x = x * self.scale
        if self.from_start:
            index = ((item_seq != 0).cumsum(dim=1) - 1).clamp(min=0)
            x = x + self.position(index)
        elif self.position is not None:
            x = x + self.position.weight[self.max_len - length :]
        if added is not None:
            x = x + added
        if self.norm is not None:
            x = self.norm(x)
        x = self.dropout(x)
        return x * (item_seq != 0).unsqueeze(-1).to(x.dtype)
