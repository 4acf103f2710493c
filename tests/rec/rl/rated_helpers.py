"""Tiny rated data with planted taste groups, shared by the simulator, RLT4Rec and CRR tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnsvm.rec.data.interactions import Interactions

GROUPS, USERS_PER_GROUP, ITEMS, RATED = 3, 20, 30, 12


def planted_columns(seed: int = 0) -> tuple[np.ndarray, ...]:
    """Group g rates the items of block g (items 10g + 1 … 10g + 10) 4–5 and the others 1–3;
    each user rates ``RATED`` random items, one second apart."""
    rng = np.random.default_rng(seed)
    users, items, ratings, times = [], [], [], []
    for user in range(GROUPS * USERS_PER_GROUP):
        group = user % GROUPS
        chosen = rng.choice(ITEMS, size=RATED, replace=False) + 1
        liked = (chosen - 1) // 10 == group
        scores = np.where(liked, rng.integers(4, 6, RATED), rng.integers(1, 4, RATED))
        users += [user + 1] * RATED
        items += chosen.tolist()
        ratings += scores.tolist()
        times += list(range(user * 100, user * 100 + RATED))
    return np.array(users), np.array(items), np.array(ratings, float), np.array(times, float)


def planted_interactions(seed: int = 0) -> Interactions:
    users, items, ratings, times = planted_columns(seed)
    return Interactions.from_columns(users, items, times, ratings, source="planted")


def write_planted_csv(path: Path, seed: int = 0) -> Path:
    """The planted data as a MovieLens ``ratings.csv``, for runs that read a file."""
    users, items, ratings, times = planted_columns(seed)
    lines = ["userId,movieId,rating,timestamp"]
    lines += [
        f"{u},{i},{r:.1f},{int(t)}" for u, i, r, t in zip(users, items, ratings, times, strict=True)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path
