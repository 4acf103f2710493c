"""The episode evaluator and its policies: no repeats, the oracle's order, what a model reads
back (every rating or the liked items, mapped by external id), and any registered model or
baseline run as a policy."""

import numpy as np
import pytest
import torch
from rated_helpers import GROUPS, ITEMS, planted_interactions, write_planted_csv

from attnsvm.rec.config import DataConfig, EvalConfig, ModelChoice, RunConfig
from attnsvm.rec.models import build_model
from attnsvm.rec.sim.episodes import run_episodes, save_results
from attnsvm.rec.sim.policies import (
    GroupOraclePolicy,
    ModelPolicy,
    RandomPolicy,
    model_policy,
    run_policy,
)
from attnsvm.rec.sim.simulator import FitSettings, fit_simulator
from attnsvm.rec.train.trainer import train


@pytest.fixture(scope="module")
def simulator():
    settings = FitSettings(groups=GROUPS, items=ITEMS, factors=4, seed=0)
    return fit_simulator(planted_interactions(), settings)


def test_episodes_never_repeat_and_the_oracle_follows_its_groups_expectation(simulator, tmp_path):
    users = simulator.users(4, seed=2)
    oracle = run_episodes(GroupOraclePolicy(simulator, users), users, steps=6)
    random = run_episodes(RandomPolicy(simulator.num_items), users, steps=ITEMS)
    for result in (oracle, random):
        assert all(len(set(row)) == len(row) for row in result.items.tolist())
        assert result.items.min() >= 1
    assert np.array_equal(np.sort(random.items, axis=1), np.tile(np.arange(1, ITEMS + 1), (12, 1)))
    expected = simulator.expected_ratings()
    for row, group in zip(oracle.items, users.groups, strict=True):
        np.testing.assert_array_equal(row, np.argsort(-expected[group], kind="stable")[:6] + 1)
    np.testing.assert_array_equal(
        oracle.ratings, users.ratings[np.arange(12)[:, None], oracle.items - 1]
    )
    save_results([oracle, random], tmp_path)
    assert (tmp_path / "episodes.png").stat().st_size > 0
    with pytest.raises(ValueError, match=r"episode steps must lie in 1\.\.30"):
        run_episodes(GroupOraclePolicy(simulator, users), users, steps=31)


class Recorder:
    """A scorer that keeps the histories it was asked about and prefers high model ids."""

    def __init__(self, num_items: int) -> None:
        self.num_items, self.histories = num_items, []

    def __call__(self, task):
        self.histories.append(task.history)
        return lambda rows: torch.arange(self.num_items + 1, dtype=torch.float32).repeat(
            len(rows), 1
        )


def test_a_model_reads_back_its_feedback_through_the_catalogue_map(simulator):
    users = simulator.users(1, seed=0)
    columns = np.arange(simulator.num_items, 0, -1)  # the model numbers the items backwards
    recorder = Recorder(simulator.num_items)
    liked = ModelPolicy("liked", recorder, columns, feedback="liked", fallback=np.zeros(ITEMS))
    result = run_episodes(liked, users, steps=5)
    for step, history in enumerate(recorder.histories):
        for row in range(len(users)):
            shown = result.items[row, :step]
            kept = shown[result.ratings[row, :step] >= 4]
            np.testing.assert_array_equal(history.row(row), columns[kept - 1])
            np.testing.assert_array_equal(
                history.times[history.offsets[row] : history.offsets[row + 1]],
                np.flatnonzero(result.ratings[row, :step] >= 4) * 86400.0,
            )
    recorder = Recorder(simulator.num_items)
    everything = ModelPolicy("all", recorder, columns, feedback="all")
    result = run_episodes(everything, users, steps=5)
    assert np.all(result.items[:, 0] == 1)  # model id 30 scores highest: simulator item 1
    last = recorder.histories[-1]
    np.testing.assert_array_equal(last.ratings, result.ratings[:, :4].ravel())


def test_an_empty_liked_history_falls_back_to_popularity(simulator):
    users = simulator.users(1, seed=0)
    fallback = np.zeros(ITEMS)
    fallback[[4, 9]] = (2.0, 1.0)  # items 5 then 10
    policy = ModelPolicy(
        "m",
        Recorder(ITEMS),
        np.arange(1, ITEMS + 1),
        feedback="liked",
        like_threshold=99.0,
        fallback=fallback,
    )
    result = run_episodes(policy, users, steps=2)
    assert np.all(result.items == [5, 10])


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("sasrec", {}),
        ("bert4rec", {}),
        ("ssept", {"num_users": 5, "user_size": 8}),
        ("strec", {"num_blocks": 2}),
        ("rlt4rec", {"num_heads": 2}),
    ],
)
def test_any_registered_model_plays_episodes(simulator, name, overrides):
    torch.manual_seed(0)
    model = build_model(name, 40, hidden_size=16, ffn_size=16, max_len=10, **overrides)
    item_ids = np.array([0, *range(1, 41)])  # 10 items the simulator lacks: never shown
    users = simulator.users(2, seed=0)
    result = run_episodes(model_policy(model, simulator, item_ids=item_ids), users, steps=12)
    assert result.items.shape == (6, 12) and result.items.max() <= ITEMS
    assert all(len(set(row)) == 12 for row in result.items.tolist())


def test_a_baseline_run_plays_episodes(simulator, tmp_path):
    data = write_planted_csv(tmp_path / "ratings.csv")
    config = RunConfig(
        model=ModelChoice("pop"), data=DataConfig(dataset=str(data)), eval=EvalConfig(ks=(1, 10))
    )
    run = train(config, tmp_path / "pop").run_dir
    users = simulator.users(2, seed=0)
    result = run_episodes(run_policy(run, simulator), users, steps=3)
    counts = simulator.popularity()
    # no liked feedback yet the first step: the fallback is the popularity ranking as well
    assert np.all(result.items[:, 0] == np.argsort(-counts, kind="stable")[0] + 1)
