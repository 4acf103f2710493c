"""Policies for the cold-start episodes: random, popularity, the group oracle, and any model.

- ``RandomPolicy``: a uniformly random item not shown yet (seeded).
- ``PopularityPolicy``: the items most rated in the data the simulator was fitted on.
- ``GroupOraclePolicy``: knows each user's group and shows the items of highest expected
  rating for it (``GroupSimulator.expected_ratings``): the best any policy can do without
  reading the user's own ratings, the bar the RLT4Rec acceptance measures against.
- ``ModelPolicy``: any registered recommender, scored through the evaluator's own scoring path
  (``LoadedRun.scores`` / ``scoring.score_function``), so a model's extra inputs (ratings,
  timestamps, users) reach it as in evaluation. Its catalogue is mapped onto the simulator's
  by external item id (items it never saw cannot be recommended by it). What it reads back:
  a model that reads ratings (RLT4Rec) gets every shown item with its rating (``feedback =
  "all"``); any other model gets the items rated ``≥ like_threshold`` (``"liked"``), the
  implicit feedback it was trained on, and, while that history is empty, the popularity
  ranking (``fallback``): a next-item model has no recommendation for nobody. Events are one
  day apart for a model that reads times; a user is the "unknown user" (-1).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from attnsvm.errors import InvalidRequest
from attnsvm.rec.data.sequences import EvalTask, Sequences
from attnsvm.rec.models import SequentialRecommender
from attnsvm.rec.sim.simulator import GroupSimulator, SimulatedUsers
from attnsvm.rec.train.scoring import score_function

FEEDBACK = ("all", "liked")
DAY = 86400.0  # seconds between two events of an episode, for a model that reads times

TaskScorer = Callable[[EvalTask], Callable[[np.ndarray], torch.Tensor]]


def _padded(values: np.ndarray) -> np.ndarray:
    """(R, N) item scores → (R, N + 1) with the padding column first."""
    return np.concatenate([np.zeros((len(values), 1)), values], axis=1)


class RandomPolicy:
    def __init__(self, num_items: int, seed: int = 0) -> None:
        self.name = "random"
        self.num_items = num_items
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 11]))

    def scores(self, rows: np.ndarray, items: np.ndarray, ratings: np.ndarray) -> np.ndarray:
        return self.rng.random((rows.size, self.num_items + 1))


class PopularityPolicy:
    def __init__(self, simulator: GroupSimulator) -> None:
        self.name = "popularity"
        self.counts = _padded(simulator.popularity()[None].astype(np.float64))[0]

    def scores(self, rows: np.ndarray, items: np.ndarray, ratings: np.ndarray) -> np.ndarray:
        return np.broadcast_to(self.counts, (rows.size, self.counts.size))


class GroupOraclePolicy:
    def __init__(self, simulator: GroupSimulator, users: SimulatedUsers) -> None:
        self.name = "group oracle"
        self.table = _padded(simulator.expected_ratings())  # (K, N + 1)
        self.groups = users.groups

    def scores(self, rows: np.ndarray, items: np.ndarray, ratings: np.ndarray) -> np.ndarray:
        return self.table[self.groups[rows]]


class ModelPolicy:
    """A recommender as a policy (module docstring); ``columns[i]`` is the model's internal id
    of simulator item i + 1 (0: the model does not know it)."""

    def __init__(
        self,
        name: str,
        score_for: TaskScorer,
        columns: np.ndarray,
        *,
        feedback: str,
        like_threshold: float = 4.0,
        fallback: np.ndarray | None = None,
    ) -> None:
        if feedback not in FEEDBACK:
            raise InvalidRequest(f"feedback must be one of {FEEDBACK}, got {feedback!r}")
        self.name = name
        self.score_for = score_for
        self.columns = torch.from_numpy(np.asarray(columns, dtype=np.int64))
        self.feedback = feedback
        self.like_threshold = like_threshold
        self.fallback = None if fallback is None else _padded(fallback[None])[0]

    def scores(self, rows: np.ndarray, items: np.ndarray, ratings: np.ndarray) -> torch.Tensor:
        steps = np.broadcast_to(np.arange(items.shape[1]), items.shape)
        mapped = self.columns.numpy()[items - 1]
        keep = mapped > 0
        if self.feedback == "liked":
            keep &= ratings >= self.like_threshold
        lengths = keep.sum(axis=1)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        unknown = np.full(rows.size, -1, dtype=np.int64)  # no row of any user table
        history = Sequences(offsets, mapped[keep], unknown, steps[keep] * DAY, ratings[keep])
        nothing = Sequences(np.zeros(rows.size + 1, dtype=np.int64), np.zeros(0, np.int64), unknown)
        with torch.inference_mode():
            scores = self.score_for(EvalTask(unknown, history, nothing, nothing))(
                np.arange(rows.size)
            )
            scores = scores.float().cpu()
        out = torch.full((rows.size, self.columns.numel() + 1), -torch.inf)
        known = self.columns > 0
        out[:, 1:][:, known] = scores[:, self.columns[known]]
        if self.fallback is not None and (lengths == 0).any():
            out[torch.from_numpy(lengths == 0)] = torch.from_numpy(self.fallback).float()
        return out


def model_policy(
    model: SequentialRecommender,
    simulator: GroupSimulator,
    *,
    name: str | None = None,
    item_ids: np.ndarray | None = None,
    device: torch.device | None = None,
    feedback: str | None = None,
    like_threshold: float = 4.0,
) -> ModelPolicy:
    """``model`` in eval mode as a policy; ``item_ids`` are the external ids of its catalogue
    (index = internal id; None: the simulator's own catalogue, as RLT4Rec trained on it)."""
    model.eval()
    device = device or torch.device("cpu")
    return _policy(
        name or type(model).__name__,
        lambda task: score_function(model, task, device),
        "ratings" in model.extra_inputs,
        simulator,
        item_ids,
        feedback,
        like_threshold,
    )


def run_policy(
    run_dir: str | Path,
    simulator: GroupSimulator,
    *,
    feedback: str | None = None,
    like_threshold: float = 4.0,
) -> ModelPolicy:
    """A finished run directory (any registered model or baseline) as a policy."""
    from attnsvm.rec.train.runs import load_run

    run = load_run(run_dir)
    reads_ratings = not run.baseline and "ratings" in run.model.extra_inputs
    return _policy(
        Path(run_dir).name,
        run.scores,
        reads_ratings,
        simulator,
        run.item_ids,
        feedback,
        like_threshold,
    )


def _policy(name, score_for, reads_ratings, simulator, item_ids, feedback, like_threshold):
    if item_ids is None:
        columns = np.arange(1, simulator.num_items + 1)
    else:
        index = {str(item): i for i, item in enumerate(np.asarray(item_ids).tolist()) if i > 0}
        columns = np.array([index.get(str(item), 0) for item in simulator.item_ids.tolist()])
        if (columns > 0).sum() < 1:
            raise InvalidRequest(
                f"{name}: its catalogue shares no item with the simulator's (another dataset?)"
            )
    feedback = feedback or ("all" if reads_ratings else "liked")
    fallback = None if reads_ratings else simulator.popularity().astype(np.float64)
    return ModelPolicy(
        name,
        score_for,
        columns,
        feedback=feedback,
        like_threshold=like_threshold,
        fallback=fallback,
    )
