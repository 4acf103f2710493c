"""Transforms of the training rows, and the synthetic-prefix artefact that one of them reads.

A run's trainer reads ``training_rows(split, config.data)``: the split's training sequences,
transformed as ``data`` says. Evaluation never sees a transform: validation and test histories,
their excluded items and every metric come from the split as it is. The rows keep their order
and users one to one, so the trainer can also show a model each row as it was before the
transforms (the ``source`` training stream).

- ``data.synthetic_prefix``: a folder holding a synthetic-prefix artefact (below); each row
  whose user it covers gets generated items prepended, at most ``data.synthetic_items`` (0: all
  it holds) and only while the row is shorter than ``data.synthetic_below`` (0: no limit). The
  items nearest the row's start are taken first: the artefact lists each user's items in the
  order they were generated, the first one the item just before the user's first real one.
  Prepended events carry the row's first timestamp and rating 0, where the data has those.
- ``data.reverse_train``: every row newest first (after any prepending).

**Synthetic-prefix artefact** (``synthetic_prefix.npz`` + ``synthetic_prefix.json``, written by
``write_synthetic_prefix``): external user ids, and per user the generated external item ids in
generation order; the JSON header says ``"synthetic": true``, the format name and version, how
the items were generated and what the generator read. Ids are external, so the artefact holds
across runs of the same data; an item id the catalogue lacks is an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attnsvm._atomic import atomic_path, write_json
from attnsvm.rec.config_base import ConfigError
from attnsvm.rec.data.sequences import Sequences
from attnsvm.rec.data.splits import Split

if TYPE_CHECKING:  # the data layer reads the run's data section, never imports the run config
    from attnsvm.rec.config import DataConfig

FORMAT = "attnsvm-synthetic-prefix"
VERSION = 1
ARRAYS, HEADER = "synthetic_prefix.npz", "synthetic_prefix.json"


@dataclass(frozen=True)
class SyntheticPrefix:
    header: dict[str, Any]
    users: np.ndarray  # (U,) external user ids, as text
    offsets: np.ndarray  # (U + 1,) into ``items``
    items: np.ndarray  # external item ids, as text, in generation order per user


def write_synthetic_prefix(
    folder: Path, users: np.ndarray, offsets: np.ndarray, items: np.ndarray, header: dict
) -> None:
    """The artefact in ``folder``, each file written atomically; ids are stored as text."""
    with atomic_path(folder / ARRAYS) as temporary:
        np.savez(
            temporary,
            users=np.asarray(users).astype(str),
            offsets=np.asarray(offsets, dtype=np.int64),
            items=np.asarray(items).astype(str),
        )
    info = {"format": FORMAT, "version": VERSION, "synthetic": True, **header}
    write_json(folder / HEADER, info)


def read_synthetic_prefix(folder: str | Path) -> SyntheticPrefix:
    """The artefact in ``folder``; a ConfigError naming what is wrong otherwise."""
    folder = Path(folder)
    try:
        header = json.loads((folder / HEADER).read_text())
        with np.load(folder / ARRAYS, allow_pickle=False) as arrays:
            users, offsets, items = arrays["users"], arrays["offsets"], arrays["items"]
    except (OSError, ValueError, KeyError) as error:
        raise ConfigError(
            f"data.synthetic_prefix {folder}: not a readable artefact ({error})"
        ) from None
    if not isinstance(header, dict):
        raise ConfigError(f"data.synthetic_prefix {folder}: {HEADER} is not a JSON object")
    if header.get("format") != FORMAT or header.get("version") != VERSION:
        raise ConfigError(
            f"data.synthetic_prefix {folder}: format {header.get('format')!r} version "
            f"{header.get('version')!r}; this version reads {FORMAT!r} version {VERSION}"
        )
    if offsets.shape != (users.size + 1,) or offsets[0] != 0 or offsets[-1] != items.size:
        raise ConfigError(f"data.synthetic_prefix {folder}: offsets do not match the items")
    return SyntheticPrefix(header, users, offsets, items)


def reverse_rows(rows: Sequences) -> Sequences:
    """Every row newest first, with its times and ratings."""
    lengths = rows.lengths
    row = np.repeat(np.arange(len(rows)), lengths)
    position = np.arange(rows.items.size) - rows.offsets[row]
    flat = rows.offsets[row] + lengths[row] - 1 - position
    return rows.gather(rows.offsets, flat, rows.users)


def prepend_synthetic(
    rows: Sequences, prefix: SyntheticPrefix, split: Split, limit: int = 0, below: int = 0
) -> Sequences:
    """``rows`` with each covered user's generated items prepended, oldest first (module
    docstring); the rows stay in order, one per user as before."""
    item_index = {str(item): i for i, item in enumerate(split.item_ids.tolist()) if i > 0}
    unknown = [item for item in prefix.items.tolist() if item not in item_index][:3]
    if unknown:
        raise ConfigError(
            f"data.synthetic_prefix: items {unknown} are not in this data's catalogue"
        )
    generated = np.array([item_index[item] for item in prefix.items.tolist()], dtype=np.int64)
    user_row = {str(split.user_ids[u]): r for r, u in enumerate(rows.users.tolist())}
    covered = np.array([user_row.get(user, -1) for user in prefix.users.tolist()], np.int64)
    take = np.zeros(len(rows), dtype=np.int64)
    first = np.zeros(len(rows), dtype=np.int64)  # where each row's generated items start
    known = covered >= 0
    counts = np.diff(prefix.offsets)[known]
    if limit:
        counts = np.minimum(counts, limit)
    if below:
        counts = np.minimum(counts, np.maximum(below - rows.lengths[covered[known]], 0))
    take[covered[known]] = counts
    first[covered[known]] = prefix.offsets[:-1][known]
    lengths = rows.lengths + take
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    row = np.repeat(np.arange(len(rows)), lengths)
    position = np.arange(offsets[-1]) - offsets[row]
    synthetic = position < take[row]
    # synthetic position p of a row holds generated item take − 1 − p (the furthest first)
    from_prefix = first[row] + take[row] - 1 - position
    from_row = rows.offsets[row] + position - take[row]
    items = np.where(synthetic, generated[np.where(synthetic, from_prefix, 0)], 0)
    items[~synthetic] = rows.items[from_row[~synthetic]]
    times = ratings = None
    starts = rows.offsets[:-1][row]
    if rows.times is not None:
        times = np.where(synthetic, rows.times[np.minimum(starts, rows.items.size - 1)], 0.0)
        times[~synthetic] = rows.times[from_row[~synthetic]]
    if rows.ratings is not None:
        ratings = np.zeros(offsets[-1])
        ratings[~synthetic] = rows.ratings[from_row[~synthetic]]
    return Sequences(offsets, items, rows.users, times, ratings)


def training_rows(split: Split, data: DataConfig) -> Sequences:
    """The rows the trainer reads: ``split.train`` transformed as ``data`` says."""
    rows = split.train
    if data.synthetic_items < 0 or data.synthetic_below < 0:
        raise ConfigError("data.synthetic_items and data.synthetic_below must be ≥ 0")
    if data.synthetic_prefix is not None:
        prefix = read_synthetic_prefix(data.synthetic_prefix)
        rows = prepend_synthetic(rows, prefix, split, data.synthetic_items, data.synthetic_below)
    if data.reverse_train:
        rows = reverse_rows(rows)
    return rows
