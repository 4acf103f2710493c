"""Dropout: the distribution, scaling and gradient of ``torch.nn.Dropout``, with its own draw."""

import math

import pytest
import torch

from attnsvm.rec.nn.attention import MultiHeadAttention, attention_mask
from attnsvm.rec.nn.dropout import Dropout, dropout


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_rate_and_scale(p: float) -> None:
    torch.manual_seed(0)
    n = 200_000
    y = dropout(torch.ones(n), p)
    kept = y != 0
    # binomial: the kept fraction lies within 5 standard deviations of 1 − p
    assert abs(kept.float().mean().item() - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n)
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / (1 - p)))


def test_elements_are_dropped_independently() -> None:
    torch.manual_seed(1)
    kept = (dropout(torch.ones(400, 500), 0.5) != 0).float()
    # neighbouring elements (along rows and along columns) agree as often as chance says
    for a, b in ((kept[:, 1:], kept[:, :-1]), (kept[1:], kept[:-1])):
        assert abs((a == b).float().mean().item() - 0.5) < 0.01


def test_gradient_is_the_scaled_mask() -> None:
    torch.manual_seed(2)
    x = torch.randn(51, 39, requires_grad=True)  # an odd count: half a 64-bit draw left over
    y = dropout(x, 0.3)
    y.backward(torch.ones_like(y))
    mask = (y != 0).float() / 0.7
    torch.testing.assert_close(x.grad, mask)
    torch.testing.assert_close(y, x.detach() * mask)


def test_identity_when_off_and_zero_at_one() -> None:
    x = torch.randn(8, 3)
    assert dropout(x, 0.4, training=False) is x
    assert dropout(x, 0.0) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))
    with pytest.raises(ValueError, match=r"\[0, 1\], got 1.5"):
        dropout(x, 1.5)


def test_seed_fixes_the_mask_and_module_follows_train_eval() -> None:
    layer = Dropout(0.5)
    x = torch.randn(64, 64)
    torch.manual_seed(3)
    first = layer(x)
    torch.manual_seed(3)
    assert torch.equal(first, layer(x))
    assert layer(x).ne(first).any()  # a fresh draw
    assert layer.eval()(x) is x
    assert layer.p == 0.5


def test_attention_training_path_keeps_the_expected_output() -> None:
    """Training with attention dropout (the explicit path on CPU) averages to the eval output."""
    torch.manual_seed(4)
    attention = MultiHeadAttention(8, 1, dropout=0.2).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    mask = attention_mask(torch.ones(2, 5, dtype=torch.bool), causal=True)
    expected = attention.eval()(x, x, mask)
    attention.train()
    draws = torch.stack([attention(x, x, mask) for _ in range(4000)])
    assert draws.std(0).max() > 0.01  # dropout is on
    torch.testing.assert_close(draws.mean(0), expected, atol=0.02, rtol=0)
    # position 0 attends only itself: with its one weight dropped, only out_proj's bias is left
    dropped = (draws[:, :, 0] - attention.out_proj.bias).abs().amax(-1) < 1e-12
    assert 0.17 < dropped.double().mean().item() < 0.23


def test_item_table_dropout_is_one_draw_shared_by_inputs_and_scored_items():
    from attnsvm.rec.nn.embedding import ItemEmbedding

    torch.manual_seed(0)
    items = ItemEmbedding(50, 16, table_dropout=0.3)
    ids = torch.tensor([[0, 3, 7, 3], [1, 2, 49, 7]])
    inputs = items(ids)
    table = items.output_weight()
    # an item's row is the same dropped row wherever it appears in this forward, and the
    # table that scores items is that same draw
    torch.testing.assert_close(inputs[0, 1], inputs[0, 3])
    torch.testing.assert_close(inputs[1, 3], inputs[0, 2])
    torch.testing.assert_close(table[ids[1]], inputs[1])
    dropped = table[1:] == 0
    assert 0.2 < dropped.float().mean() < 0.4
    kept = items.input.weight[:51][1:]
    torch.testing.assert_close(table[1:][~dropped], kept[~dropped] / 0.7)
    # the next forward draws again; evaluation uses the plain table, and so does every call
    # after a switch back to training until the next forward draws
    items(ids)
    assert not torch.equal(items.output_weight(), table)
    items.eval()
    torch.testing.assert_close(items(ids), items.input(ids))
    torch.testing.assert_close(items.output_weight(), items.input.weight[:51])
    items.train()
    assert items._dropped is None


def test_item_dropout_reaches_the_item_table_of_every_model_that_builds_one():
    from attnsvm.rec.models import build_model

    for name in ("sasrec", "bert4rec", "ssept", "bsarec"):
        model = build_model(name, 20, item_dropout=0.25)
        assert model.items.table_dropout == 0.25, name


def test_the_training_forward_traces_as_one_graph_without_breaks() -> None:
    """``train.compile``: dynamo traces SASRec's training forward, dropout masks included,
    as one graph (``torch._dynamo.explain`` traces without compiling, so this is fast)."""
    from attnsvm.rec.models.sasrec import SASRec, SASRecConfig
    from attnsvm.rec.train.loop import _compiled

    _compiled(torch.nn.Identity())  # the settings train.compile uses
    model = SASRec(50, SASRecConfig(hidden_size=16, ffn_size=16, max_len=12)).train()
    items = torch.randint(1, 51, (4, 12))
    items[:2, :5] = 0
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(items)
    assert (explanation.graph_count, explanation.graph_break_count) == (1, 0)
