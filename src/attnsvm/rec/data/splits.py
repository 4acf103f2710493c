"""Train / validation / test splits. Each returns a ``Split`` whose evaluation stages already
carry the items to exclude from ranking, so the evaluation layer never recomputes them.

Policies (the ones papers leave implicit):

* ``leave_one_out``: per user, the last event is the test target, the second-to-last the
  validation target, the rest is train. Users with fewer than 3 events are **train only**
  (all their events stay in ``train``; they appear in neither ``valid`` nor ``test``).
* ``temporal_split``: one global cut per stage at a quantile of all timestamps. Train holds the
  events strictly before the validation cut; a user's validation targets are their distinct
  items in ``[valid cut, test cut)`` and their test targets those at or after the test cut.
  ``unseen_policy="drop"`` (default) drops target items that never occur before the stage
  (cold items cannot be ranked from history) and users with no history before the stage;
  ``"keep"`` keeps both.
* ``session_split``: sessions ordered by start time (by id without timestamps); the last
  ``test_fraction`` are test, the ``valid_fraction`` before them validation. Every prefix of an
  evaluation session predicts its next item. ``unseen_policy="drop"`` removes clicks on items
  absent from the training sessions first and then evaluates sessions of length >= 2 (SR-GNN).
* ``predefined_split``: a dataset's own test sessions (SR-GNN's Diginetica) evaluated like a
  session split's, every prefix of each; validation is the last ``valid_fraction`` of the
  training sessions. What it leaves out of the test sessions is counted in ``protocol``.

``exclude`` is the set of distinct items in ``history`` minus the row's own targets: an item
the user consumes again stays rankable. Session splits exclude nothing (repeats are common).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.interactions import Interactions
from attnsvm.rec.data.sequences import EvalTask, Sequences

UNSEEN_POLICIES = ("drop", "keep")


@dataclass(frozen=True)
class Split:
    train: Sequences  # the training sequences, one row per user (or training session)
    valid: EvalTask
    test: EvalTask
    num_items: int  # catalogue is internal ids 1..num_items
    num_users: int
    item_ids: np.ndarray  # external id of each internal item (index 0 = padding placeholder)
    user_ids: np.ndarray  # external id of each internal user
    protocol: str


# -- vectorised CSR helpers ------------------------------------------------------------------


def _positions(seqs: Sequences) -> tuple[np.ndarray, np.ndarray]:
    """Row index and position within the row of every flat item."""
    lengths = seqs.lengths
    row = np.repeat(np.arange(len(seqs)), lengths)
    return row, np.arange(seqs.items.size) - seqs.offsets[row]


def _from_flat(row: np.ndarray, items: np.ndarray, rows: int, users: np.ndarray) -> Sequences:
    """CSR from flat (row, item) pairs already grouped by row in order."""
    offsets = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=rows))]).astype(np.int64)
    return Sequences(offsets, items, users)


def _keep(seqs: Sequences, mask: np.ndarray) -> Sequences:
    """The events where ``mask`` holds, in their rows (times and ratings kept with them)."""
    row, _ = _positions(seqs)
    offsets = np.bincount(row[mask], minlength=len(seqs))
    offsets = np.concatenate([[0], np.cumsum(offsets)]).astype(np.int64)
    return seqs.gather(offsets, np.flatnonzero(mask), seqs.users)


def _distinct(
    seqs: Sequences, num_items: int, minus: Sequences | None = None, keep_order: bool = False
) -> Sequences:
    """Per-row distinct items (ascending, or in first-occurrence order), minus ``minus``'s row."""
    row, _ = _positions(seqs)
    key = row * (num_items + 1) + seqs.items
    unique_key, first = np.unique(key, return_index=True)
    if keep_order:
        unique_key = key[np.sort(first)]
    if minus is not None:
        minus_row, _ = _positions(minus)
        unique_key = unique_key[~np.isin(unique_key, minus_row * (num_items + 1) + minus.items)]
    return _from_flat(
        unique_key // (num_items + 1), unique_key % (num_items + 1), len(seqs), seqs.users
    )


def _task(history: Sequences, targets: Sequences, num_items: int) -> EvalTask:
    exclude = _distinct(history, num_items, minus=targets)
    return EvalTask(history.users, history, targets, exclude)


def _split(
    data: Interactions, train: Sequences, valid: EvalTask, test: EvalTask, protocol: str
) -> Split:
    return Split(
        train, valid, test, data.num_items, data.num_users, data.item_ids, data.user_ids, protocol
    )


# -- leave-one-out ---------------------------------------------------------------------------


def leave_one_out(data: Interactions) -> Split:
    """Last event → test, second-to-last → validation; users with < 3 events are train only."""
    seqs = data.to_sequences()
    lengths = seqs.lengths
    evaluated = np.flatnonzero(lengths >= 3)
    if evaluated.size == 0:
        raise DataFormatError(data.source, "no user has the 3 events leave-one-out needs")
    row, pos = _positions(seqs)
    held_out = np.where(lengths >= 3, 2, 0)
    train = _keep(seqs, pos < (lengths - held_out)[row])
    before_test = _keep(seqs, pos < (lengths - held_out // 2)[row])
    ends = seqs.offsets[evaluated + 1]
    users = seqs.users[evaluated]
    one = np.arange(evaluated.size + 1, dtype=np.int64)
    valid_targets = Sequences(one, seqs.items[ends - 2], users)
    test_targets = Sequences(one, seqs.items[ends - 1], users)
    valid = _task(train.select(evaluated), valid_targets, data.num_items)
    test = _task(before_test.select(evaluated), test_targets, data.num_items)
    return _split(data, train, valid, test, "leave-one-out")


# -- global temporal split -------------------------------------------------------------------


def _stage(
    seqs: Sequences,
    history_mask: np.ndarray,
    target_mask: np.ndarray,
    num_items: int,
    unseen_policy: str,
) -> EvalTask:
    history = _keep(seqs, history_mask)
    targets = _distinct(_keep(seqs, target_mask), num_items, keep_order=True)
    if unseen_policy == "drop":
        seen = np.zeros(num_items + 1, dtype=bool)
        seen[seqs.items[history_mask]] = True
        targets = _keep(targets, seen[targets.items])
        rows = np.flatnonzero((targets.lengths > 0) & (history.lengths > 0))
    else:
        rows = np.flatnonzero(targets.lengths > 0)
    return _task(history.select(rows), targets.select(rows), num_items)


def temporal_split(
    data: Interactions,
    valid_quantile: float = 0.8,
    test_quantile: float = 0.9,
    unseen_policy: str = "drop",
) -> Split:
    """Global time cuts at the given quantiles of all timestamps (see the module docstring)."""
    if data.timestamp is None:
        raise DataFormatError(data.source, "has no timestamps, so it cannot be split by time")
    if not 0.0 < valid_quantile <= test_quantile < 1.0:
        raise ValueError("need 0 < valid_quantile <= test_quantile < 1")
    if unseen_policy not in UNSEEN_POLICIES:
        raise ValueError(f"unseen_policy must be one of {UNSEEN_POLICIES}")
    valid_cut, test_cut = np.quantile(data.timestamp, [valid_quantile, test_quantile])
    seqs = data.to_sequences()
    time = data.timestamp
    in_train, before_test = time < valid_cut, time < test_cut
    valid = _stage(seqs, in_train, before_test & ~in_train, data.num_items, unseen_policy)
    test = _stage(seqs, before_test, ~before_test, data.num_items, unseen_policy)
    protocol = f"temporal (cuts at quantiles {valid_quantile}, {test_quantile}; {unseen_policy})"
    return _split(data, _keep(seqs, in_train), valid, test, protocol)


# -- session split ---------------------------------------------------------------------------


def _prefix_task(sessions: Sequences) -> EvalTask:
    """Every prefix ``s[:k]`` (k >= 1) of every session, predicting ``s[k]``."""
    row, pos = _positions(sessions)
    target = pos >= 1
    sample_row, sample_pos = row[target], pos[target]
    starts = sessions.offsets[sample_row]
    hist_offsets = np.concatenate([[0], np.cumsum(sample_pos)]).astype(np.int64)
    gather = np.repeat(starts - hist_offsets[:-1], sample_pos) + np.arange(hist_offsets[-1])
    users = sessions.users[sample_row]
    history = sessions.gather(hist_offsets, gather, users)
    one = np.arange(users.size + 1, dtype=np.int64)
    targets = Sequences(one, sessions.items[starts + sample_pos], users)
    empty = Sequences(np.zeros(users.size + 1, dtype=np.int64), np.zeros(0, np.int64), users)
    return EvalTask(users, history, targets, empty)


def session_split(
    data: Interactions,
    valid_fraction: float = 0.1,
    test_fraction: float = 0.1,
    unseen_policy: str = "drop",
) -> Split:
    """Sessions (the table's users) split by start time; see the module docstring."""
    if not (valid_fraction >= 0.0 and test_fraction > 0.0 and valid_fraction + test_fraction < 1):
        raise ValueError("need valid_fraction >= 0, test_fraction > 0 and their sum < 1")
    if unseen_policy not in UNSEEN_POLICIES:
        raise ValueError(f"unseen_policy must be one of {UNSEEN_POLICIES}")
    seqs = data.to_sequences()
    n = len(seqs)
    if data.timestamp is None:
        order = np.arange(n)
    else:
        order = np.argsort(data.timestamp[seqs.offsets[:-1]], kind="stable")
    n_test = max(1, round(n * test_fraction))
    n_valid = round(n * valid_fraction)
    if n - n_test - n_valid < 1:
        raise DataFormatError(data.source, f"{n} sessions are too few to split")
    train = seqs.select(np.sort(order[: n - n_test - n_valid]))

    def stage(rows: np.ndarray) -> EvalTask:
        sessions = seqs.select(np.sort(rows))
        if unseen_policy == "drop":
            seen = np.zeros(data.num_items + 1, dtype=bool)
            seen[train.items] = True
            sessions = _keep(sessions, seen[sessions.items])
        return _prefix_task(sessions)

    valid = stage(order[n - n_test - n_valid : n - n_test])
    test = stage(order[n - n_test :])
    protocol = f"session (last {test_fraction} test, {valid_fraction} valid; {unseen_policy})"
    return _split(data, train, valid, test, protocol)


# -- a dataset's own test sessions -----------------------------------------------------------


def predefined_split(
    train: Interactions,
    test: Interactions,
    valid_fraction: float = 0.1,
    unseen_policy: str = "drop",
) -> Split:
    """A dataset's own train and test sessions (SR-GNN's Diginetica), one row per session.

    Test: every prefix of every test session predicts its next item. ``unseen_policy="drop"``
    (SR-GNN's preprocessing) removes test clicks on items absent from the training file and
    then leaves out test sessions with fewer than 2 items; ``"keep"`` keeps the clicks and adds
    their items to the catalogue (ranked, never trained). Both counts are in ``protocol``.
    Validation: the last ``valid_fraction`` of the training sessions (by start time; in file
    order without times, SR-GNN's date order), carved out of training like ``session_split``'s.
    Test sessions get internal user ids after the training ones, so no test session is a
    neighbour's; their external ids (``user_ids``) are the test file's own and may repeat a
    training session's (both files count sessions from 1).
    """
    if not 0.0 <= valid_fraction < 1.0:
        raise ValueError("need 0 <= valid_fraction < 1")
    if unseen_policy not in UNSEEN_POLICIES:
        raise ValueError(f"unseen_policy must be one of {UNSEEN_POLICIES}")
    train_ext, test_ext = train.item_ids[1:], test.item_ids[test.item]
    if train_ext.dtype.kind != test_ext.dtype.kind:
        raise DataFormatError(test.source, "has item ids of another kind than the training file")
    known = np.isin(test_ext, train_ext)
    catalogue = train_ext if unseen_policy == "drop" else np.union1d(train_ext, test_ext)
    seqs = train.to_sequences()
    seqs = Sequences(
        seqs.offsets,
        np.searchsorted(catalogue, train_ext[train.item - 1]) + 1,
        seqs.users,
        seqs.times,
    )
    mapped = test.to_sequences()
    mapped = Sequences(
        mapped.offsets, np.searchsorted(catalogue, test_ext) + 1, mapped.users, mapped.times
    )
    kept = _keep(mapped, known) if unseen_policy == "drop" else mapped
    long_enough = np.flatnonzero(kept.lengths >= 2)
    sessions = kept.select(long_enough)
    users = len(seqs) + np.arange(len(sessions), dtype=np.int64)
    test_task = _prefix_task(Sequences(sessions.offsets, sessions.items, users, sessions.times))

    n = len(seqs)
    starts = seqs.offsets[:-1]
    order = np.arange(n) if seqs.times is None else np.argsort(seqs.times[starts], kind="stable")
    n_valid = round(n * valid_fraction)
    if n - n_valid < 1:
        raise DataFormatError(train.source, f"{n} training sessions are too few to split")
    fit = seqs.select(np.sort(order[: n - n_valid]))
    held = seqs.select(np.sort(order[n - n_valid :]))
    if unseen_policy == "drop":
        seen = np.zeros(catalogue.size + 1, dtype=bool)
        seen[fit.items] = True
        held = _keep(held, seen[held.items])
    unseen = int((~known).sum())
    protocol = (
        f"predefined (the dataset's test sessions; last {valid_fraction} of training sessions "
        f"valid; {unseen_policy}: {unseen} test clicks on items unseen in training "
        f"{'dropped' if unseen_policy == 'drop' else 'kept'}, "
        f"{len(kept) - long_enough.size} test sessions under 2 items left out)"
    )
    item_ids = np.concatenate([train.item_ids[:1], catalogue])
    user_ids = np.concatenate([train.user_ids, test.user_ids[long_enough]])
    return Split(
        fit,
        _prefix_task(held),
        test_task,
        catalogue.size,
        n + len(sessions),
        item_ids,
        user_ids,
        protocol,
    )
