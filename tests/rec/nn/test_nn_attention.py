"""Attention: the SDPA path equals the explicit-matmul reference; masks do what they say; the
recorder reads what each layer attended without changing what the model computes."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsvm.rec.nn.attention import (
    MultiHeadAttention,
    attention_mask,
    record_attention,
    reference_attention,
)
from attnsvm.rec.nn.blocks import NORM_LAYOUTS, TransformerBlock, TransformerEncoder
from attnsvm.rec.nn.ffn import PointwiseFFN


def left_padded(lengths: list[int], length: int) -> torch.Tensor:
    """(B, length) bool: True at the last ``lengths[b]`` positions of row b."""
    columns = torch.arange(length)[None, :]
    return columns >= length - torch.tensor(lengths)[:, None]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("num_heads", [1, 4])
def test_sdpa_equals_reference_path(causal: bool, num_heads: int) -> None:
    generator = torch.Generator().manual_seed(0)
    attention = MultiHeadAttention(16, num_heads).double().eval()
    x = torch.randn(3, 7, 16, generator=generator, dtype=torch.float64)
    mask = attention_mask(left_padded([7, 4, 1], 7), causal)
    fast = attention(x, x, mask)
    with record_attention(attention) as recorder:
        slow = attention(x, x, mask)
    (weights,) = recorder.attention
    assert weights.shape == (3, num_heads, 7, 7)
    torch.testing.assert_close(fast, slow, atol=1e-6, rtol=0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, num_heads, 7, dtype=torch.float64))


@settings(max_examples=25)
@given(
    batch=st.integers(1, 4),
    length=st.integers(1, 9),
    heads=st.sampled_from([1, 2, 4]),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_sdpa_equals_reference_on_random_shapes(batch, length, heads, causal, seed) -> None:
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    attention = MultiHeadAttention(8, heads).double().eval()
    x = torch.randn(batch, length, 8, generator=generator, dtype=torch.float64)
    lengths = torch.randint(0, length + 1, (batch,), generator=generator).tolist()
    mask = attention_mask(left_padded(lengths, length), causal)
    fast = attention(x, x, mask)
    with record_attention(attention):
        slow = attention(x, x, mask)
    torch.testing.assert_close(fast, slow, atol=1e-6, rtol=0)


def test_attention_mask_hides_padding_and_future() -> None:
    valid = torch.tensor([[False, True, True]])
    causal = attention_mask(valid, causal=True)[0, 0]
    # real query t sees real keys s ≤ t; the padding query sees only itself
    assert causal.tolist() == [[True, False, False], [False, True, False], [False, True, True]]
    both = attention_mask(valid, causal=False)[0, 0]
    assert both.tolist() == [[True, True, True], [False, True, True], [False, True, True]]


def test_reference_weights_follow_the_formula() -> None:
    q = torch.tensor([[[[1.0, 0.0], [0.0, 2.0]]]])
    k = torch.tensor([[[[1.0, 1.0], [0.0, 1.0]]]])
    v = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]])
    keep = torch.ones(1, 1, 2, 2, dtype=torch.bool)
    out, weights = reference_attention(q, k, v, keep, dropout=0.0)
    scores = torch.tensor([[1.0, 0.0], [2.0, 2.0]]) / 2**0.5
    torch.testing.assert_close(weights[0, 0], scores.softmax(-1))
    torch.testing.assert_close(out[0, 0], scores.softmax(-1))


@pytest.mark.parametrize("norm", NORM_LAYOUTS)
def test_encoder_fast_and_reference_paths_agree(norm: str) -> None:
    generator = torch.Generator().manual_seed(1)
    torch.manual_seed(1)
    blocks = [TransformerBlock(8, 2, 16, norm=norm) for _ in range(2)]
    encoder = TransformerEncoder(blocks, causal=True).double().eval()
    x = torch.randn(2, 5, 8, generator=generator, dtype=torch.float64)
    valid = left_padded([5, 2], 5)
    fast = encoder(x, valid)
    with record_attention(encoder) as recorder:
        traced = encoder(x, valid)
    torch.testing.assert_close(fast, traced, atol=1e-6, rtol=0)
    assert len(recorder.attention) == 2 and len(recorder.layer_inputs) == 2
    assert torch.all(traced[1, :3] == 0)  # padding positions are zeroed
    query, key, key_positions = recorder.layer_inputs[0]
    assert key_positions is None  # the keys are the whole window
    if norm == "post":
        assert torch.equal(query, key) and torch.equal(key, x)
    else:  # queries are layer-normalised
        torch.testing.assert_close(query.mean(-1), torch.zeros(2, 5, dtype=torch.float64))
    assert torch.equal(query, key) == (norm != "sasrec")
    # outside the block every layer is back on its fast path, recording nothing
    assert all(m.recording is None and not m.record_weights for m in recorder.modules)
    torch.testing.assert_close(encoder(x, valid), fast, atol=0, rtol=0)


def test_recorder_without_weights_leaves_the_computation_alone() -> None:
    """``weights=False``: the layers keep their own path, so the output is bit for bit the
    unrecorded one, and only the inputs are recorded; nested recording is refused."""
    torch.manual_seed(3)
    blocks = [TransformerBlock(8, 2, 16, norm="sasrec") for _ in range(2)]
    encoder = TransformerEncoder(blocks, causal=False).double().eval()
    x, valid = torch.randn(3, 6, 8, dtype=torch.float64), left_padded([6, 3, 1], 6)
    with record_attention(encoder, weights=False) as recorder:
        recorded = encoder(x, valid)
        with pytest.raises(RuntimeError, match="being recorded already"), record_attention(encoder):
            pass
    assert torch.equal(recorded, encoder(x, valid))
    assert torch.equal(recorder.layer_inputs[0].key, x)
    with pytest.raises(RuntimeError, match="weights were not recorded"):
        _ = recorder.attention
    with record_attention(encoder) as unused, pytest.raises(RuntimeError, match="did not run"):
        _ = unused.layer_inputs


@pytest.mark.parametrize("norm", NORM_LAYOUTS)
def test_block_without_ffn_is_attention_and_layer_norms_only(norm: str) -> None:
    """``ffn_size = 0`` leaves the FFN out: the block equals one whose FFN outputs zero."""
    torch.manual_seed(2)
    without = TransformerBlock(8, 2, 0, norm=norm).double().eval()
    zeroed = TransformerBlock(8, 2, 4, norm=norm).double().eval()
    state = {k: v for k, v in zeroed.state_dict().items() if not k.startswith("ffn.")}
    zeroed.load_state_dict(state | without.state_dict(), strict=False)
    torch.nn.init.zeros_(zeroed.ffn.outer.weight)
    torch.nn.init.zeros_(zeroed.ffn.outer.bias)
    assert without.ffn is None
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    mask = attention_mask(left_padded([5, 3], 5), causal=True)
    torch.testing.assert_close(without(x, mask), zeroed(x, mask))
    with pytest.raises(ValueError, match="ffn_size must be ≥ 0"):
        TransformerBlock(8, 2, -1)
    with pytest.raises(ValueError, match="hidden size must be ≥ 1"):
        PointwiseFFN(8, 0)
    mixed = [TransformerBlock(8, 2, 4, norm="pre"), TransformerBlock(8, 2, 4, norm="post")]
    with pytest.raises(ValueError, match="of one layout"):
        TransformerEncoder(mixed, causal=True)


def test_positions_from_the_start_ignore_left_padding() -> None:
    """``learned_from_start``: the window's first item gets position 0 however much padding
    precedes it, so a padded and an unpadded copy embed the same; ``learned`` counts from the
    right end instead."""
    from attnsvm.rec.nn.embedding import ItemEmbedding, SequenceEmbedding

    torch.manual_seed(0)
    items = ItemEmbedding(10, 8)
    start = SequenceEmbedding(items, max_len=6, position="learned_from_start").eval()
    right = SequenceEmbedding(items, max_len=6, position="learned").eval()
    short, padded = torch.tensor([[3, 4, 5]]), torch.tensor([[0, 0, 3, 4, 5]])
    torch.testing.assert_close(start(padded)[:, 2:], start(short))
    item = items(torch.tensor([3, 5]))
    torch.testing.assert_close(start(short)[0, 0], item[0] + start.position.weight[0])
    torch.testing.assert_close(right(short)[0, -1], item[1] + right.position.weight[5])
    assert torch.all(start(padded)[:, :2] == 0)
