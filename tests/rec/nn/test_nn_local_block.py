"""Local (sliding-window) and block attention against naive loops over queries and keys."""

import math

import pytest
import torch

from attnsvm.rec.nn.attention import attention_mask, record_attention
from attnsvm.rec.nn.block_attention import (
    BlockAttention,
    LongShortAttention,
    block_ends,
    pool_blocks,
)
from attnsvm.rec.nn.local_attention import LocalAttention, local_keep_mask

DIM, HEADS = 8, 2


def left_padded(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    """(B, L) validity: row 0 full, row 1 half padding, row 2 a single item, row 3 empty."""
    valid = torch.ones(batch, length, dtype=torch.bool)
    valid[1, : length // 2] = False
    valid[2, :-1] = False
    valid[3] = False
    return valid


def naive_attention(module, x, keys_of, output_zero=None):
    """Per row, head and query: softmax of q·k/√d over ``keys_of(b, i)`` (key vectors and their
    indices), then the value mix and ``out_proj``."""
    batch, length, _ = x.shape
    width = DIM // HEADS
    out = torch.zeros(batch, length, DIM, dtype=x.dtype)
    for b in range(batch):
        for i in range(length):
            if output_zero is not None and output_zero(b, i):
                continue
            keys, values = keys_of(b, i)
            q = module.q_proj(x[b, i])
            k, v = module.k_proj(keys), module.v_proj(values)
            heads = []
            for h in range(HEADS):
                cols = slice(h * width, (h + 1) * width)
                logits = torch.stack([q[cols] @ k[j, cols] for j in range(len(k))])
                weights = (logits / math.sqrt(width)).softmax(0)
                heads.append((weights[:, None] * v[:, cols]).sum(0))
            out[b, i] = module.out_proj(torch.cat(heads))
    return out


@pytest.mark.parametrize(("length", "window"), [(13, 3), (12, 4), (9, 1), (7, 2)])
def test_chunked_local_attention_is_the_naive_window(length: int, window: int) -> None:
    torch.manual_seed(0)
    module = LocalAttention(DIM, HEADS, window).double().eval()
    x = torch.randn(4, length, DIM, dtype=torch.float64)
    valid = left_padded(4, length)

    def keys_of(b, i):
        chosen = [j for j in range(max(0, i - window + 1), i + 1) if valid[b, j] or j == i]
        return x[b, chosen], x[b, chosen]

    out = module(x, x, valid[:, None, None, :])
    torch.testing.assert_close(out, naive_attention(module, x, keys_of), atol=1e-12, rtol=0)
    # the full path (the lens's recording) computes the same, and records (B, H, L, L) weights
    with record_attention(module) as recorder:
        recorded = module(x, x, valid[:, None, None, :])
    torch.testing.assert_close(recorded, out, atol=1e-12, rtol=0)
    assert recorder.attention[0].shape == (4, HEADS, length, length)


def test_local_mask_is_the_causal_mask_when_the_window_covers_the_sequence() -> None:
    valid = left_padded(4, 9)
    assert torch.equal(local_keep_mask(valid, 9), attention_mask(valid, causal=True))
    assert torch.equal(local_keep_mask(valid, 50), attention_mask(valid, causal=True))
    last = local_keep_mask(valid, 3, num_queries=1)
    assert last.shape == (4, 1, 1, 9)
    assert torch.equal(last[0, 0, 0], torch.tensor([False] * 6 + [True] * 3))


def test_local_attention_of_the_last_query_only() -> None:
    torch.manual_seed(1)
    module = LocalAttention(DIM, HEADS, 3).double().eval()
    x = torch.randn(4, 10, DIM, dtype=torch.float64)
    keys = left_padded(4, 10)[:, None, None, :]
    torch.testing.assert_close(module(x[:, -1:], x, keys), module(x, x, keys)[:, -1:])


def naive_blocks(x, valid, size, query=None):
    """Blocks from the right, by a loop: each block's real items, mean or attention-pooled."""
    batch, length, dim = x.shape
    count = -(-length // size)
    blocks = torch.zeros(batch, count, dim, dtype=x.dtype)
    real = torch.zeros(batch, count, dtype=torch.bool)
    ends = []
    for k in range(count):
        end = length - 1 - (count - 1 - k) * size
        ends.append(end)
        columns = [c for c in range(end - size + 1, end + 1) if c >= 0]
        for b in range(batch):
            items = [c for c in columns if valid[b, c]]
            if not items:
                continue
            real[b, k] = True
            if query is None:
                blocks[b, k] = x[b, items].mean(0)
            else:
                weights = (x[b, items] @ query / math.sqrt(dim)).softmax(0)
                blocks[b, k] = (weights[:, None] * x[b, items]).sum(0)
    return blocks, real, torch.tensor(ends)


@pytest.mark.parametrize("attentive", [False, True])
@pytest.mark.parametrize(("length", "size"), [(11, 3), (12, 4), (5, 8)])
def test_block_pooling_is_the_naive_one(length: int, size: int, attentive: bool) -> None:
    torch.manual_seed(2)
    x = torch.randn(4, length, DIM, dtype=torch.float64)
    valid = left_padded(4, length)
    query = torch.randn(DIM, dtype=torch.float64) if attentive else None
    blocks, real = pool_blocks(x, valid, size, query)
    expected, expected_real, ends = naive_blocks(x, valid, size, query)
    assert torch.equal(real, expected_real)
    assert torch.equal(block_ends(length, size), ends)
    torch.testing.assert_close(blocks, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("pooling", ["mean", "attentive"])
def test_block_attention_is_the_naive_loop_over_ended_blocks(pooling: str) -> None:
    torch.manual_seed(3)
    length, size = 11, 3
    module = BlockAttention(DIM, HEADS, size, pooling).double().eval()
    if module.pool_query is not None:
        torch.nn.init.normal_(module.pool_query)
    x = torch.randn(4, length, DIM, dtype=torch.float64)
    valid = left_padded(4, length)
    blocks, real, ends = naive_blocks(x, valid, size, module.pool_query)

    def visible(b, i):
        return [k for k in range(len(ends)) if real[b, k] and ends[k] <= i]

    def keys_of(b, i):
        chosen = visible(b, i)
        return blocks[b, chosen], blocks[b, chosen]

    out = module(x, x, valid[:, None, None, :])
    expected = naive_attention(module, x, keys_of, output_zero=lambda b, i: not visible(b, i))
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
    assert (out[3] == 0).all()  # no items, no history


def test_block_attention_never_reads_a_later_item() -> None:
    torch.manual_seed(4)
    module = BlockAttention(DIM, HEADS, 3, "attentive").double().eval()
    torch.nn.init.normal_(module.pool_query)
    x = torch.randn(2, 12, DIM, dtype=torch.float64)
    keys = torch.ones(2, 1, 1, 12, dtype=torch.bool)
    out = module(x, x, keys)
    for t in range(12):
        changed = x.clone()
        changed[:, t + 1 :] = torch.randn_like(changed[:, t + 1 :])
        torch.testing.assert_close(module(changed, changed, keys)[:, : t + 1], out[:, : t + 1])


def test_long_short_mix_is_the_gate_of_both_branches() -> None:
    torch.manual_seed(5)
    short = LocalAttention(DIM, HEADS, 2)
    long = BlockAttention(DIM, HEADS, 3, "mean")
    module = LongShortAttention(short, long, "gate").double().eval()
    x = torch.randn(3, 9, DIM, dtype=torch.float64)
    keys = torch.ones(3, 1, 1, 9, dtype=torch.bool)
    s, b = short(x, x, keys), long(x, x, keys)
    gate = torch.sigmoid(module.gate(torch.cat([s, b], -1)))
    torch.testing.assert_close(module(x, x, keys), gate * s + (1 - gate) * b)
    summed = LongShortAttention(short, long, "sum")
    torch.testing.assert_close(summed(x, x, keys), s + b)
    with record_attention(module) as recorder:
        module(x, x, keys)
    local_weights, block_weights = recorder.attention
    assert local_weights.shape == (3, HEADS, 9, 9) and block_weights.shape == (3, HEADS, 9, 3)
    assert torch.equal(recorder.layer_inputs[1].key_positions[0], torch.tensor([2, 5, 8]))
