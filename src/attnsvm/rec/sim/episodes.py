"""Cold-start episodes: a policy recommends to simulated users with empty histories.

Each user meets the policy with nothing known; for ``steps`` rounds (25, as RLT4Rec's
``evaluate_online``) the policy scores the simulator's items from what it has seen so far
(the items it showed, oldest first, and the ratings they got), the best-scored item not shown
yet is recommended (ties to the lower id, as in ranking), and the user's rating of it is
appended. The metric is the mean rating over the episode ("Mean Reward@25"), with the
per-step curve (exploration early, exploitation later) and the per-group means.

Users rate from a dense table drawn once per user (``GroupSimulator.users``), so every policy
meets the same users with the same ratings and two policies compare per user, paired. A
policy is anything with ``name`` and ``scores(rows, items, ratings) → (len(rows), N + 1)``:
``rows`` index the users (the group oracle reads their groups), ``items``/``ratings`` are the
histories so far (``(len(rows), step)``; ids 1..N); column 0 (padding) is never chosen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from attnsvm._atomic import atomic_files, atomic_path
from attnsvm.errors import InvalidRequest
from attnsvm.rec.sim.simulator import SimulatedUsers


class Policy(Protocol):
    name: str

    def scores(
        self, rows: np.ndarray, items: np.ndarray, ratings: np.ndarray
    ) -> np.ndarray | torch.Tensor: ...


@dataclass(frozen=True, eq=False)
class EpisodeResult:
    name: str
    items: np.ndarray  # (U, T) recommended simulator item ids, in order
    ratings: np.ndarray  # (U, T) the ratings they got
    groups: np.ndarray  # (U,) each user's group

    @property
    def mean(self) -> float:
        return float(self.ratings.mean())

    @property
    def per_user(self) -> np.ndarray:
        return self.ratings.mean(axis=1)

    @property
    def per_step(self) -> np.ndarray:
        return self.ratings.mean(axis=0)

    @property
    def standard_error(self) -> float:
        """Of the mean, over users (a user's ratings share one group: users are the unit)."""
        return float(self.per_user.std(ddof=1) / np.sqrt(len(self.groups)))

    def per_group(self) -> list[float]:
        return [float(self.per_user[self.groups == g].mean()) for g in np.unique(self.groups)]

    def summary(self) -> dict:
        steps = self.ratings.shape[1]
        return {
            "policy": self.name,
            f"mean_rating@{steps}": self.mean,
            "standard_error": self.standard_error,
            "users": len(self.groups),
            "per_step": self.per_step.tolist(),
            "per_group": self.per_group(),
        }


def run_episodes(
    policy: Policy, users: SimulatedUsers, steps: int = 25, batch_size: int = 2048
) -> EpisodeResult:
    """``steps`` recommendations to every user of ``users`` from an empty history."""
    count, catalogue = users.ratings.shape
    if not 1 <= steps <= catalogue:
        raise InvalidRequest(
            f"episode steps must lie in 1..{catalogue} (the simulator's catalogue), got {steps}"
        )
    items = np.zeros((count, steps), dtype=np.int64)
    ratings = np.zeros((count, steps))
    for start in range(0, count, batch_size):
        rows = np.arange(start, min(start + batch_size, count))
        for step in range(steps):
            scores = policy.scores(rows, items[rows, :step], ratings[rows, :step])
            scores = (
                scores.detach().to("cpu", torch.float64).clone()
                if isinstance(scores, torch.Tensor)
                else torch.tensor(scores, dtype=torch.float64)  # a copy the masking may write
            )
            if scores.shape != (rows.size, catalogue + 1):
                raise ValueError(
                    f"policy {policy.name} returned scores {tuple(scores.shape)}; expected "
                    f"({rows.size}, {catalogue + 1})"
                )
            scores[:, 0] = -torch.inf
            scores.scatter_(1, torch.from_numpy(items[rows, :step]), -torch.inf)
            if torch.isnan(scores).any():
                raise ValueError(f"policy {policy.name} returned NaN scores at step {step}")
            best, chosen = scores.max(dim=1)  # the first maximum: the lower id on ties
            chosen = chosen.numpy()
            if (best == -torch.inf).any():
                raise ValueError(f"policy {policy.name} left no item to recommend at step {step}")
            items[rows, step] = chosen
            ratings[rows, step] = users.ratings[rows, chosen - 1]
    return EpisodeResult(policy.name, items, ratings, users.groups)


def save_results(results: list[EpisodeResult], folder: str | Path) -> Path:
    """``episodes.json`` (every policy's summary), ``episodes.npz`` (the per-user ratings, for
    paired tests) and ``episodes.png`` (the per-step curves) in ``folder``, all three or none."""
    folder = Path(folder)
    with atomic_files(folder) as temporary:
        arrays = {f"ratings:{r.name}": r.ratings for r in results}
        np.savez(temporary("episodes.npz"), groups=results[0].groups, **arrays)
        plot_curves(results, temporary("episodes.png"))
        summaries = json.dumps([r.summary() for r in results], indent=2)
        temporary("episodes.json").write_text(summaries + "\n")
    return folder


def plot_curves(results: list[EpisodeResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.2))
    for result in results:
        steps = np.arange(1, result.ratings.shape[1] + 1)
        label = f"{result.name} (mean {result.mean:.3f})"
        axes.plot(steps, result.per_step, marker="o", markersize=3, label=label)
    axes.set_xlabel("recommendation (step of the episode)")
    axes.set_ylabel("mean simulated rating")
    axes.set_title("Cold-start episodes on the group-Gaussian simulator")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    with atomic_path(path) as temporary:
        figure.savefig(temporary, dpi=120)
    plt.close(figure)
