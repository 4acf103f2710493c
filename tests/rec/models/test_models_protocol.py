"""The model protocol: causality, padding, scoring, attention traces, configs and the registry."""

import pytest
import torch

from attnsvm.rec.models import (
    MODELS,
    PRESETS,
    BERT4Rec,
    BERT4RecConfig,
    LossConfig,
    SASRec,
    SASRecConfig,
    build_model,
    catalogue,
    resolve,
)
from attnsvm.rec.nn.attention import MultiHeadAttention, record_attention

NUM_ITEMS = 50
SMALL = {"hidden_size": 16, "ffn_size": 16, "num_heads": 2, "max_len": 12}


def model(name: str, **overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(name, NUM_ITEMS, **{**SMALL, **overrides}).double().eval()


def sequences(seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    seq = torch.randint(1, NUM_ITEMS + 1, (3, 12), generator=generator)
    seq[1, :5] = 0
    seq[2, :11] = 0
    return seq


@pytest.mark.parametrize("norm", ["sasrec", "pre", "post"])
def test_sasrec_is_causal(norm: str) -> None:
    sasrec = model("sasrec", norm=norm)
    seq = sequences()
    hidden = sasrec(seq)
    for t in range(6, 11):
        changed = seq.clone()
        changed[:, t + 1 :] = torch.randint(1, NUM_ITEMS + 1, changed[:, t + 1 :].shape)
        torch.testing.assert_close(
            sasrec(changed)[:, : t + 1], hidden[:, : t + 1], atol=1e-12, rtol=0
        )
        # …and the future does change later positions, so the check can fail
        assert not torch.allclose(sasrec(changed)[0, t + 1 :], hidden[0, t + 1 :])


@pytest.mark.parametrize("name", ["sasrec", "bert4rec"])
def test_padding_does_not_change_real_positions(name: str) -> None:
    net = model(name)
    padded = torch.tensor([[0, 0, 0, 0, 0, 0, 0, 3, 9, 4, 7, 1]])
    hidden = net(padded)
    assert torch.all(hidden[0, :7] == 0)
    # the same items with no padding at all, or with less of it: the same real outputs
    torch.testing.assert_close(net(padded[:, 7:]), hidden[:, 7:], atol=1e-12, rtol=0)
    torch.testing.assert_close(net(padded[:, 4:]), hidden[:, 4:], atol=1e-12, rtol=0)
    # batched with a full row
    batch = torch.cat([padded, sequences()[:1]])
    torch.testing.assert_close(net(batch)[:1], hidden, atol=1e-12, rtol=0)


def test_bert4rec_is_bidirectional() -> None:
    bert = model("bert4rec")
    seq = sequences()
    changed = seq.clone()
    changed[0, -1] = 1 + seq[0, -1] % NUM_ITEMS
    assert not torch.allclose(bert(changed)[0, 0], bert(seq)[0, 0])


@pytest.mark.parametrize("name", ["sasrec", "gsasrec", "bert4rec"])
def test_score_last_shape_padding_column_and_consistency(name: str) -> None:
    net = model(name)
    seq = sequences()
    scores = net.score_last(seq)
    assert scores.shape == (3, NUM_ITEMS + 1)
    assert torch.all(scores[:, 0] == float("-inf"))
    assert torch.isfinite(scores[:, 1:]).all()
    hidden = net(net.scoring_input(seq))[:, -1]
    expected = hidden @ net.output_embedding()[1:].T
    if net.output_bias() is not None:
        expected = expected + net.output_bias()[1:]
    torch.testing.assert_close(scores[:, 1:], expected)


@pytest.mark.parametrize("norm", ["sasrec", "pre", "post"])
@pytest.mark.parametrize("blocks", [1, 3])
def test_sasrec_scores_from_the_last_query_alone(norm: str, blocks: int) -> None:
    """Scoring computes only the last position in the last block; it must equal the full pass."""
    net = model("sasrec", norm=norm, num_blocks=blocks)
    seq = sequences()
    seq[0] = 0  # an empty history: its hidden state is zero either way
    torch.testing.assert_close(net.last_hidden(seq), net(seq)[:, -1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("norm", ["sasrec", "pre", "post"])
def test_sasrec_scores_do_not_depend_on_leading_padding(norm: str) -> None:
    """``padding_free``: the evaluator may drop padding columns before scoring."""
    net = model("sasrec", norm=norm)
    assert net.padding_free
    seq = sequences()[1:]  # the longest history starts at column 5
    torch.testing.assert_close(
        net.score_last(seq[:, 5:]), net.score_last(seq), rtol=1e-12, atol=1e-12
    )


def test_bert4rec_appends_the_mask_token() -> None:
    bert = model("bert4rec")
    full = sequences()
    appended = bert.scoring_input(full)
    assert appended.shape == (3, 12)  # full: the oldest column is dropped
    assert torch.equal(appended[:, :-1], full[:, 1:])
    assert torch.all(appended[:, -1] == NUM_ITEMS + 1)
    assert bert.scoring_input(full[:, 4:]).shape == (3, 9)  # room left: nothing dropped


def test_bert4rec_mask_items() -> None:
    bert = model("bert4rec", mask_prob=0.3)
    seq = torch.randint(1, NUM_ITEMS + 1, (400, 12), generator=torch.Generator().manual_seed(3))
    seq[:, :4] = 0
    seq[0, :11] = 0
    masked, targets = bert.mask_items(seq, torch.Generator().manual_seed(0))
    is_masked = masked == bert.mask_token
    assert torch.equal(targets != 0, is_masked)
    assert torch.equal(targets[is_masked], seq[is_masked])
    assert torch.equal(masked[~is_masked], seq[~is_masked])
    assert not is_masked[:, :4].any()  # padding is never masked
    assert is_masked.any(dim=1).all()  # every sequence predicts something
    assert 0.25 < is_masked[1:].float().sum() / (400 * 8 - 8) < 0.35
    forced = model("bert4rec", force_last_mask_prob=1.0)
    masked, targets = forced.mask_items(seq, torch.Generator().manual_seed(0))
    assert torch.equal(targets[:, -1], seq[:, -1]) and not targets[:, :-1].any()


@pytest.mark.parametrize("name", ["sasrec", "bert4rec"])
def test_attention_recorder_and_modules(name: str) -> None:
    """Recording switches to the reference path but leaves the output as it is; its weights are
    softmax(q·k/√d_h) recomputed naively from W_Q, W_K and the recorded layer inputs."""
    net = model(name, num_blocks=3)
    seq = sequences()
    with record_attention(net) as recorder:
        recorded = net(seq)
    torch.testing.assert_close(recorded, net(seq), atol=1e-12, rtol=0)
    assert [w.shape for w in recorder.attention] == [(3, 2, 12, 12)] * 3
    assert all(map(torch.equal, net.attention_weights(seq), recorder.attention))
    assert len(recorder.layer_inputs) == 3
    modules = net.attention_modules()
    assert len(modules) == 3 and all(isinstance(m, MultiHeadAttention) for m in modules)
    for attention, weights, (query, key, _) in zip(
        modules, recorder.attention, recorder.layer_inputs, strict=True
    ):
        q = attention.q_proj(query).view(3, 12, 2, 8).transpose(1, 2)
        k = attention.k_proj(key).view(3, 12, 2, 8).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / 8**0.5
        for row in range(3):
            real = seq[row] != 0
            n = int(real.sum())
            expected = scores[row][:, real][:, :, real]
            if name == "sasrec":
                causal = torch.ones(n, n, dtype=torch.bool).tril()
                expected = expected.masked_fill(~causal, float("-inf"))
            got = weights[row][:, real][:, :, real]
            torch.testing.assert_close(got, expected.softmax(-1), atol=1e-12, rtol=0)
            assert not weights[row][:, real][:, :, ~real].any()  # padding keys get nothing


def test_embedding_scaling_and_separate_output_table() -> None:
    tied = build_model("sasrec", NUM_ITEMS, **SMALL)
    assert tied.output_embedding().data_ptr() == tied.items.input.weight.data_ptr()
    assert tied.embed.scale == pytest.approx(4.0)  # √16, the official SASRec detail
    assert build_model("sasrec", NUM_ITEMS, scale_embeddings=False).embed.scale == 1.0
    separate = build_model("gsasrec", NUM_ITEMS)
    assert separate.output_embedding().data_ptr() != separate.items.input.weight.data_ptr()
    assert separate.output_embedding().shape == (NUM_ITEMS + 1, 128)
    bert = build_model("bert4rec", NUM_ITEMS)
    assert bert.items.input.weight.shape[0] == NUM_ITEMS + 2  # + the mask token
    assert bert.output_embedding().shape == (NUM_ITEMS + 1, 64)
    assert bert.output_bias().shape == (NUM_ITEMS + 1,)
    assert build_model("sasrec", NUM_ITEMS, position="none").embed.position is None


def test_attention_initialisation_and_output_dropout_switches() -> None:
    torch.manual_seed(0)
    normal = build_model("sasrec", NUM_ITEMS)  # the defaults; d = 64
    torch.manual_seed(0)
    xavier = build_model(
        "sasrec", NUM_ITEMS, init="xavier_attention", attention_output_dropout=False
    )
    for a, b in zip(normal.attention_modules(), xavier.attention_modules(), strict=True):
        for name in ("q_proj", "k_proj", "v_proj"):
            assert getattr(a, name).weight.std().item() == pytest.approx(0.02, rel=0.1)
            # Glorot-uniform on a 64 × 64 matrix: bound √(6/128), std = bound / √3 = 0.125
            assert getattr(b, name).weight.std().item() == pytest.approx(0.125, rel=0.1)
            assert getattr(b, name).bias.abs().max().item() == 0.0
        # the output projection keeps the Normal(0, init_std) of every other weight
        assert b.out_proj.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert all(block.dropout.p == 0.1 for block in normal.encoder.blocks)
    assert all(block.dropout.p == 0.0 for block in xavier.encoder.blocks)
    assert xavier.encoder.blocks[0].attention.dropout == 0.1  # attention weights keep theirs
    # RecTools' init: Glorot-normal for every matrix, e.g. the (51, 64) item table
    rectools = build_model("sasrec", NUM_ITEMS, init="xavier_normal")
    assert rectools.items.input.weight[1:].std().item() == pytest.approx(
        (2 / (NUM_ITEMS + 1 + 64)) ** 0.5, rel=0.15
    )
    assert rectools.encoder.blocks[0].ffn.inner.weight.std().item() == pytest.approx(
        (2 / 128) ** 0.5, rel=0.1
    )
    with pytest.raises(ValueError, match=r"SASRecConfig\.init must be one of"):
        build_model("sasrec", NUM_ITEMS, init="orthogonal")


@pytest.mark.parametrize("config_class", [SASRecConfig, BERT4RecConfig, LossConfig])
def test_configs_round_trip(config_class) -> None:
    config = config_class()
    assert config_class.from_dict(config.to_dict()) == config
    assert config.replace().to_dict() == config.to_dict()


def test_bad_config_names_the_key() -> None:
    with pytest.raises(ValueError, match=r"unknown SASRecConfig key 'hiden_size'"):
        build_model("sasrec", NUM_ITEMS, hiden_size=32)
    with pytest.raises(ValueError, match=r"SASRecConfig\.hidden_size must be int, got str"):
        build_model("sasrec", NUM_ITEMS, hidden_size="64")
    with pytest.raises(ValueError, match=r"SASRecConfig\.dropout must lie in"):
        build_model("sasrec", NUM_ITEMS, dropout=1.5)
    with pytest.raises(ValueError, match=r"SASRecConfig\.norm must be one of"):
        build_model("sasrec", NUM_ITEMS, norm="sandwich")
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        build_model("sasrec", NUM_ITEMS, hidden_size=10, num_heads=3)
    with pytest.raises(ValueError, match=r"unknown LossConfig key 'negative_count'"):
        LossConfig.from_dict({"negative_count": 3})
    with pytest.raises(ValueError, match=r"LossConfig\.name must be one of"):
        LossConfig(name="hinge")
    with pytest.raises(ValueError, match="unknown model 'sasrex'"):
        build_model("sasrex", NUM_ITEMS)


def test_bad_input_is_refused_clearly() -> None:
    net = model("sasrec")
    with pytest.raises(ValueError, match="length 13 > max_len 12"):
        net(torch.ones(2, 13, dtype=torch.long))
    with pytest.raises(ValueError, match="LongTensor"):
        net(torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"item ids must lie in 0\.\.50"):
        net.score_last(torch.full((1, 3), NUM_ITEMS + 1))


def test_registry_lists_models_and_presets() -> None:
    rows = dict(catalogue())
    assert {"sasrec", "bert4rec", "sasrec+", "gsasrec"} <= set(rows)
    assert all(description.strip() for description in rows.values())
    assert MODELS["sasrec"].model_class is SASRec and MODELS["bert4rec"].model_class is BERT4Rec
    for preset in PRESETS.values():
        assert preset.model in MODELS


def test_presets_carry_their_losses() -> None:
    name, config, loss = resolve("sasrec+")
    assert name == "sasrec" and loss.name == "ce"
    assert (config.hidden_size, config.num_blocks, config.num_heads, config.max_len) == (
        64,
        2,
        1,
        200,
    )
    name, config, loss = resolve("gsasrec")
    assert config.separate_output_embedding
    assert (loss.name, loss.num_negatives, loss.gbce_t) == ("gbce", 256, 0.75)
    assert resolve("sasrec")[2] == LossConfig(name="bce", num_negatives=1)
    assert resolve("bert4rec")[0] == "bert4rec" and BERT4Rec.objective == "cloze"
    assert SASRec.objective == "causal"
    _, overridden, _ = resolve("gsasrec", hidden_size=32, ffn_size=32)
    assert overridden.hidden_size == 32 and overridden.dropout == 0.5


def test_parameter_count_matches_the_reference_sasrec() -> None:
    """282,048 parameters for d = 64, 2 blocks, 3,416 items, len 200, as in peers.md."""
    assert sum(p.numel() for p in build_model("sasrec+", 3416).parameters()) == 282_048


def test_ffn_size_zero_only_where_the_blocks_can_drop_the_ffn():
    model = build_model("sasrec", 30, **(SMALL | {"ffn_size": 0}))
    assert model.encoder.blocks[0].ffn is None
    with pytest.raises(ValueError, match=r"BSARecConfig.ffn_size must be ≥ 1"):
        build_model("bsarec", 30, ffn_size=0)
    with pytest.raises(ValueError, match=r"SASRecConfig.ffn_size must be ≥ 0 \(0: no FFN\)"):
        build_model("sasrec", 30, ffn_size=-1)
