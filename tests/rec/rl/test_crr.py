"""CRR stage 2: transitions from windows, the TD target, the advantage weights, Polyak
averaging, behaviour cloning as its special case, and a stage-2 run that is a run like any."""

import json

import numpy as np
import pytest
import torch
from rated_helpers import write_planted_csv

from attnsvm.rec.config import (
    ConfigError,
    DataConfig,
    EvalConfig,
    ModelChoice,
    RunConfig,
    TrainConfig,
)
from attnsvm.rec.models import LossConfig, build_model
from attnsvm.rec.rl.crr import (
    CRRConfig,
    Networks,
    actor_loss,
    advantage_weights,
    crr_losses,
    polyak,
    target_copy,
    transitions,
)
from attnsvm.rec.rl.crr_trainer import crr_run_config, train_crr
from attnsvm.rec.rl.rated import target_ratings
from attnsvm.rec.train.runs import evaluate_run, open_run
from attnsvm.rec.train.trainer import train

NUM_ITEMS = 30
TINY = {"hidden_size": 16, "ffn_size": 16, "max_len": 6, "dropout": 0.0, "attention_dropout": 0.0}


def windows() -> tuple[torch.Tensor, torch.Tensor]:
    inputs = torch.tensor([[0, 0, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12], [0, 0, 0, 0, 2, 9]])
    ratings = torch.tensor([[0, 0, 1, 2, 3, 4], [5, 4, 3, 2, 1, 5], [0, 0, 0, 0, 4, 1.0]])
    return inputs, ratings


def test_transitions_pair_each_state_with_the_next_event_and_end_at_the_window():
    step = transitions(*windows())
    assert step.here.sum() == 3 + 5 + 1
    assert step.actions.tolist() == [4, 5, 6, 8, 9, 10, 11, 12, 9]
    assert step.ratings.tolist() == [2, 3, 4, 4, 3, 2, 1, 5, 1]
    assert step.done.tolist() == [0, 0, 1, 0, 0, 0, 0, 1, 1]


def test_with_positive_advantages_the_binary_weight_is_behaviour_cloning():
    """f = 1[A > 0] with every A > 0: the actor's gradient is the stage-1 CE's, exactly."""
    torch.manual_seed(0)
    actor = build_model("sasrec+", NUM_ITEMS, **TINY).double()
    inputs, ratings = windows()
    step = transitions(inputs, ratings)
    config = CRRConfig(weight="binary")
    networks = Networks(actor, config).double()
    with torch.no_grad():  # Q1(s, a) = 1 on every logged action, 0 elsewhere: A = 1 − π(logged)
        networks.critics[0].weight.zero_()
        networks.critics[0].bias[step.actions] = 1.0
    target = target_copy(networks)
    _, loss, stats = crr_losses(networks, target, inputs, ratings, config, (1.0, 5.0), True)
    assert stats["advantage_positive"] == 1.0 and stats["weight_mean"] == 1.0
    crr_grads = torch.autograd.grad(loss, list(actor.parameters()), allow_unused=True)
    states = actor(inputs)[step.here]
    bc = LossConfig(name="ce").compute(states, step.actions, actor.output_embedding(), None)
    bc_grads = torch.autograd.grad(bc, list(actor.parameters()), allow_unused=True)
    for crr_grad, bc_grad in zip(crr_grads, bc_grads, strict=True):
        if bc_grad is None:
            assert crr_grad is None or not crr_grad.any()
            continue
        torch.testing.assert_close(crr_grad, bc_grad, atol=1e-12, rtol=1e-10)


def test_the_binary_weight_drops_negative_advantages_and_exp_is_clipped():
    advantages = torch.tensor([-2.0, -0.1, 0.0, 0.5, 10.0])
    binary = advantage_weights(advantages, CRRConfig(weight="binary"))
    assert binary.tolist() == [0, 0, 0, 1, 1]
    exp = advantage_weights(advantages, CRRConfig(weight="exp", beta=2.0, max_weight=20.0))
    torch.testing.assert_close(exp[:4], torch.exp(advantages[:4] / 2))
    assert exp[4] == 20.0
    torch.manual_seed(0)
    actor = build_model("sasrec+", NUM_ITEMS, **TINY)
    states, actions = torch.randn(5, 16), torch.tensor([1, 2, 3, 4, 5])
    weighted = actor_loss(actor, states, actions, binary)
    kept = actor_loss(actor, states[3:], actions[3:], torch.ones(2)) * 2 / 5
    torch.testing.assert_close(weighted, kept)


def test_the_td_target_bootstraps_from_the_next_state_unless_done():
    torch.manual_seed(0)
    actor = build_model("sasrec+", NUM_ITEMS, **TINY).double()
    config = CRRConfig(gamma=0.5, reward="liked", critic="shared")
    networks = Networks(actor, config).double()
    for critic in networks.critics:
        with torch.no_grad():
            critic.weight.zero_()
            critic.bias.fill_(2.0)  # every Q is 2, so every value is 2
    target = target_copy(networks)
    inputs, ratings = windows()
    critic_loss, _, stats = crr_losses(networks, target, inputs, ratings, config, (1.0, 5.0), False)
    step = transitions(inputs, ratings)
    reward = (step.ratings >= 4).double()
    td_target = reward + 0.5 * (1 - step.done) * 2.0
    assert stats["td_target_mean"] == pytest.approx(float(td_target.mean()))
    assert critic_loss.item() == pytest.approx(2 * float(((2.0 - td_target) ** 2).mean()))


def test_polyak_moves_the_target_a_tau_of_the_way():
    source, target = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    before = target.weight.detach().clone()
    polyak(target, source, 0.25)
    torch.testing.assert_close(target.weight, 0.75 * before + 0.25 * source.weight.detach())


@pytest.fixture(scope="module")
def stage1(tmp_path_factory):
    folder = tmp_path_factory.mktemp("crr")
    data = write_planted_csv(folder / "ratings.csv")
    config = RunConfig(
        model=ModelChoice("sasrec+", {k: v for k, v in TINY.items() if k != "max_len"}),
        data=DataConfig(dataset=str(data), max_len=8),
        train=TrainConfig(epochs=2, batch_size=16, lr=1e-2),
        eval=EvalConfig(ks=(1, 10)),
    )
    return train(config, folder / "stage1", show_progress=False).run_dir


@pytest.mark.parametrize("critic", ["separate", "shared"])
def test_stage_two_is_a_run_like_any_other(stage1, tmp_path, critic):
    config = crr_run_config(stage1, {"epochs": 2, "batch_size": 16, "patience": 5})
    crr = CRRConfig(critic=critic, actor_every=2)
    metrics = train_crr(config, crr, tmp_path / "crr", log=lambda _: None)
    run = tmp_path / "crr"
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [0, 1, 2] and log[0]["crr"] == {}
    for key in ("q1_loss", "q2_loss", "actor_loss", "advantage_mean", "weight_mean", "weight_max"):
        assert np.isfinite(log[1]["crr"][key])
    assert json.loads((run / "crr.json").read_text())["critic"] == critic
    assert json.loads((run / "config.json").read_text())["train"]["init_from"] == str(
        stage1.resolve()
    )
    assert 1 <= metrics["best_epoch"] <= 2 and metrics["test_liked"]["users"] > 0
    assert evaluate_run(run).metrics["NDCG@10"] == pytest.approx(metrics["test"]["NDCG@10"])


def test_rated_targets_are_the_held_out_events_ratings(stage1):
    loaded = open_run(stage1)
    ratings = target_ratings(loaded.run.config.data, loaded.task, "test")
    from attnsvm.rec.data.datasets import load_dataset

    data = load_dataset(loaded.run.config.data.dataset)
    last = data.to_sequences().offsets[1:] - 1
    np.testing.assert_array_equal(ratings, data.rating[last][loaded.task.users])


def test_stage_two_refuses_data_without_ratings(stage1, tmp_path):
    clicks = tmp_path / "clicks.txt"
    clicks.write_text("".join(f"{u} {u % 7 + 1} {u % 5 + 8} {u % 3 + 14}\n" for u in range(20)))
    config = crr_run_config(stage1)
    config = RunConfig(
        config.model, DataConfig(dataset=str(clicks), max_len=8), None, config.train, config.eval
    )
    with pytest.raises(ConfigError, match="CRR needs ratings"):
        train_crr(config, CRRConfig(), tmp_path / "refused")
