"""Per-pair attention bias and value gain, a shared FFN, the GRU head, the time terms and the
feature item tower, each against a naive loop."""

import math

import pytest
import torch

from attnsvm.rec.nn.attention import MultiHeadAttention, attention_mask
from attnsvm.rec.nn.blocks import TransformerBlock, TransformerEncoder
from attnsvm.rec.nn.ffn import PointwiseFFN
from attnsvm.rec.nn.gru import GRUHead
from attnsvm.rec.nn.item_tower import FeatureItemTower
from attnsvm.rec.nn.time_intervals import (
    IntervalBias,
    RecencyGain,
    TimeEncoding,
    pair_intervals,
    time_buckets,
)

DIM, HEADS = 8, 2


def valid_rows(length: int) -> torch.Tensor:
    valid = torch.ones(3, length, dtype=torch.bool)
    valid[1, :3] = False
    valid[2, :-1] = False
    return valid


def naive_pair_attention(module, x, keep, bias, gain):
    """Loop over rows, heads and queries: softmax over kept keys of q·k/√d + bias, values
    scaled by the gain."""
    batch, length, _ = x.shape
    width = DIM // HEADS
    q, k, v = module.q_proj(x), module.k_proj(x), module.v_proj(x)
    out = torch.zeros_like(x)
    for b in range(batch):
        for i in range(length):
            heads = []
            for h in range(HEADS):
                cols = slice(h * width, (h + 1) * width)
                keys = [j for j in range(length) if keep[b, 0, i, j]]
                logits = torch.stack(
                    [
                        q[b, i, cols] @ k[b, j, cols] / math.sqrt(width) + bias[b, h, i, j]
                        for j in keys
                    ]
                )
                weights = logits.softmax(0)
                mixed = sum(
                    weights[n] * gain[b, h, i, j] * v[b, j, cols] for n, j in enumerate(keys)
                )
                heads.append(mixed)
            out[b, i] = module.out_proj(torch.cat(heads))
    return out


@pytest.mark.parametrize("with_gain", [False, True])
def test_pair_bias_and_value_gain_are_the_naive_terms(with_gain: bool) -> None:
    torch.manual_seed(0)
    module = MultiHeadAttention(DIM, HEADS).double().eval()
    x = torch.randn(3, 6, DIM, dtype=torch.float64)
    keep = attention_mask(valid_rows(6), causal=True)
    bias = torch.randn(3, HEADS, 6, 6, dtype=torch.float64)
    gain = 1 + torch.rand(3, HEADS, 6, 6, dtype=torch.float64) if with_gain else None
    out = module(x, x, keep, bias=bias, value_gain=gain)
    expected = naive_pair_attention(
        module, x, keep, bias, gain if with_gain else torch.ones_like(bias)
    )
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


def test_without_pair_terms_attention_is_unchanged_bit_for_bit() -> None:
    torch.manual_seed(1)
    module = MultiHeadAttention(DIM, HEADS).eval()
    x = torch.randn(3, 6, DIM)
    keep = attention_mask(valid_rows(6), causal=True)
    plain = module(x, x, keep)
    assert torch.equal(module(x, x, keep, bias=None, value_gain=None), plain)
    zero = module(x, x, keep, bias=torch.zeros(3, 1, 6, 6))
    torch.testing.assert_close(zero, plain)


def test_a_shared_ffn_is_one_module_applied_in_every_block() -> None:
    torch.manual_seed(2)
    blocks = [TransformerBlock(DIM, HEADS, 0, norm="sasrec") for _ in range(3)]
    shared = PointwiseFFN(DIM, 16)
    encoder = TransformerEncoder(blocks, causal=True, shared_ffn=shared).double().eval()
    x = torch.randn(3, 7, DIM, dtype=torch.float64)
    valid = valid_rows(7)
    keep = attention_mask(valid, causal=True)
    h = x
    for block in blocks:  # the "sasrec" layout, written out
        q = block.attention_norm(h)
        h = block.ffn_norm(q + block.attention(q, h, keep))
        h = h + shared(h)
    expected = encoder.final_norm(h) * valid[..., None]
    torch.testing.assert_close(encoder(x, valid), expected, atol=1e-12, rtol=0)
    ffn_parameters = sum(p.numel() for p in shared.parameters())
    own = sum(p.numel() for p in encoder.parameters())
    unshared = TransformerEncoder([TransformerBlock(DIM, HEADS, 16) for _ in range(3)], True)
    assert sum(p.numel() for p in unshared.parameters()) - own == 2 * ffn_parameters
    with pytest.raises(ValueError, match="none of their own"):
        TransformerEncoder([TransformerBlock(DIM, HEADS, 16)], True, shared_ffn=shared)


def test_gru_head_runs_over_each_rows_real_items_only() -> None:
    torch.manual_seed(3)
    head = GRUHead(DIM).double()
    x = torch.randn(3, 6, DIM, dtype=torch.float64)
    valid = valid_rows(6)
    cell = torch.nn.GRUCell(DIM, DIM).double()
    gru = head.gru
    cell.weight_ih.data, cell.weight_hh.data = gru.weight_ih_l0.data, gru.weight_hh_l0.data
    cell.bias_ih.data, cell.bias_hh.data = gru.bias_ih_l0.data, gru.bias_hh_l0.data
    out = head(x, valid)
    for b in range(3):
        state = torch.zeros(1, DIM, dtype=torch.float64)
        for t in range(6):
            if not valid[b, t]:
                assert (out[b, t] == 0).all()
                continue
            state = cell(x[b, t : t + 1], state)
            torch.testing.assert_close(out[b, t], state[0], atol=1e-12, rtol=0)


def test_interval_bias_gain_and_buckets_are_their_formulas() -> None:
    torch.manual_seed(4)
    times = torch.tensor([[0.0, 30.0, 4000.0, 90000.0], [5.0, 5.0, 200000.0, 200060.0]]).double()
    seconds = pair_intervals(times)
    unit = 3600.0
    log_bias = IntervalBias("log", HEADS, unit, 16)
    log_bias.raw_slope.data = torch.tensor([0.3, -1.0])
    bucket_bias = IntervalBias("bucket", HEADS, unit, 6)
    gain = RecencyGain(HEADS, unit)
    gain.amplitude.data = torch.tensor([0.5, 2.0])
    with torch.no_grad():
        biases = log_bias(seconds, torch.float64), bucket_bias(seconds, torch.float64)
        gains = gain(seconds, torch.float64)
        slopes = torch.nn.functional.softplus(log_bias.raw_slope)
        scale = torch.nn.functional.softplus(gain.raw_scale)
    for b in range(2):
        for i in range(4):
            for j in range(4):
                delta = max(float(times[b, i] - times[b, j]), 0.0)
                bucket = min(1 + math.floor(math.log2(1 + delta / 60)), 5)
                assert int(time_buckets(seconds, 6)[b, i, j]) == bucket
                for h in range(HEADS):
                    expected = -float(slopes[h]) * math.log1p(delta / unit)
                    assert math.isclose(float(biases[0][b, h, i, j]), expected, abs_tol=1e-6)
                    learned = float(bucket_bias.bucket_bias.weight.detach()[bucket, h])
                    assert float(biases[1][b, h, i, j]) == pytest.approx(learned)
                    decay = math.exp(-delta / unit / float(scale[h]))
                    expected_gain = 1 + float(gain.amplitude.detach()[h]) * decay
                    assert float(gains[b, h, i, j]) == pytest.approx(expected_gain, abs=1e-6)


@pytest.mark.parametrize("kind", ["gap", "age"])
def test_time_encoding_buckets_each_events_gap_or_age(kind: str) -> None:
    torch.manual_seed(5)
    encoding = TimeEncoding(kind, DIM, 8)
    times = torch.tensor([[0.0, 0.0, 100.0, 7200.0], [0.0, 50.0, 60.0, 6000.0]]).double()
    valid = torch.tensor([[False, True, True, True], [True, True, True, True]])
    out = encoding(times, valid)
    table = encoding.embedding.weight
    for b in range(2):
        for t in range(4):
            if not valid[b, t]:
                assert (out[b, t] == 0).all()
                continue
            if kind == "age":
                seconds = float(times[b, -1] - times[b, t])
            elif t == 0 or not valid[b, t - 1]:
                torch.testing.assert_close(out[b, t], table[0])  # no previous event
                continue
            else:
                seconds = float(times[b, t] - times[b, t - 1])
            bucket = min(1 + math.floor(math.log2(1 + seconds / 60)), 7)
            torch.testing.assert_close(out[b, t], table[bucket])


def test_item_tower_sums_tokens_per_field_and_projects() -> None:
    torch.manual_seed(6)
    tokens = torch.randint(0, 50, (5, 2, 4))
    tokens[0] = 0
    tower = FeatureItemTower(tokens, 50, 3, DIM).double()
    table = tower.table()
    for item in range(5):
        fields = [
            sum(
                (tower.tokens.weight[w] for w in tokens[item, f] if w != 0), torch.zeros(3).double()
            )
            for f in range(2)
        ]
        torch.testing.assert_close(table[item], tower.adapter(torch.cat(fields)))
    ids = torch.tensor([[0, 3, 1], [4, 4, 2]])
    torch.testing.assert_close(tower(ids), table[ids])
    assert "item_tokens" not in tower.state_dict()  # the catalogue's, not the weights'
    with pytest.raises(ValueError, match=r"token ids must lie in 0\.\.49"):
        FeatureItemTower(tokens + 1, 50, 3, DIM)
