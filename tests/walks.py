"""The tiny learnable data most run tests train on: ``user i1 i2 …`` lines, a random start,
then +3 (mod ``NUM_ITEMS``) per step."""

from __future__ import annotations

from pathlib import Path

import numpy as np

NUM_ITEMS = 30


def write_walks(path: Path, num_users: int = 120, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    lines = []
    for user in range(num_users):
        length, start = rng.integers(5, 12), rng.integers(NUM_ITEMS)
        items = [(start + 3 * step) % NUM_ITEMS + 1 for step in range(length)]
        lines.append(" ".join(map(str, [user + 100, *items])))
    path.write_text("\n".join(lines) + "\n")
    return path
