"""Critic-Regularised Regression on a sequential recommender (CRR-Transformer, stage 2).

The paper (Xi et al. 2023, "Integrating Offline Reinforcement Learning with Transformers for
Sequential Recommendation") could be read only in its abstract: a transformer policy is first
trained on next-item prediction (stage 1), then by CRR, an offline actor-critic that weights
the log-likelihood of each logged action by a function of its advantage (stage 2). Its reward,
critic architecture and settings are unknown; this module follows discrete CRR as ReAgent
implements it (``reagent/training/discrete_crr_trainer.py``) and makes each guess a switch.

**Transitions from causal windows** (``transitions``): in a window of a user's last training
events, state ``s_t`` is the prefix up to event t (the encoder's output at t), the action is
event t + 1, its reward comes from its rating, ``s_{t+1}`` is the output at t + 1, and the
window's last event ends the episode (``done``). One encoder pass gives every state.

**Critics**: twin critics ``Q_k(s, a) = h_k(s)·W_k[a] + b_k[a]`` over the whole catalogue,
with ``h_k`` from its own copy of the stage-1 encoder (``critic = "separate"``) or the actor's
encoder (``"shared"``: the TD loss trains it too); target copies of actor and critics follow
by Polyak averaging (``tau``). Target: ``y = r + γ (1 − done) min_k Σ_a π(a|s') Q̄_k(s', a)``
with π the current actor, as ReAgent's default (``target_actor = true``: the target actor).

**Actor**: ``A = Q_1(s, a) − Σ_a π(a|s) Q_1(s, a)`` (the exact value over the catalogue),
``L_π = −mean f(A) log π(a|s)`` with ``f = min(exp(A / β), max_weight)`` (``"exp"``;
ReAgent: β = 1, clip 20) or ``f = 1[A > 0]`` (``"binary"``); with every advantage positive and
the binary weight this is behaviour cloning's loss, the stage-1 CE (a test checks the
gradients). The actor steps every ``actor_every`` critic steps (ReAgent's delayed update).

**Reward** [our reading]: ``"centered"``, the rating minus the scale's midpoint (r − 3 on
1–5), or ``"liked"``, 1 when the rating is ≥ ``like_threshold``; γ = 0.9.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from attnsvm.rec.config_base import Config
from attnsvm.rec.models import SequentialRecommender

REWARDS = ("centered", "liked")
WEIGHTS = ("exp", "binary")
CRITICS = ("separate", "shared")
SELECTIONS = ("overall", "liked")


@dataclass(frozen=True)
class CRRConfig(Config):
    reward: str = "centered"
    like_threshold: float = 4.0
    gamma: float = 0.9
    tau: float = 0.005
    weight: str = "exp"
    beta: float = 1.0
    max_weight: float = 20.0
    critic: str = "separate"
    target_actor: bool = False
    actor_every: int = 1
    critic_lr: float = 1e-3
    #: which validation score keeps an epoch: ``eval.valid_metric`` over all users
    #: ("overall") or HR@10 over the users whose validation target they liked ("liked")
    select: str = "overall"

    def __post_init__(self) -> None:
        self._choice("reward", REWARDS)
        self._choice("weight", WEIGHTS)
        self._choice("critic", CRITICS)
        self._choice("select", SELECTIONS)
        self._range("gamma", 0.0, 1.0, high_open=True)
        self._range("tau", 0.0, 1.0)
        for name in ("beta", "max_weight", "critic_lr"):
            if getattr(self, name) <= 0:
                raise ValueError(f"CRRConfig.{name} must be > 0, got {getattr(self, name)}")
        if self.actor_every < 1:
            raise ValueError(f"CRRConfig.actor_every must be ≥ 1, got {self.actor_every}")


def rewards(ratings: torch.Tensor, config: CRRConfig, scale: tuple[float, float]) -> torch.Tensor:
    """The reward of each rating; ``scale`` = (lowest, highest) rating of the data."""
    if config.reward == "liked":
        return (ratings >= config.like_threshold).to(torch.float32)
    return (ratings - (scale[0] + scale[1]) / 2).to(torch.float32)


class Transitions(NamedTuple):
    here: torch.Tensor  # (B, L) True where position t is a state with a next event
    actions: torch.Tensor  # (T,) the next event's item
    ratings: torch.Tensor  # (T,) its rating
    done: torch.Tensor  # (T,) 1 where the next event is the window's last


def transitions(inputs: torch.Tensor, ratings: torch.Tensor) -> Transitions:
    """Every (s_t, a_t, r_t, s_{t+1}) of left-padded windows (module docstring)."""
    valid = inputs != 0
    here = torch.zeros_like(valid)
    here[:, :-1] = valid[:, :-1] & valid[:, 1:]
    after = here.roll(1, dims=1)  # the next state of each transition, in the same order
    last = torch.zeros_like(valid)
    last[:, -1] = True
    return Transitions(here, inputs[after], ratings[after], last[after].float())


def next_states(states: torch.Tensor, here: torch.Tensor) -> torch.Tensor:
    """The states one step after the transitions at ``here`` (B, L, D) → (T, D)."""
    return states[here.roll(1, dims=1)]


class Critic(nn.Module):
    """``Q(s, ·) = h(s) W^T + b`` over the catalogue; ``h`` from the critic's own copy of the
    stage-1 model, or the actor's states when it has none (``"shared"``)."""

    def __init__(self, actor: SequentialRecommender, separate: bool) -> None:
        super().__init__()
        self.encoder = copy.deepcopy(actor) if separate else None
        weight = torch.empty_like(actor.output_embedding().detach())
        self.weight = nn.Parameter(nn.init.normal_(weight, std=actor.config.init_std))
        self.bias = nn.Parameter(torch.zeros(weight.shape[0]))

    def states(self, inputs: torch.Tensor, actor_states: torch.Tensor) -> torch.Tensor:
        return actor_states if self.encoder is None else self.encoder(inputs)

    def values(self, states: torch.Tensor) -> torch.Tensor:
        """(T, D) → (T, num_items + 1); the padding column never enters a value."""
        return states @ self.weight.T + self.bias


class Networks(nn.Module):
    """The actor and the twin critics, one module so that a target copy follows all three."""

    def __init__(self, actor: SequentialRecommender, config: CRRConfig) -> None:
        super().__init__()
        separate = config.critic == "separate"
        self.actor = actor
        self.critics = nn.ModuleList([Critic(actor, separate), Critic(actor, separate)])

    def critic_parameters(self) -> list[nn.Parameter]:
        return [p for critic in self.critics for p in critic.parameters()]


def target_copy(networks: Networks) -> Networks:
    target = copy.deepcopy(networks).eval()
    for parameter in target.parameters():
        parameter.requires_grad_(False)
    return target


@torch.no_grad()
def polyak(target: nn.Module, source: nn.Module, tau: float) -> None:
    """``θ̄ ← (1 − τ) θ̄ + τ θ`` for every parameter."""
    pairs = list(zip(target.parameters(), source.parameters(), strict=True))
    torch._foreach_lerp_([t for t, _ in pairs], [s for _, s in pairs], tau)


def policy(actor: SequentialRecommender, states: torch.Tensor) -> torch.Tensor:
    """π(·|s) over the catalogue (padding has probability 0)."""
    return actor.logits(states).softmax(dim=-1)


def advantage_weights(advantages: torch.Tensor, config: CRRConfig) -> torch.Tensor:
    if config.weight == "binary":
        return (advantages > 0).to(advantages.dtype)
    return torch.exp(advantages / config.beta).clamp(max=config.max_weight)


def actor_loss(
    actor: SequentialRecommender, states: torch.Tensor, actions: torch.Tensor, weights
) -> torch.Tensor:
    """``−mean w · log π(a|s)`` over transitions: CE weighted per transition."""
    log_pi = F.log_softmax(actor.logits(states), dim=-1)
    return -(weights.detach() * log_pi.gather(1, actions[:, None])[:, 0]).mean()


def crr_losses(
    networks: Networks,
    target: Networks,
    inputs: torch.Tensor,
    ratings: torch.Tensor,
    config: CRRConfig,
    scale: tuple[float, float],
    actor_step: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, float]]:
    """The critics' TD loss, the actor's weighted likelihood loss (None unless
    ``actor_step``) and the step's statistics, on one batch of windows."""
    step = transitions(inputs, ratings)
    reward = rewards(step.ratings, config, scale)
    actor_states = networks.actor(inputs)
    with torch.no_grad():
        target_states = target.actor(inputs)
        pi_states = target_states if config.target_actor else actor_states.detach()
        next_pi = policy(
            target.actor if config.target_actor else networks.actor,
            next_states(pi_states, step.here),
        )
        next_values = torch.stack(
            [
                (
                    next_pi
                    * critic.values(next_states(critic.states(inputs, target_states), step.here))
                ).sum(-1)
                for critic in target.critics
            ]
        )
        td_target = reward + config.gamma * (1 - step.done) * next_values.min(dim=0).values
    taken, first_values = [], None
    for index, critic in enumerate(networks.critics):
        values = critic.values(critic.states(inputs, actor_states)[step.here])
        taken.append(values.gather(1, step.actions[:, None])[:, 0])
        if index == 0:
            first_values = values
    critic_losses = [F.mse_loss(q, td_target) for q in taken]
    stats = {
        "q1_loss": critic_losses[0].item(),
        "q2_loss": critic_losses[1].item(),
        "q_mean": taken[0].mean().item(),
        "td_target_mean": td_target.mean().item(),
        "reward_mean": reward.mean().item(),
    }
    loss_pi = None
    if actor_step:
        states = actor_states[step.here]
        with torch.no_grad():
            pi = policy(networks.actor, states)
            advantage = taken[0] - (pi * first_values).sum(-1)
            weights = advantage_weights(advantage, config)
        loss_pi = actor_loss(networks.actor, states, step.actions, weights)
        stats |= {
            "actor_loss": loss_pi.item(),
            "advantage_mean": advantage.mean().item(),
            "advantage_std": advantage.std().item() if advantage.numel() > 1 else 0.0,
            "advantage_positive": (advantage > 0).float().mean().item(),
            "weight_mean": weights.mean().item(),
            "weight_max": weights.max().item(),
            "weight_clipped": (weights >= config.max_weight).float().mean().item(),
        }
    return critic_losses[0] + critic_losses[1], loss_pi, stats
