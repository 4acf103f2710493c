"""SRT's feature item tower: an item's vector is its fields' token sums through the adapter, for
the whole catalogue (``table``) as for a batch's items (``forward``), and a training step's one
shared encoding (``shared_table``) gives the gradient of one encoding a use."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsvm.rec.nn.item_tower import FeatureItemTower

EXACT = {"atol": 1e-12, "rtol": 1e-12}


def random_tower(items: int, fields: int, slots: int, seed: int) -> FeatureItemTower:
    """Token ids with padding (0) anywhere, items with no token at all included; float64."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, 40, (items + 1, fields, slots), generator=generator)
    tokens[torch.rand(tokens.shape, generator=generator) < 0.4] = 0
    tokens[0] = 0
    torch.manual_seed(seed)
    tower = FeatureItemTower(tokens, num_buckets=40, token_size=3, dim=5).double()
    with torch.no_grad():
        tower.tokens.weight.normal_()
        tower.tokens.weight[0] = 0.0
        tower.adapter.bias.normal_()
    return tower


def by_hand(tower: FeatureItemTower, ids: torch.Tensor) -> torch.Tensor:
    """``W [Σ_{w ∈ f_1(i)} E[w] ; …] + b`` item by item, padding skipped."""
    table = tower.tokens.weight
    rows = []
    for item in ids.reshape(-1).tolist():
        fields = [
            sum((table[w] for w in field.tolist() if w), torch.zeros(table.shape[1]).double())
            for field in tower.item_tokens[item]
        ]
        rows.append(tower.adapter.weight @ torch.cat(fields) + tower.adapter.bias)
    return torch.stack(rows).reshape(*ids.shape, -1)


@settings(max_examples=25, deadline=None)
@given(
    items=st.integers(1, 12),
    fields=st.integers(1, 3),
    slots=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_table_and_forward_are_the_token_sums_through_the_adapter(items, fields, slots, seed):
    tower = random_tower(items, fields, slots, seed)
    every = torch.arange(items + 1)
    torch.testing.assert_close(tower.table(), by_hand(tower, every), **EXACT)
    ids = torch.randint(0, items + 1, (3, 4), generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(tower(ids), by_hand(tower, ids), **EXACT)
    torch.testing.assert_close(tower.encode(tower.item_tokens[ids]), by_hand(tower, ids), **EXACT)


def test_forward_has_the_gradient_of_the_tables_rows():
    """``forward`` encodes each distinct item once; its gradient is that of ``table()[ids]``."""
    tower = random_tower(9, 2, 4, seed=3)
    ids = torch.tensor([[1, 4, 4, 0], [9, 1, 2, 4]])
    weights = torch.randn(2, 4, 5, generator=torch.Generator().manual_seed(1)).double()
    gradients = []
    for vectors in (lambda: tower(ids), lambda: tower.table()[ids]):
        tower.zero_grad()
        (vectors() * weights).sum().backward()
        gradients.append([p.grad.clone() for p in tower.parameters()])
    for ours, reference in zip(*gradients, strict=True):
        torch.testing.assert_close(ours, reference, **EXACT)


def uses(tower: FeatureItemTower) -> list[torch.Tensor]:
    """Three losses of the table, each back-propagated on its own (as length groups are)."""
    generator = torch.Generator().manual_seed(5)
    tables = []
    for _ in range(3):
        table = tower.table()
        tables.append(table)
        (table * torch.randn(table.shape, generator=generator).double()).sum().backward()
    return tables


def test_a_shared_table_is_encoded_once_and_gets_the_sum_of_its_uses_gradients():
    tower = random_tower(11, 2, 3, seed=8)
    uses(tower)
    reference = [p.grad.clone() for p in tower.parameters()]
    tower.zero_grad()
    encodings = []
    encode = tower._encode_table
    tower._encode_table = lambda: encodings.append(1) or encode()
    with tower.shared_table():
        tables = uses(tower)
        assert all(t is tables[0] for t in tables)
    assert len(encodings) == 1
    for ours, expected in zip((p.grad for p in tower.parameters()), reference, strict=True):
        torch.testing.assert_close(ours, expected, **EXACT)
    assert tower.table() is not tower.table()  # outside the context: one encoding a call


def test_a_shared_table_without_gradients_or_on_an_error_leaves_nothing_behind():
    tower = random_tower(6, 1, 3, seed=2)
    with tower.shared_table(), torch.no_grad():
        assert not tower.table().requires_grad  # evaluation inside a step: a fresh encoding
    assert all(p.grad is None for p in tower.parameters())
    with pytest.raises(RuntimeError, match="boom"), tower.shared_table():
        tower.table()
        raise RuntimeError("boom")
    assert tower._shared is None
    assert all(p.grad is None for p in tower.parameters())
