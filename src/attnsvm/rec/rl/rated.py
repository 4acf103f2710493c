"""Reward-aware metrics: how a ranking does on the evaluation targets the user rated well.

Leave-one-out holds out each user's last (test) and second-to-last (validation) event; the
split keeps their items, and ``target_ratings`` reads their ratings back from the dataset. A
full-ranking ``EvalResult`` has per-user metric arrays, so ``rated_metrics`` averages them over
the users whose target was rated ``≥ threshold`` (4 on a 1–5 scale: "liked"), giving, e.g., the
HR@10 of liked test targets beside the overall metrics (the CRR acceptance).
"""

from __future__ import annotations

import numpy as np

from attnsvm.errors import InvalidRequest
from attnsvm.rec.config import ConfigError, DataConfig
from attnsvm.rec.data.sequences import EvalTask
from attnsvm.rec.eval.ranking import EvalResult

STAGES = {"test": 1, "valid": 2}  # which event from the end each stage holds out


def target_ratings(data: DataConfig, task: EvalTask, stage: str) -> np.ndarray:
    """The rating of each row's held-out target (leave-one-out only)."""
    from attnsvm.rec.data.datasets import load_dataset

    if data.split != "leave-one-out":
        raise ConfigError(f"rated targets need the leave-one-out split, not {data.split!r}")
    if stage not in STAGES:
        raise ConfigError(f"stage must be one of {tuple(STAGES)}, got {stage!r}")
    interactions = load_dataset(data.dataset, root=data.root, layout=data.layout())
    if interactions.rating is None:
        raise ConfigError(
            f"dataset {data.dataset!r} has no ratings: rated targets need them (use ml-100k "
            "or ml-latest-small)"
        )
    sequences = interactions.to_sequences()
    row_of_user = np.full(int(sequences.users.max()) + 1, -1)
    row_of_user[sequences.users] = np.arange(len(sequences))
    rows = row_of_user[task.users]
    events = sequences.offsets[rows + 1] - STAGES[stage]
    if not np.array_equal(sequences.items[events], task.targets.items):
        raise ConfigError(f"{data.dataset}: the data no longer matches its split's targets")
    return sequences.ratings[events]


def rated_metrics(
    result: EvalResult, ratings: np.ndarray, threshold: float = 4.0
) -> dict[str, float]:
    """Each per-user metric of ``result`` averaged over the users whose target rating is
    ``≥ threshold``, and how many they are (``users``)."""
    liked = ratings >= threshold
    if liked.shape != result.users.shape:
        raise ValueError(f"{ratings.size} target ratings for {result.users.size} users")
    if not liked.any():
        raise InvalidRequest(
            f"no user rated their held-out target ≥ {threshold} (the ratings lie in "
            f"{ratings.min():g}..{ratings.max():g}): there is nothing to average"
        )
    metrics = {name: float(values[liked].mean()) for name, values in result.per_user.items()}
    return {**metrics, "users": int(liked.sum())}
