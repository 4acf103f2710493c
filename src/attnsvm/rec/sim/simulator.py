"""A group-Gaussian user simulator fitted from real ratings (RLT4Rec's user model, rebuilt).

The official RLT4Rec user model (``dilina-r/RLT4Rec``, ``user_model.py``) reads K user groups
("nyms") with a Gaussian per group and item: a rating is ``N(μ_gi, σ_gi)`` clipped to the
rating range and rounded. Its Netflix/Goodreads group files are not public, so this module
fits the same model from a dataset with ratings (ML-100K, ml-latest-small). The sampling rule
is the official one; the fit is our reading of it:

1. the ``items`` most-rated items form the catalogue (simulator item ids 1..N, 0 = padding);
2. users are clustered into ``groups`` by k-means (k-means++ start, ``restarts`` tries) on
   their mean-centred ratings over those items (missing = 0), projected on the top ``factors``
   singular vectors (``factors = 0``: the centred ratings themselves) and scaled to unit
   length; groups are numbered by size, largest first;
3. ``μ_gi`` and ``σ²_gi`` are the group's mean and variance of the item's ratings, each shrunk
   towards the item's own (all-user) mean and variance with ``shrinkage`` pseudo-ratings, so an
   item a group rarely rated takes the item's overall behaviour (σ floored at ``min_std``).

Ratings are drawn on the data's own scale: clipped to its lowest and highest rating and rounded
to its step (1 on ML-100K, 0.5 on ml-latest-small). ``expected_ratings`` is the exact mean of
that clipped, rounded draw, which ranks items for the group oracle. Everything random takes a
seed; the same data, settings and seed give the same simulator, bit for bit.

A fitted simulator is an artefact folder (``save``/``load``): ``simulator.json`` (settings,
the items' external ids, rating scale, group sizes) and ``simulator.npz`` (μ, σ, counts).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import ndtr

from attnsvm._atomic import atomic_files
from attnsvm._files import read_json, require_regular
from attnsvm.errors import ExpectedFailure, UnreadableFile
from attnsvm.rec.data.interactions import Interactions

SETTINGS = ("groups", "items", "shrinkage", "factors", "restarts", "min_std", "seed")


class SimulatorError(ExpectedFailure, ValueError):
    """Data the simulator cannot be fitted from, or a damaged simulator folder."""


@dataclass(frozen=True)
class FitSettings:
    groups: int = 8  # K, as the official Netflix/Goodreads files
    items: int = 400  # the most-rated items kept (ML-100K: each rated by ≥ 65 users)
    shrinkage: float = 5.0  # pseudo-ratings pulling a group's μ, σ² to the item's own
    factors: int = 16  # user factors k-means runs on; 0: the centred ratings themselves
    restarts: int = 10  # k-means tries, the lowest within-group sum of squares kept
    min_std: float = 0.1  # floor on σ: a group whose few ratings agree is not deterministic
    seed: int = 0

    def check(self) -> None:
        for name in ("groups", "items", "restarts"):
            if getattr(self, name) < 1:
                raise SimulatorError(f"simulator {name} must be ≥ 1, got {getattr(self, name)}")
        if self.factors < 0 or self.shrinkage < 0 or self.min_std <= 0 or self.seed < 0:
            raise SimulatorError(
                "simulator factors, shrinkage and seed must be ≥ 0 and min_std > 0, got "
                f"{self.factors}, {self.shrinkage}, {self.seed} and {self.min_std}"
            )


@dataclass(frozen=True)
class SimulatedUsers:
    """Users with a dense rating of every item, drawn once: every policy meets the same ones."""

    groups: np.ndarray  # (U,) group of each user
    ratings: np.ndarray  # (U, N) the rating user u gives item i + 1

    def __len__(self) -> int:
        return self.groups.size


@dataclass(frozen=True, eq=False)
class GroupSimulator:
    item_ids: np.ndarray  # (N,) external id of simulator item i + 1
    mean: np.ndarray  # (K, N) μ
    std: np.ndarray  # (K, N) σ
    counts: np.ndarray  # (K, N) ratings the group gave the item in the data
    group_sizes: np.ndarray  # (K,) real users per group
    rating_min: float
    rating_max: float
    rating_step: float
    settings: FitSettings = field(default_factory=FitSettings)
    source: dict[str, Any] = field(default_factory=dict)  # dataset, root, ratings used

    @property
    def num_groups(self) -> int:
        return self.mean.shape[0]

    @property
    def num_items(self) -> int:
        return self.mean.shape[1]

    def expected_ratings(self) -> np.ndarray:
        """(K, N) exact mean of the clipped, rounded draw: Σ_level level · P(level)."""
        levels = np.arange(
            self.rating_min, self.rating_max + self.rating_step / 2, self.rating_step
        )
        edges = (levels[:-1] + levels[1:]) / 2  # a draw below edge k rounds to level ≤ k
        below = ndtr((edges[:, None, None] - self.mean) / self.std)  # (levels - 1, K, N)
        cumulative = np.concatenate([below, np.ones((1, *self.mean.shape))])
        probability = np.diff(cumulative, axis=0, prepend=0.0)
        return np.tensordot(levels, probability, axes=1)

    def global_mean(self) -> float:
        """The expected rating of a uniformly random (group, item): random's expected score on
        users spread evenly over the groups."""
        return float(self.expected_ratings().mean())

    def draw(self, groups: np.ndarray, items: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Ratings of simulator items ``items`` (ids 1..N, any shape ``(U, …)``) by users of
        ``groups`` (U,): ``N(μ, σ)`` clipped and rounded to the rating scale."""
        g = np.broadcast_to(groups.reshape(-1, *([1] * (items.ndim - 1))), items.shape)
        raw = rng.normal(self.mean[g, items - 1], self.std[g, items - 1])
        steps = np.round(
            (np.clip(raw, self.rating_min, self.rating_max) - self.rating_min) / self.rating_step
        )
        return self.rating_min + steps * self.rating_step

    def users(self, per_group: int, seed: int, stream: int = 0) -> SimulatedUsers:
        """``per_group`` users of every group, each rating every item once, drawn from
        ``(seed, stream)``: test users (stream 0) and validation users (1) never coincide."""
        if per_group < 1:
            raise SimulatorError(f"simulated users per group must be ≥ 1, got {per_group}")
        size = per_group * self.num_groups * self.num_items * 8  # float64 ratings
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if size > memory // 2:
            raise SimulatorError(
                f"{per_group:,} simulated users per group rate the {self.num_items:,} items in "
                f"{size / 2**30:,.1f} GiB, over half of this machine's {memory / 2**30:,.1f} "
                "GiB: ask for fewer users"
            )
        rng = np.random.default_rng(np.random.SeedSequence([seed, 7, stream]))
        groups = np.repeat(np.arange(self.num_groups), per_group)
        items = np.broadcast_to(np.arange(1, self.num_items + 1), (groups.size, self.num_items))
        return SimulatedUsers(groups, self.draw(groups, items, rng))

    def popularity(self) -> np.ndarray:
        """(N,) how often the data's users rated each item."""
        return self.counts.sum(axis=0)

    # -- the artefact --------------------------------------------------------------------

    def save(self, folder: str | Path) -> Path:
        """Write the artefact into ``folder``: both files, or neither."""
        folder = Path(folder)
        info = {
            "settings": {name: getattr(self.settings, name) for name in SETTINGS},
            "source": self.source,
            "item_ids": self.item_ids.tolist(),
            "group_sizes": self.group_sizes.tolist(),
            "rating_scale": [self.rating_min, self.rating_max, self.rating_step],
        }
        with atomic_files(folder) as temporary:
            np.savez(temporary("simulator.npz"), mean=self.mean, std=self.std, counts=self.counts)
            temporary("simulator.json").write_text(json.dumps(info, indent=2) + "\n")
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> GroupSimulator:
        folder = Path(folder)
        path = folder / "simulator.json"
        try:
            info = read_json(path)
            with np.load(require_regular(folder / "simulator.npz")) as arrays:
                mean, std, counts = (arrays[name] for name in ("mean", "std", "counts"))
        except UnreadableFile as error:
            raise SimulatorError(
                f"{error} (not a simulator folder: fit one with attnsvm rl simulator)"
            ) from None
        except (KeyError, ValueError, OSError) as error:
            raise SimulatorError(f"{folder / 'simulator.npz'}: damaged ({error})") from None
        try:
            settings = FitSettings(**{k: info["settings"][k] for k in SETTINGS})
            low, high, step = (float(v) for v in info["rating_scale"])
            simulator = cls(
                np.array(info["item_ids"]),
                mean,
                std,
                counts,
                np.array(info["group_sizes"], dtype=np.int64),
                low,
                high,
                step,
                settings,
                dict(info["source"]),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise SimulatorError(f"{path}: damaged ({error!r})") from None
        shapes = {
            mean.shape,
            std.shape,
            counts.shape,
            (simulator.group_sizes.size, simulator.item_ids.size),
        }
        if len(shapes) != 1 or not np.all(std > 0) or step <= 0 or high < low:
            raise SimulatorError(f"{folder}: damaged (the arrays or the rating scale disagree)")
        return simulator


# -- the fit --------------------------------------------------------------------------------


def rating_scale(ratings: np.ndarray) -> tuple[float, float, float]:
    """Lowest and highest rating and the step between levels (the smallest gap)."""
    levels = np.unique(ratings)
    gaps = np.diff(levels)
    return float(levels[0]), float(levels[-1]), float(gaps.min()) if gaps.size else 1.0


def fit_simulator(
    data: Interactions, settings: FitSettings | None = None, source: dict | None = None
) -> GroupSimulator:
    """The group-Gaussian simulator of ``data``'s ratings (module docstring: steps 1–3)."""
    settings = settings or FitSettings()
    settings.check()
    if data.rating is None:
        raise SimulatorError(
            f"{data.source}: no ratings; the simulator needs rated interactions "
            "(ml-100k or ml-latest-small)"
        )
    counts = np.bincount(data.item, minlength=data.num_items + 1)[1:]
    if settings.items > counts.size:
        raise SimulatorError(
            f"simulator items {settings.items} > the {counts.size} items of {data.source}"
        )
    kept = np.argsort(-counts, kind="stable")[: settings.items] + 1  # internal ids, most rated
    column = np.full(data.num_items + 1, -1)
    column[kept] = np.arange(kept.size)
    rows = column[data.item] >= 0
    users, cols, values = data.user[rows], column[data.item[rows]], data.rating[rows]
    # a repeated (user, item) pair counts as its mean rating
    sums = np.zeros((data.num_users, kept.size))
    seen = np.zeros_like(sums)
    np.add.at(sums, (users, cols), values)
    np.add.at(seen, (users, cols), 1.0)
    rated = seen > 0
    matrix = np.divide(sums, seen, out=np.zeros_like(sums), where=rated)
    active = np.flatnonzero(rated.any(axis=1))
    if active.size < settings.groups:
        raise SimulatorError(
            f"{data.source}: {active.size} users rated the kept items, fewer "
            f"than the {settings.groups} groups"
        )
    matrix, rated = matrix[active], rated[active]
    n_item = rated.sum(axis=0)
    item_mean = (matrix * rated).sum(axis=0) / n_item
    lam = settings.shrinkage
    global_var = float(values.var())
    item_var = (((matrix - item_mean) ** 2 * rated).sum(axis=0) + lam * global_var) / (n_item + lam)
    centred = (matrix - item_mean) * rated
    labels = kmeans(
        _features(centred, settings.factors),
        settings.groups,
        settings.restarts,
        np.random.default_rng(np.random.SeedSequence([settings.seed, 1])),
    )
    sizes = np.bincount(labels, minlength=settings.groups)
    order = np.argsort(-sizes, kind="stable")  # group 0 is the largest
    labels = np.argsort(order)[labels]
    onehot = np.eye(settings.groups)[labels]  # (U, K)
    n = onehot.T @ rated  # (K, N)
    total = onehot.T @ (matrix * rated)
    mean = (total + lam * item_mean) / (n + lam)
    square = onehot.T @ (matrix**2 * rated)
    spread = square - 2 * mean * total + n * mean**2  # Σ (r − μ_g)² over the group's ratings
    std = np.sqrt(np.maximum((spread + lam * item_var) / (n + lam), settings.min_std**2))
    low, high, step = rating_scale(data.rating)
    info = {"ratings": int(rated.sum()), "users": int(active.size), **(source or {})}
    return GroupSimulator(
        data.item_ids[kept],
        mean,
        std,
        n.astype(np.int64),
        sizes[order],
        low,
        high,
        step,
        settings,
        info,
    )


def _features(centred: np.ndarray, factors: int) -> np.ndarray:
    """Each user's taste as a unit vector: without the normalisation the users who rated most
    dominate the distances and k-means leaves groups of one or two users on ML-100K."""
    features = centred
    if 0 < factors < min(centred.shape):
        left, singular, _ = np.linalg.svd(centred, full_matrices=False)
        features = left[:, :factors] * singular[:factors]
    norms = np.linalg.norm(features, axis=1, keepdims=True)
    return features / np.where(norms > 0, norms, 1.0)


def kmeans(
    points: np.ndarray, k: int, restarts: int, rng: np.random.Generator, iterations: int = 100
) -> np.ndarray:
    """Lloyd's k-means from k-means++ starts; the labels of the try with the lowest
    within-cluster sum of squares. An emptied cluster restarts at the worst-fitted point."""
    best, best_cost = np.zeros(len(points), dtype=np.int64), np.inf
    norms = (points**2).sum(axis=1)
    for _ in range(restarts):
        centres = _plus_plus(points, norms, k, rng)
        labels = np.full(len(points), -1)
        for _ in range(iterations):
            distance = norms[:, None] - 2 * points @ centres.T + (centres**2).sum(axis=1)
            new = distance.argmin(axis=1)
            if np.array_equal(new, labels):
                break
            labels = new
            for c in range(k):
                members = labels == c
                if members.any():
                    centres[c] = points[members].mean(axis=0)
                else:
                    worst = int(distance[np.arange(len(points)), labels].argmax())
                    centres[c], labels[worst] = points[worst], c
        cost = float(((points - centres[labels]) ** 2).sum())
        if cost < best_cost:
            best, best_cost = labels.copy(), cost
    return best


def _plus_plus(points: np.ndarray, norms: np.ndarray, k: int, rng: np.random.Generator):
    centres = [points[rng.integers(len(points))]]
    closest = np.full(len(points), np.inf)
    for _ in range(1, k):
        closest = np.minimum(closest, norms - 2 * points @ centres[-1] + centres[-1] @ centres[-1])
        weights = np.maximum(closest, 0)
        total = weights.sum()
        pick = (
            rng.choice(len(points), p=weights / total) if total > 0 else rng.integers(len(points))
        )
        centres.append(points[pick])
    return np.array(centres, dtype=np.float64)
