"""nstransformer: no statistic of the all-position objective reads a later position, the
stationarisation and de-stationary attention against the official formulas, the switch-off
baseline, tiny overfitting, the config round trip and bad input; the pointwise runner."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from attnsvm.errors import ExpectedFailure, InvalidRequest
from attnsvm.rec.config import DataConfig, EvalConfig, ModelChoice, RunConfig, TrainConfig
from attnsvm.rec.models import build_model
from attnsvm.rec.models.nstransformer import NSTransformer, NSTransformerConfig
from attnsvm.rec.nn.attention import attention_mask, reference_attention
from attnsvm.rec.nn.stationary import (
    DestationaryAttention,
    DestationaryFactors,
    FactorProjector,
    scaled_queries,
    window_statistics,
)
from attnsvm.rec.train.pointwise import train_pointwise

NUM_ITEMS, LENGTH = 30, 10
TINY = {"hidden_size": 16, "ffn_size": 16, "num_heads": 2, "max_len": LENGTH, "dropout": 0.0}
TINY |= {"attention_dropout": 0.0, "projector_hidden": 16}


def model(**overrides) -> NSTransformer:
    torch.manual_seed(0)
    return build_model("nstransformer", NUM_ITEMS, **{**TINY, **overrides}).eval()


def batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Three windows, the first two left-padded; ratings 1..5 at real positions."""
    generator = torch.Generator().manual_seed(seed)
    items = torch.randint(1, NUM_ITEMS + 1, (3, LENGTH), generator=generator)
    items[0, :4] = 0
    items[1, :1] = 0
    ratings = torch.randint(1, 6, (3, LENGTH), generator=generator).double()
    return items, ratings * (items != 0)


# -- causality ---------------------------------------------------------------------------------


@pytest.mark.parametrize("position", [4, 6, LENGTH - 1])
def test_no_statistic_or_output_reads_a_later_position(position):
    net = model()
    items, ratings = batch()
    changed_items, changed_ratings = items.clone(), ratings.clone()
    changed_items[:, position] = changed_items[:, position] % NUM_ITEMS + 1
    changed_ratings[:, position] = 6 - changed_ratings[:, position]
    raw = net.items(items) * net.scale
    changed_raw = net.items(changed_items) * net.scale
    valid, changed_valid = items != 0, changed_items != 0
    before = slice(None, position)
    mean, std = window_statistics(raw, valid, prefix=True)
    changed_mean, changed_std = window_statistics(changed_raw, changed_valid, prefix=True)
    assert torch.equal(mean[:, before], changed_mean[:, before])
    assert torch.equal(std[:, before], changed_std[:, before])
    tau, bias = net.factors(raw, valid, mean, std, prefix=True)
    changed_tau, changed_bias = net.factors(
        changed_raw, changed_valid, changed_mean, changed_std, prefix=True
    )
    assert torch.equal(tau[:, before], changed_tau[:, before])
    assert torch.equal(bias[:, :, before], changed_bias[:, :, before])
    with torch.no_grad():
        hidden = net(items, ratings)
        changed = net(changed_items, changed_ratings)
    assert torch.equal(hidden[:, before], changed[:, before])
    assert not torch.allclose(hidden[:, position:], changed[:, position:])  # it can fail


def test_an_events_own_rating_never_reaches_its_prediction():
    net = model()
    items, ratings = batch()
    changed = ratings.clone()
    changed[:, 5] = 6 - changed[:, 5]
    with torch.no_grad():
        logits = net.pointwise_logits(items, net(items, ratings))
        changed_logits = net.pointwise_logits(items, net(items, changed))
    assert torch.equal(logits[:, :6], changed_logits[:, :6])
    assert not torch.allclose(logits[:, 6:], changed_logits[:, 6:])  # the next events read it


def test_the_last_objective_reads_the_whole_window():
    net = model(objective="last")
    items, ratings = batch()
    changed = items.clone()
    changed[:, -1] = changed[:, -1] % NUM_ITEMS + 1
    with torch.no_grad():
        hidden, changed_hidden = net(items, ratings), net(changed, ratings)
    assert not torch.allclose(hidden[2, 0], changed_hidden[2, 0])
    # at the last position the prefix statistics and factors are the whole window's
    raw, valid = net.items(items) * net.scale, items != 0
    prefix = window_statistics(raw, valid, prefix=True)
    whole = window_statistics(raw, valid, prefix=False)
    for ours, window in zip(prefix, whole, strict=True):
        torch.testing.assert_close(ours[:, -1:], window, atol=1e-5, rtol=1e-5)
    tau, bias = net.factors(raw, valid, *prefix, prefix=True)
    whole_tau, whole_bias = net.factors(raw, valid, *whole, prefix=False)
    torch.testing.assert_close(tau[:, -1], whole_tau[:, -1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(bias[:, :, -1], whole_bias[:, :, -1], atol=1e-5, rtol=1e-5)


# -- the mechanism against the official formulas -------------------------------------------------


def test_statistics_against_a_loop_over_real_positions():
    x = torch.randn(3, LENGTH, 5, dtype=torch.float64)
    items, _ = batch()
    valid = items != 0
    mean, std = window_statistics(x, valid, prefix=True)
    whole_mean, whole_std = window_statistics(x, valid, prefix=False)
    for row in range(3):
        real = x[row][valid[row]]
        expected = torch.sqrt(real.var(0, unbiased=False) + 1e-5)
        torch.testing.assert_close(whole_mean[row, 0], real.mean(0))
        torch.testing.assert_close(whole_std[row, 0], expected)
        for t in range(LENGTH):
            seen = x[row, : t + 1][valid[row, : t + 1]]
            if len(seen):
                torch.testing.assert_close(mean[row, t], seen.mean(0))
                var = seen.var(0, unbiased=False)
                torch.testing.assert_close(std[row, t], torch.sqrt(var + 1e-5))


def test_the_series_conv_is_the_official_conv1d_over_features():
    projector = FactorProjector(dim=6, max_len=LENGTH, hidden=8, layers=2, outputs=3).double()
    official = nn.Conv1d(LENGTH, 1, 3, padding=1, padding_mode="circular", bias=False).double()
    official.weight.data = projector.series_weight.data[None].clone()
    raw = torch.randn(2, LENGTH, 6, dtype=torch.float64)
    stats = torch.randn(2, 1, 6, dtype=torch.float64)
    full = torch.ones(2, LENGTH, dtype=torch.bool)
    expected = projector.mlp(torch.cat([official(raw), stats], dim=1).view(2, -1))
    torch.testing.assert_close(projector(raw, full, stats, prefix=False)[:, 0], expected)


@pytest.mark.parametrize("reference", [False, True])
def test_destationary_attention_is_softmax_of_tau_qk_plus_delta(reference):
    torch.manual_seed(1)
    attention = DestationaryAttention(8, 2).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    tau = torch.rand(2, 5, dtype=torch.float64) + 0.5
    delta = torch.randn(2, 1, 5, 5, dtype=torch.float64)
    keep = attention_mask(torch.ones(2, 5, dtype=torch.bool), causal=True)
    attention.record_weights = reference  # the explicit path, or SDPA
    with scaled_queries(attention, tau):
        out = attention(x, x, keep, bias=delta / 2.0)
    del attention.record_weights
    assert attention.query_scale is None  # nothing left behind
    q, k, v = attention._project(x, x)  # unscaled outside the block
    scores = tau[:, None, :, None] * (q @ k.transpose(-1, -2)) + delta
    weights = (scores / 2.0).masked_fill(~keep, -math.inf).softmax(-1)  # √d_h = 2
    expected = attention._merge(weights @ v)
    torch.testing.assert_close(out, expected)
    plain, _ = reference_attention(q, k, v, keep, 0.0)
    assert not torch.allclose(attention._merge(plain), expected)


def test_factors_start_near_plain_attention_and_are_positive():
    net = model()
    items, _ = batch()
    raw = net.items(items) * net.scale
    mean, std = window_statistics(raw, items != 0, prefix=True)
    tau, bias = net.factors(raw, items != 0, mean, std, prefix=True)
    assert isinstance(net.factors, DestationaryFactors)
    assert tau.shape == (3, LENGTH) and bias.shape == (3, 1, LENGTH, LENGTH)
    assert (tau > 0).all() and (tau - 1).abs().max() < 0.1 and bias.abs().max() < 0.1


# -- the baseline switch, padding, overfitting -------------------------------------------------


def test_without_stationarisation_it_is_the_same_encoder_from_the_same_weights():
    stationary, plain = model(), model(stationarise=False)
    plain_state, stationary_state = plain.state_dict(), stationary.state_dict()
    assert set(stationary_state) - set(plain_state) == {
        name for name in stationary_state if name.startswith("factors.")
    }
    for name, value in plain_state.items():
        assert torch.equal(value, stationary_state[name]), name
    assert not any(isinstance(m, DestationaryAttention) for m in plain.modules())
    items, ratings = batch()
    with torch.no_grad():
        assert not torch.allclose(plain(items, ratings), stationary(items, ratings))


@pytest.mark.parametrize("objective", ["causal", "last"])
def test_left_padding_changes_no_real_position(objective):
    net = model(objective=objective)
    items, ratings = batch()
    with torch.no_grad():
        short = net(items[2:, 3:], ratings[2:, 3:])
        padded = net(
            torch.cat([torch.zeros(1, 3, dtype=torch.long), items[2:, 3:]], 1),
            torch.cat([torch.zeros(1, 3, dtype=torch.float64), ratings[2:, 3:]], 1),
        )
    torch.testing.assert_close(short, padded[:, 3:], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("stationarise", [True, False])
def test_it_memorises_which_events_are_liked(stationarise):
    """Liked iff an item has the parity of the one before it: a function of the history."""
    net = model(stationarise=stationarise).train()
    generator = torch.Generator().manual_seed(0)
    items = torch.randint(1, NUM_ITEMS + 1, (24, LENGTH), generator=generator)
    liked = torch.ones_like(items, dtype=torch.bool)
    liked[:, 1:] = items[:, 1:] % 2 == items[:, :-1] % 2
    ratings = torch.where(liked, 5.0, 2.0).double()
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(150):
        optimizer.zero_grad()
        loss = net.auxiliary_losses(["pointwise"], items, net(items, ratings), ratings)
        loss["pointwise"].backward()
        optimizer.step()
    assert loss["pointwise"].item() < 0.1


# -- configuration and bad input ---------------------------------------------------------------


def test_the_switches_round_trip_through_the_run_config():
    switches = {"stationarise": False, "objective": "last", "like_threshold": 3.5}
    switches |= {"denormalise": False, "detach_statistics": False, "rating_input": False}
    config = RunConfig(model=ModelChoice("nstransformer", switches))
    again = RunConfig.from_dict(config.to_dict())
    assert again == config
    built = NSTransformerConfig.from_dict(NSTransformerConfig(**switches).to_dict())
    assert built == NSTransformerConfig(**switches)
    assert model(**switches).objective == "last"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("objective", "cloze", "objective must be one of"),
        ("position", "learned_from_start", "position must be one of"),
        ("rating_scale", 0.0, "rating_scale must be > 0"),
        ("projector_layers", 0, "projector_layers must be ≥ 1"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        NSTransformerConfig(**{field: value})


def test_it_refuses_next_item_ranking_and_missing_ratings():
    net = model()
    items, ratings = batch()
    with pytest.raises(InvalidRequest, match="not the next item"):
        net.score_last(items, ratings=ratings)
    with pytest.raises(InvalidRequest, match="needs ratings"):
        net(items)


# -- the pointwise runner through the platform -------------------------------------------------


def write_rated(path: Path, users: int = 40) -> Path:
    """ML-100K ``u.data`` lines; liked iff the item has the parity of the user's previous one."""
    rng = np.random.default_rng(0)
    lines = []
    for user in range(users):
        times = np.sort(rng.choice(10**6, size=int(rng.integers(8, 16)), replace=False))
        previous = 0
        for time in times:
            item = int(rng.integers(1, NUM_ITEMS + 1))
            rating = 5 if item % 2 == previous % 2 else 2
            lines.append(f"{user + 1}\t{item}\t{rating}\t{time}")
            previous = item
    path.write_text("\n".join(lines) + "\n")
    return path


def runner_config(data: Path, **overrides) -> RunConfig:
    small = {k: v for k, v in TINY.items() if k != "max_len"}
    return RunConfig(
        model=ModelChoice("nstransformer", {**small, **overrides}),
        data=DataConfig(dataset=str(data), split="temporal", max_len=8),
        train=TrainConfig(epochs=2, batch_size=16, lr=1e-2, patience=5),
        eval=EvalConfig(batch_size=32),
    )


@pytest.mark.parametrize("objective", ["causal", "last"])
def test_the_runner_trains_and_judges_pointwise(tmp_path, objective):
    data = write_rated(tmp_path / "u.data")
    result = train_pointwise(runner_config(data, objective=objective), tmp_path / "run")
    assert (tmp_path / "run" / "pointwise.json").is_file()
    assert result.epochs == 2 and 1 <= result.best_epoch <= 2
    assert result.test["events"] > 0 and 0.0 <= result.test["AUC"] <= 1.0
    assert result.valid == result.history[result.best_epoch - 1]["valid"]


def test_pointwise_evaluation_of_data_without_ratings_is_a_clear_error(tmp_path):
    walks = tmp_path / "walks.txt"
    walks.write_text("\n".join(f"{u} 1 2 3 4 5 6" for u in range(1, 9)) + "\n")
    config = runner_config(walks)
    config = RunConfig(model=config.model, data=DataConfig(dataset=str(walks)))
    with pytest.raises(ExpectedFailure, match=r"needs ratings|has no ratings|has none"):
        train_pointwise(config)


def test_a_model_without_a_pointwise_head_is_refused(tmp_path):
    data = write_rated(tmp_path / "u.data")
    config = runner_config(data)
    config = RunConfig(model=ModelChoice("sasrec+"), data=config.data, train=config.train)
    with pytest.raises(ExpectedFailure, match="no pointwise head"):
        train_pointwise(config)


def test_attnsvm_train_hands_a_pointwise_model_to_the_pointwise_runner(tmp_path):
    from typer.testing import CliRunner

    from attnsvm.cli.main import app
    from attnsvm.rec.train.pointwise import is_pointwise

    assert is_pointwise("nstransformer") and not is_pointwise("sasrec+")
    assert not is_pointwise("pop")
    data = write_rated(tmp_path / "u.data")
    sets = ["data.split=temporal", "data.max_len=8", "train.epochs=1", "train.batch_size=16"]
    sets += [f"model.{k}={v}" for k, v in TINY.items() if k != "max_len"]
    args = ["train", "--model", "nstransformer", "--data", str(data), "--no-progress"]
    args += ["--out", str(tmp_path / "run")] + [x for s in sets for x in ("--set", s)]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    assert "LogLoss" in done.output and "pointwise.json" in done.output.replace("\n", "")
    saved = {p.name for p in (tmp_path / "run").iterdir()}
    assert saved == {"config.json", "model.safetensors", "pointwise.json"}


def test_the_runner_waits_for_min_steps_before_it_stops(tmp_path, monkeypatch):
    """A validation LogLoss that never improves stops a patience-1 run at epoch 2, unless
    ``train.min_steps`` has not been reached."""
    from attnsvm.rec.train import pointwise

    def flat(labels, logits):
        return {"LogLoss": 0.5, "AUC": 0.5, "F1": 0.5, "events": len(labels)}

    monkeypatch.setattr(pointwise, "pointwise_metrics", flat)
    data = write_rated(tmp_path / "u.data")
    config = runner_config(data)
    for min_steps, epochs in ((0, 2), (10**6, 4)):
        train = dataclasses.replace(config.train, epochs=4, patience=1, min_steps=min_steps)
        run = dataclasses.replace(config, train=train)
        result = train_pointwise(run, tmp_path / f"run{min_steps}")
        assert (result.epochs, result.best_epoch) == (epochs, 1)
