"""What the ADT / BiCAT / MrTransformer benchmarks share: their data, reading finished runs,
and the tables they print.

Data names beyond the registered datasets (``attnsvm data list``):

- ``beauty-bert4rec``: the BERT4Rec version of Amazon Beauty (40,226 users, 54,542 items), the
  file ``amazon-beauty-bert4rec/beauty.txt`` under the data root, read as it is;
- ``ml-100k-items5``: MovieLens-100K without the items rated fewer than 5 times: 943 users,
  1,349 items, 99,287 ratings, the counts of MrTransformer's own ML-100K file. It is written,
  one line per user in time order, into the benchmark's work folder (never the repository).

``--users N`` keeps the first N users of any of them (written to the work folder the same way):
the tiny runs that check a benchmark end to end before the real one.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from attnsvm.rec.data.datasets import load_dataset

ROOT = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _write_users(sequences, user_ids, item_ids, rows, path: Path) -> str:
    lines = [
        " ".join(map(str, [user_ids[sequences.users[r]], *item_ids[sequences.row(r)]]))
        for r in rows
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def dataset(name: str, root: Path, work: Path, users: int | None = None) -> tuple[str, str | None]:
    """``(data.dataset, data.root)`` of a benchmark data name (module docstring)."""
    if name == "beauty-bert4rec":
        source, data_root = str(root / "amazon-beauty-bert4rec" / "beauty.txt"), None
    elif name == "ml-100k-items5":
        source, data_root = _ml100k_items5(root, work), None
    else:
        source, data_root = name, str(root)
    if users is None:
        return source, data_root
    interactions = load_dataset(source, root=data_root)
    sequences = interactions.to_sequences()
    path = work / "data" / f"{name}-first{users}.txt"
    rows = range(min(users, len(sequences)))
    item_ids, user_ids = interactions.item_ids, interactions.user_ids
    return _write_users(sequences, user_ids, item_ids, rows, path), None


def _ml100k_items5(root: Path, work: Path) -> str:
    path = work / "data" / "ml-100k-items5.txt"
    if path.exists():
        return str(path)
    interactions = load_dataset("ml-100k", root=root)
    sequences = interactions.to_sequences()
    counts = np.bincount(sequences.items)
    kept = counts[sequences.items] >= 5
    row = np.repeat(np.arange(len(sequences)), sequences.lengths)
    lengths = np.bincount(row[kept], minlength=len(sequences))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    filtered = type(sequences)(offsets, sequences.items[kept], sequences.users)
    return _write_users(
        filtered, interactions.user_ids, interactions.item_ids, range(len(filtered)), path
    )


def read_run(run: Path) -> dict:
    """A finished run's metrics plus its mean training seconds per epoch and per step."""
    metrics = json.loads((run / "metrics.json").read_text())
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    steps = log[-1]["step"] / len(log)
    metrics["seconds_per_epoch"] = float(np.mean([r["train_seconds"] for r in log]))
    metrics["seconds_per_step"] = metrics["seconds_per_epoch"] / max(steps, 1)
    return metrics


def mean_std(values: list[float]) -> str:
    values = np.asarray(values, dtype=float)
    if values.size == 1:
        return f"{values[0]:.4f}"
    return f"{values.mean():.4f} ± {values.std(ddof=1):.4f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join([*lines, *("| " + " | ".join(map(str, r)) + " |" for r in rows)])
