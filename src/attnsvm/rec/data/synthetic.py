"""Synthetic sequences with a planted selected token, the built-in data of ``make demo``.

Each sequence is a run of *episodes* laid out backwards from its end. An episode is a
**trigger** item, then ``gap`` (1..``max_gap``) positions later the trigger's **target** item;
between and before episodes sit **noise** items drawn with a popularity skew
(``p(rank r) ∝ r ** -popularity_skew``). Triggers, targets and noise items are disjoint sets, so
the last item of every sequence is determined by exactly one earlier item: the trigger at a
random position, recorded in the ground truth. With probability ``noise`` a target is replaced
by a noise item (label noise; ``GroundTruth.planted`` says where).

The last item of each sequence closes an episode, so leave-one-out test targets are planted;
earlier episodes lie in the training part, so a model can learn the trigger → target map from
it. Item ids are the internal ids (``Interactions.item_ids == arange(num_items + 1)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnsvm.rec.data.interactions import Interactions


@dataclass(frozen=True)
class GroundTruth:
    trigger_position: np.ndarray  # (users,) 0-based position of the trigger of the last item
    trigger_item: np.ndarray  # (users,) that trigger
    target_item: np.ndarray  # (users,) trigger_to_target[trigger_item]
    planted: np.ndarray  # (users,) bool: the last item is target_item (no label noise)
    trigger_to_target: np.ndarray  # (num_items + 1,) each trigger's target; 0 elsewhere


def make_planted(
    num_users: int = 2000,
    num_items: int = 300,
    length: int = 20,
    num_triggers: int = 20,
    noise: float = 0.0,
    popularity_skew: float = 1.0,
    seed: int = 0,
    max_gap: int | None = None,
) -> tuple[Interactions, GroundTruth]:
    """``num_users`` sequences of ``length`` items; ``max_gap`` defaults to ``length // 2``."""
    max_gap = max(1, length // 2) if max_gap is None else max_gap
    if length < 3:
        raise ValueError("length must be >= 3 (leave-one-out needs 3 events per user)")
    if not 1 <= max_gap <= length - 1:
        raise ValueError("max_gap must lie in 1..length-1")
    if num_items < 2 * num_triggers + 2 or num_triggers < 1:
        raise ValueError("need num_triggers >= 1 and num_items >= 2 * num_triggers + 2")
    if not 0.0 <= noise <= 1.0:
        raise ValueError("noise must lie in [0, 1]")
    rng = np.random.default_rng(seed)
    catalogue = rng.permutation(num_items) + 1
    triggers = catalogue[:num_triggers]
    targets = catalogue[num_triggers : 2 * num_triggers]
    fillers = catalogue[2 * num_triggers :]
    weights = np.arange(1, fillers.size + 1, dtype=np.float64) ** -popularity_skew
    filler_cdf = np.cumsum(weights) / weights.sum()

    def filler(shape: tuple[int, ...] | int) -> np.ndarray:
        index = np.searchsorted(filler_cdf, rng.random(shape), side="right")
        return fillers[np.minimum(index, fillers.size - 1)]

    seq = filler((num_users, length))
    users = np.arange(num_users)
    end = np.full(num_users, length - 1)
    active = np.ones(num_users, dtype=bool)
    truth = None
    while active.any():
        which = rng.integers(num_triggers, size=num_users)
        trigger = end - rng.integers(1, max_gap + 1, size=num_users)
        active &= trigger >= 0
        keep_label = rng.random(num_users) >= noise
        label = np.where(keep_label, targets[which], filler(num_users))
        u = users[active]
        seq[u, end[active]] = label[active]
        seq[u, trigger[active]] = triggers[which][active]
        if truth is None:  # the first (backwards) episode decides the last item
            truth = (trigger.copy(), triggers[which], targets[which], keep_label)
        end = trigger - 1 - rng.integers(0, max_gap + 1, size=num_users)
        active &= end >= 1
    trigger_to_target = np.zeros(num_items + 1, dtype=np.int64)
    trigger_to_target[triggers] = targets
    position, trigger_item, target_item, planted = truth
    data = Interactions(
        user=np.repeat(users, length),
        item=seq.ravel(),
        user_ids=users.astype(np.int64),
        item_ids=np.arange(num_items + 1, dtype=np.int64),
        source=f"synthetic(seed={seed})",
    )
    return data, GroundTruth(position, trigger_item, target_item, planted, trigger_to_target)


def builtin_planted() -> tuple[Interactions, GroundTruth]:
    """The registered ``synthetic`` dataset (``make_planted``'s defaults) with its ground truth:
    the lens reports how often a model trained on it attends to the planted trigger."""
    return make_planted()
