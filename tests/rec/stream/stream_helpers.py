"""A small timed click log for the stream tests: sessions whose items follow a planted cycle,
so that a model that learns does better than one that does not."""

from pathlib import Path

import numpy as np


def write_clicks(path: Path, sessions: int = 40, length: int = 8, items: int = 15) -> Path:
    """A session-rec TSV (``SessionId ItemId Time``), sessions interleaved in time."""
    rng = np.random.default_rng(0)
    lines = ["SessionId\tItemId\tTime"]
    for session in range(1, sessions + 1):
        start = int(rng.integers(0, items))
        begin = session * 7.0
        for step in range(length):
            item = 100 + (start + step) % items
            lines.append(f"{session}\t{item}\t{begin + step * 11.0}")
    path.write_text("\n".join(lines) + "\n")
    return path
