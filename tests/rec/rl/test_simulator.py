"""The group-Gaussian simulator: its fit, its draws, its artefact, and the sanity of its
episodes (the group oracle beats random; random scores the simulator's global mean)."""

import numpy as np
import pytest
from rated_helpers import GROUPS, ITEMS, planted_interactions

from attnsvm.rec.data.interactions import Interactions
from attnsvm.rec.sim.episodes import run_episodes
from attnsvm.rec.sim.policies import GroupOraclePolicy, PopularityPolicy, RandomPolicy
from attnsvm.rec.sim.simulator import FitSettings, GroupSimulator, SimulatorError, fit_simulator

SETTINGS = FitSettings(groups=GROUPS, items=ITEMS, shrinkage=2.0, factors=4, seed=3)


@pytest.fixture(scope="module")
def simulator() -> GroupSimulator:
    return fit_simulator(planted_interactions(), SETTINGS, {"dataset": "planted"})


def test_the_fit_is_reproducible_by_seed_and_survives_its_artefact(simulator, tmp_path):
    again = fit_simulator(planted_interactions(), SETTINGS, {"dataset": "planted"})
    for name in ("mean", "std", "counts", "group_sizes", "item_ids"):
        np.testing.assert_array_equal(getattr(again, name), getattr(simulator, name))
    loaded = GroupSimulator.load(simulator.save(tmp_path / "sim"))
    for name in ("mean", "std", "counts", "group_sizes", "item_ids"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(simulator, name))
    assert loaded.settings == SETTINGS and loaded.source["dataset"] == "planted"
    np.testing.assert_array_equal(loaded.users(5, 1).ratings, simulator.users(5, 1).ratings)
    assert not np.array_equal(simulator.users(5, 1).ratings, simulator.users(5, 1, 1).ratings)


def test_the_fit_recovers_the_planted_groups(simulator):
    """Each planted group loves one block of 10 items: each fitted group's best items are
    one block, and the three groups find the three blocks."""
    assert sorted(simulator.group_sizes.tolist()) == [20, 20, 20]
    blocks = set()
    for group in range(GROUPS):
        best = np.argsort(-simulator.mean[group])[:5]  # simulator ids − 1
        external = simulator.item_ids[best]
        block = (external - 1) // 10
        assert len(set(block.tolist())) == 1
        blocks.add(int(block[0]))
    assert blocks == {0, 1, 2}


def test_draws_are_clipped_rounded_and_average_to_the_exact_expectation(simulator):
    rng = np.random.default_rng(0)
    groups = np.zeros(40_000, dtype=np.int64)
    items = np.full((40_000, 2), [1, 7])
    draws = simulator.draw(groups, items, rng)
    assert set(np.unique(draws)) <= {1.0, 2.0, 3.0, 4.0, 5.0}
    expected = simulator.expected_ratings()[0, [0, 6]]
    spread = draws.std(axis=0) / np.sqrt(len(draws))
    assert np.all(np.abs(draws.mean(axis=0) - expected) < 5 * spread)


def test_the_oracle_beats_random_which_scores_the_global_mean(simulator):
    users = simulator.users(300, seed=0)
    random = run_episodes(RandomPolicy(simulator.num_items, seed=1), users, steps=8)
    oracle = run_episodes(GroupOraclePolicy(simulator, users), users, steps=8)
    popularity = run_episodes(PopularityPolicy(simulator), users, steps=8)
    # random picks uniform items for users spread evenly over the groups
    assert abs(random.mean - simulator.global_mean()) < 4 * random.standard_error
    assert oracle.mean > random.mean + 10 * (oracle.standard_error + random.standard_error)
    assert oracle.mean > popularity.mean
    # the same users, the same ratings: the oracle is better for nearly every user
    assert (oracle.per_user > random.per_user).mean() > 0.9


def test_data_without_ratings_is_refused_by_name():
    data = Interactions.from_columns(np.array([1, 1, 2]), np.array([1, 2, 1]), source="clicks")
    with pytest.raises(SimulatorError, match="clicks: no ratings"):
        fit_simulator(data, FitSettings(groups=1, items=2))


def test_a_damaged_simulator_folder_is_named(simulator, tmp_path):
    folder = simulator.save(tmp_path / "sim")
    (folder / "simulator.npz").write_bytes(b"not numpy")
    with pytest.raises(SimulatorError, match=r"simulator\.npz"):
        GroupSimulator.load(folder)
    with pytest.raises(SimulatorError, match="not a simulator folder"):
        GroupSimulator.load(tmp_path / "nothing")


@pytest.mark.data
def test_the_ml_100k_simulator_orders_the_policies(shared_data):
    from attnsvm.rec.data.datasets import load_dataset

    simulator = fit_simulator(load_dataset("ml-100k", root=shared_data))
    assert simulator.num_items == 400 and simulator.group_sizes.min() >= 40  # no tiny group
    users = simulator.users(50, seed=0)
    means = {
        policy.name: run_episodes(policy, users).mean
        for policy in (
            GroupOraclePolicy(simulator, users),
            PopularityPolicy(simulator),
            RandomPolicy(simulator.num_items),
        )
    }
    assert means["group oracle"] > means["popularity"] + 0.3  # 4.37 against 3.81 at 200/group
    assert means["popularity"] > means["random"] + 0.1  # 3.58
    assert abs(means["random"] - simulator.global_mean()) < 0.05
