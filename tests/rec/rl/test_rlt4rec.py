"""RLT4Rec: it memorises tiny episodes, never reads what it predicts, ignores padding, trains
on simulated and logged episodes into a run directory, and trains under the platform's loop."""

import dataclasses

import numpy as np
import pytest
import torch
from rated_helpers import GROUPS, ITEMS, planted_interactions, write_planted_csv

from attnsvm.errors import InvalidRequest
from attnsvm.rec.config import (
    ConfigError,
    DataConfig,
    EvalConfig,
    ModelChoice,
    RunConfig,
    TrainConfig,
)
from attnsvm.rec.models import build_model
from attnsvm.rec.sim.episodes import run_episodes
from attnsvm.rec.sim.policies import run_policy
from attnsvm.rec.sim.rlt4rec_training import (
    EpisodeSettings,
    episode_run_config,
    logged_episodes,
    random_episodes,
    train_rlt4rec,
)
from attnsvm.rec.sim.simulator import FitSettings, fit_simulator
from attnsvm.rec.train.runs import load_run, recommend
from attnsvm.rec.train.trainer import train

NUM_ITEMS, LENGTH = 30, 8
TINY = {"hidden_size": 32, "ffn_size": 64, "num_heads": 2, "max_len": LENGTH, "dropout": 0.0}
TINY |= {"attention_dropout": 0.0}


def tiny_episodes(rows: int = 12, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Every episode starts with item 1 and a distinct pair of first two ratings, then distinct
    random items: each prefix the model reads (ratings up to the next item's) has one
    continuation. Row 1 is shortened by left padding."""
    generator = torch.Generator().manual_seed(seed)
    pairs = torch.randperm(25, generator=generator)[:rows]
    items = torch.zeros(rows, LENGTH, dtype=torch.long)
    ratings = torch.zeros(rows, LENGTH, dtype=torch.float64)
    for row in range(rows):
        start = 3 if row == 1 else 0
        rest = torch.randperm(NUM_ITEMS - 1, generator=generator)[: LENGTH - start - 1] + 2
        items[row, start:] = torch.cat([torch.ones(1, dtype=torch.long), rest])
        ratings[row, start:] = torch.randint(1, 6, (LENGTH - start,), generator=generator).double()
        ratings[row, start : start + 2] = torch.stack([pairs[row] // 5, pairs[row] % 5]) + 1.0
    return items, ratings


def test_rlt4rec_memorises_tiny_episodes():
    torch.manual_seed(0)
    model = build_model("rlt4rec", NUM_ITEMS, **TINY)
    items, ratings = tiny_episodes()
    optimiser = torch.optim.AdamW(model.parameters(), lr=5e-3)
    for _ in range(300):
        actions, rated = model.episode_losses(items, ratings)
        optimiser.zero_grad()
        (actions + rated).backward()
        optimiser.step()
    model.eval()
    with torch.no_grad():
        actions, rated = model.episode_losses(items, ratings)
        # every item is the top-scored one at its rating token, the first (cold) one included
        states = model.token_states(items, ratings)[:, 0::2]
        best = model.logits(states).argmax(dim=-1)
    real = items != 0
    assert torch.equal(best[real], items[real])
    assert actions.item() < 0.1 and rated.item() < 0.5  # chance: log 30 ≈ 3.4; ratings' var ≈ 2


def test_an_output_never_reads_its_target_item_nor_anything_later():
    """Position t predicts item t + 1 from items ≤ t and ratings ≤ t + 1 (the rating it is
    conditioned on, by design): changing item t + 1 or anything after it leaves it alone."""
    model = build_model("rlt4rec", NUM_ITEMS, **TINY).double().eval()
    items, ratings = tiny_episodes(rows=3, seed=1)
    hidden = model(items, ratings)
    for t in range(3, LENGTH - 1):
        changed_items, changed_ratings = items.clone(), ratings.clone()
        changed_items[:, t + 1 :] = torch.randint(1, NUM_ITEMS + 1, changed_items[:, t + 1 :].shape)
        changed_ratings[:, t + 2 :] = torch.randint(
            1, 6, changed_ratings[:, t + 2 :].shape
        ).double()
        later = model(changed_items, changed_ratings)
        torch.testing.assert_close(later[:, : t + 1], hidden[:, : t + 1], atol=1e-12, rtol=0)
    changed = ratings.clone()
    changed[:, 5] = 6 - changed[:, 5]  # the rating of position 4's target conditions it
    assert not torch.allclose(model(items, changed)[0, 4], hidden[0, 4])


def test_left_padding_changes_no_real_output_and_scoring_starts_from_nothing():
    model = build_model("rlt4rec", NUM_ITEMS, **TINY).double().eval()
    items, ratings = tiny_episodes(rows=4, seed=2)
    short_items, short_ratings = items[:, -5:], ratings[:, -5:]
    padded_items = torch.nn.functional.pad(short_items, (LENGTH - 5, 0))
    padded_ratings = torch.nn.functional.pad(short_ratings, (LENGTH - 5, 0))
    real = short_items != 0
    torch.testing.assert_close(
        model(padded_items, padded_ratings)[:, -5:][real],
        model(short_items, short_ratings)[real],
        atol=1e-12,
        rtol=0,
    )
    empty = model.score_last(torch.zeros(2, 1, dtype=torch.long), ratings=torch.zeros(2, 1))
    assert torch.isfinite(empty[:, 1:]).all()
    torch.testing.assert_close(empty[0], empty[1], atol=1e-12, rtol=0)


def test_random_and_logged_episodes_are_left_padded_subsets():
    simulator = fit_simulator(planted_interactions(), FitSettings(groups=GROUPS, items=ITEMS))
    rng = np.random.default_rng(0)
    items, ratings = random_episodes(simulator, 200, 6, rng)
    lengths = (items != 0).sum(axis=1)
    assert lengths.min() == 1 and lengths.max() == 6
    assert np.all((items != 0) == (np.arange(6) >= 6 - lengths[:, None]))
    assert all(len(set(row[row > 0])) == (row > 0).sum() for row in items)
    assert set(np.unique(ratings[items != 0])) <= {1.0, 2.0, 3.0, 4.0, 5.0}
    from attnsvm.rec.data.sequences import Sequences

    histories = Sequences(
        np.array([0, 3, 5]),
        np.array([4, 5, 6, 7, 8]),
        np.array([0, 1]),
        None,
        np.array([1.0, 2, 3, 4, 5]),
    )
    items, ratings = logged_episodes(histories, 600, 6, rng)
    rated = {4: 1.0, 5: 2.0, 6: 3.0, 7: 4.0, 8: 5.0}
    for row_items, row_ratings in zip(items, ratings, strict=True):
        kept = row_items[row_items > 0]
        assert set(kept) <= {4, 5, 6} or set(kept) <= {7, 8}
        assert [rated[i] for i in kept] == row_ratings[row_items > 0].tolist()
    assert {tuple(row[row > 0]) for row in items} >= {(4, 5, 6), (6, 5, 4)}


@pytest.mark.parametrize("source", ["random", "logged"])
def test_episode_training_writes_a_run_that_plays_again(tmp_path, source):
    data = write_planted_csv(tmp_path / "ratings.csv")
    from attnsvm.rec.data.datasets import load_dataset

    simulator = fit_simulator(
        load_dataset(str(data)), FitSettings(groups=GROUPS, items=ITEMS), {"dataset": str(data)}
    )
    simulator.save(tmp_path / "sim")
    train_config = TrainConfig(epochs=2, steps_per_epoch=3, batch_size=16, lr=5e-3, seed=1)
    config = episode_run_config(
        simulator, {k: v for k, v in TINY.items() if k != "max_len"}, train_config
    )
    settings = EpisodeSettings(source=source, steps=6, valid_users=2, test_users=3)
    metrics = train_rlt4rec(
        tmp_path / "sim", tmp_path / "run", config, settings, log=lambda _: None
    )
    assert metrics["epochs"] == 2 and 1 <= metrics["best_epoch"] <= 2
    assert 1.0 <= metrics["test"]["mean_rating@6"] <= 5.0
    run = load_run(tmp_path / "run")
    assert run.model.num_items == ITEMS and (tmp_path / "run" / "episodes.png").exists()
    replay = run_episodes(run_policy(tmp_path / "run", simulator), simulator.users(3, 0), 6)
    assert replay.mean == pytest.approx(metrics["test"]["mean_rating@6"])
    with pytest.raises(ConfigError, match=r"steps 30 > model\.max_len 25"):
        train_rlt4rec(
            tmp_path / "sim", tmp_path / "run2", config, dataclasses.replace(settings, steps=30)
        )


def test_the_platform_trainer_trains_it_on_rated_logs_and_refuses_data_without(tmp_path):
    data = write_planted_csv(tmp_path / "ratings.csv")
    config = RunConfig(
        model=ModelChoice("rlt4rec", {k: v for k, v in TINY.items() if k != "max_len"}),
        data=DataConfig(dataset=str(data), max_len=LENGTH),
        train=TrainConfig(epochs=2, batch_size=16),
        eval=EvalConfig(ks=(1, 10)),
    )
    result = train(config, tmp_path / "run", show_progress=False)
    log = (result.run_dir / "log.jsonl").read_text()
    assert '"rating"' in log  # the rating head's auxiliary term is logged
    assert len(recommend(result.run_dir, user=4, k=5)) == 5  # the user's ratings are read
    with pytest.raises(InvalidRequest, match="needs event ratings"):
        recommend(result.run_dir, history=[1, 2, 3])
    clicks = tmp_path / "clicks.txt"
    clicks.write_text("".join(f"{u} {u % 7 + 1} {u % 5 + 8} {u % 3 + 14}\n" for u in range(20)))
    no_ratings = dataclasses.replace(config, data=DataConfig(dataset=str(clicks), max_len=LENGTH))
    with pytest.raises(ConfigError, match="needs event ratings"):
        train(no_ratings, tmp_path / "refused", show_progress=False)


def test_the_lens_refuses_it_with_a_reason():
    from attnsvm.lens.extract import LensError, head_grid
    from attnsvm.rec.models import build_model

    model = build_model("rlt4rec", 20, hidden_size=16, ffn_size=16, num_heads=2)
    with pytest.raises(LensError, match="not the history's items"):
        head_grid(model, None, None)
