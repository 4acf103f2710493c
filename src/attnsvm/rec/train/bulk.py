"""Top-k recommendations for every user of a finished run, ranked in batches and written at once.

``recommend_all(run_dir, out, k)`` ranks the whole catalogue for each user after a history and
writes one Parquet table (``user``, ``rank``, ``item``, ``score``; external ids) atomically:

- ``histories="full"`` (the default, what a nightly job wants): after the user's whole history in
  the run's data, its items excluded. Row for row the same list as ``recommend(run_dir,
  user=u, k=k)``.
- ``histories="test"`` or ``"valid"``: the evaluator's own task of that split (the history before
  the held-out item, the split's seen-item exclusion); the lists are the evaluator's top-k.

Both rank as the evaluator does (``LoadedRun.scores``, ``ranking.ranked_batches``): one batch
of users is scored at a time, longest histories first, so memory is a batch × the catalogue,
never users × items, and equal scores keep the lower item id first.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnsvm._atomic import atomic_files, check_output
from attnsvm.errors import InvalidRequest, shown
from attnsvm.rec.data.interactions import Interactions
from attnsvm.rec.data.sequences import EvalTask, Sequences
from attnsvm.rec.eval import ranking
from attnsvm.rec.train.checkpoint import RunDirError
from attnsvm.rec.train.runs import LoadedRun, load_run, only_allowed, open_run
from attnsvm.rec.train.scoring import load_interactions

HISTORIES = ("full", "test", "valid")


@dataclass(frozen=True)
class BulkResult:
    """What ``recommend_all`` wrote: the table's path, its size and how long the ranking took."""

    path: Path
    users: int
    k: int
    rank_seconds: float  # scoring and top-k of every user (the run and data loaded before)
    write_seconds: float


def full_history_task(run: LoadedRun, data: Interactions) -> EvalTask:
    """Every user of the run's ``data`` after their whole history (train, validation and test
    events), that history excluded from their ranking and no target."""
    if not np.array_equal(data.item_ids.astype(str), run.item_ids.astype(str)):
        raise RunDirError(
            f"{run.run_dir}: the data's item catalogue is no longer the run's "
            f"({data.num_items} items now, {len(run.item_ids) - 1} in the run)"
        )
    history = data.to_sequences()
    # the model's user table is indexed by the run's users (SSE-PT); others read -1 ("unknown")
    run_user = {str(u): i for i, u in enumerate(run.user_ids.tolist())}
    users = np.array([run_user.get(str(u), -1) for u in data.user_ids.tolist()], dtype=np.int64)
    history = Sequences(history.offsets, history.items, users, history.times, history.ratings)
    seen = _unique_per_row(history)
    nothing = Sequences(np.zeros(len(users) + 1, dtype=np.int64), np.zeros(0, np.int64), users)
    return EvalTask(users, history, nothing, seen)


def _unique_per_row(sequences: Sequences) -> Sequences:
    rows = np.repeat(np.arange(len(sequences)), sequences.lengths)
    pairs = np.unique(np.stack([rows, sequences.items]), axis=1)
    counts = np.bincount(pairs[0], minlength=len(sequences))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return Sequences(offsets, pairs[1], sequences.users)


def _task(run_dir: str | Path, histories: str) -> tuple[LoadedRun, EvalTask, np.ndarray]:
    """The run, the task to rank and the external id of each task row's user."""
    if histories not in HISTORIES:
        raise InvalidRequest(
            f"histories must be one of {', '.join(HISTORIES)}, got {shown(histories)}"
        )
    if histories == "full":
        run = load_run(run_dir)
        data = load_interactions(run.config.data)
        return run, full_history_task(run, data), data.user_ids
    opened = open_run(run_dir, histories)
    task = opened.task
    return opened.run, task, opened.run.user_ids[task.users]


def recommend_all(
    run_dir: str | Path,
    out: str | Path,
    k: int = 100,
    *,
    histories: str = "full",
    exclude: list | None = None,
    restrict: list | None = None,
    batch_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> BulkResult:
    """Top-``k`` items for every user (see the module docstring), written to ``out`` (Parquet)
    atomically: a reader sees the old file or the whole new one. ``exclude`` (never these
    items) and ``restrict`` (only these) filter every list (``LoadedRun.allowed_items``).
    ``progress(done, total)`` is called after every batch of users."""
    import polars as pl

    if Path(out).suffix != ".parquet":
        raise InvalidRequest(f"out must be a .parquet file, got {shown(str(out))}")
    out = check_output(out, folder=False)  # before the ranking: a path that can never be written
    if k < 1:
        raise InvalidRequest(f"k={k} must be ≥ 1")
    run, task, user_ids = _task(run_dir, histories)
    score = only_allowed(run.scores(task), run.allowed_items(exclude, restrict))
    num_items = len(run.item_ids) - 1
    if k > num_items:
        raise InvalidRequest(f"k={k} exceeds the catalogue ({num_items} items)")
    batch_size = batch_size or run.config.eval.batch_size
    start = time.perf_counter()
    ids = np.zeros((len(task), k), dtype=np.int64)
    values = np.zeros((len(task), k), dtype=np.float32)
    done = 0
    if batch_size < 1:
        raise InvalidRequest(f"batch_size={batch_size} must be ≥ 1")
    for rows, batch_ids, batch_values in ranking.ranked_batches(
        score, task, num_items, k, batch_size=batch_size
    ):
        ids[rows] = batch_ids.cpu().numpy()
        values[rows] = batch_values.float().cpu().numpy()
        done += len(rows)
        if progress is not None:
            progress(done, len(task))
    rank_seconds = time.perf_counter() - start
    start = time.perf_counter()
    keep = ids.ravel() > 0  # a user with fewer than k rankable items gets a shorter list
    table = pl.DataFrame(
        {
            "user": np.repeat(user_ids, k)[keep],
            "rank": np.tile(np.arange(1, k + 1, dtype=np.int32), len(task))[keep],
            "item": run.item_ids[ids.ravel()[keep]],
            "score": values.ravel()[keep],
        }
    )
    # written from memory by Python: polars writing a file itself reports a full disk as its own
    # error; the folders made for ``out`` go again if it cannot be written
    buffer = io.BytesIO()
    table.write_parquet(buffer)
    with atomic_files(out.parent) as temporary:
        temporary(out.name).write_bytes(buffer.getvalue())
    return BulkResult(out, len(task), k, rank_seconds, time.perf_counter() - start)
