"""Pointwise evaluation: is a (history, candidate) pair liked? LogLoss, F1 and AUC.

The labelled events of an evaluation stage (``labelled_events``) are its targets with their
ratings: the split's ``EvalTask`` keeps each row's target items (distinct, in first-occurrence
order) but not their ratings, so the rating of each target is read back from the dataset's
full sequences: the first occurrence of the item after the row's history, which the split
guarantees is a prefix of the user's sequence (checked). A label is ``rating ≥ threshold``
(4 on a 1–5 scale: "liked").

Metrics of predicted logits ``z`` (probability ``p = σ(z)``) against labels ``y``:

- ``log_loss``: mean ``−[y log p + (1 − y) log(1 − p)]``, computed from the logits
  (``softplus(z) − y z``), so a confident wrong prediction costs its true log loss, never ∞;
- ``f1_score``: ``2 TP / (2 TP + FP + FN)`` with a positive prediction where ``p ≥ decision``
  (0.5 by default: the recommendation paper states no threshold); 0 where there is no positive
  label and no positive prediction (sklearn's ``zero_division=0``);
- ``roc_auc``: the probability that a random liked event outscores a random disliked one, ties
  counting ½ (the Mann–Whitney statistic from average ranks); needs both labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnsvm.errors import InvalidRequest
from attnsvm.rec.data.sequences import EvalTask, Sequences


def _check(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    labels = np.asarray(labels)
    scores = np.asarray(scores, dtype=np.float64)
    if labels.shape != scores.shape or labels.ndim != 1 or labels.size == 0:
        raise InvalidRequest(
            f"labels {labels.shape} and scores {scores.shape} must be equal, non-empty 1-D arrays"
        )
    if not np.isin(labels, (0, 1)).all():
        raise InvalidRequest("labels must be 0 or 1")
    if not np.isfinite(scores).all():
        raise InvalidRequest("scores must be finite (a NaN or infinite logit)")
    return labels.astype(np.float64), scores


def log_loss(labels: np.ndarray, logits: np.ndarray) -> float:
    y, z = _check(labels, logits)
    return float(np.mean(np.logaddexp(0.0, z) - y * z))


def f1_score(labels: np.ndarray, logits: np.ndarray, decision: float = 0.5) -> float:
    """F1 of the predictions ``σ(z) ≥ decision``."""
    if not 0.0 < decision < 1.0:
        raise InvalidRequest(f"the decision threshold must lie in (0, 1), got {decision}")
    y, z = _check(labels, logits)
    predicted = z >= np.log(decision / (1.0 - decision))  # σ(z) ≥ d ⇔ z ≥ logit(d)
    true_positive = float(np.sum(predicted & (y == 1)))
    wrong = float(np.sum(predicted != (y == 1)))  # FP + FN
    return 0.0 if true_positive == 0 else 2 * true_positive / (2 * true_positive + wrong)


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    y, s = _check(labels, scores)
    positives = int(y.sum())
    negatives = y.size - positives
    if positives == 0 or negatives == 0:
        raise InvalidRequest("AUC needs both liked and disliked events")
    order = np.argsort(s, kind="stable")
    ranks = np.empty(s.size)
    ranks[order] = np.arange(1, s.size + 1)
    # ties share the average of their ranks
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    rank_sums = np.bincount(inverse, weights=ranks)
    ranks = (rank_sums / counts)[inverse]
    u = ranks[y == 1].sum() - positives * (positives + 1) / 2
    return float(u / (positives * negatives))


def pointwise_metrics(labels: np.ndarray, logits: np.ndarray, decision: float = 0.5) -> dict:
    """LogLoss, F1 (at ``decision``), AUC and the counts behind them."""
    labels = np.asarray(labels)
    return {
        "LogLoss": log_loss(labels, logits),
        "F1": f1_score(labels, logits, decision),
        "AUC": roc_auc(labels, logits),
        "events": int(labels.size),
        "liked": int(labels.sum()),
    }


@dataclass(frozen=True)
class LabelledEvents:
    """One evaluation stage's events: row ``rows[n]`` of the task (its history) and candidate
    ``items[n]`` rated ``ratings[n]``; ``labels`` = ``ratings ≥ threshold``."""

    rows: np.ndarray
    items: np.ndarray
    ratings: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return self.rows.size


def labelled_events(full: Sequences, task: EvalTask, threshold: float) -> LabelledEvents:
    """The targets of ``task`` with their ratings from ``full`` (the dataset's sequences, one
    row per internal user, ``Interactions.to_sequences()``); see the module docstring."""
    if full.ratings is None:
        raise InvalidRequest(
            "pointwise evaluation needs ratings and this dataset has none "
            "(use one with ratings, e.g. ml-100k or ml-latest-small)"
        )
    history, targets = task.history, task.targets
    if task.users.size and task.users.max() >= len(full):
        raise InvalidRequest("the task names users the dataset does not have")
    starts = full.offsets[task.users]
    lengths = history.lengths
    flat = np.repeat(starts - history.offsets[:-1], lengths) + np.arange(history.items.size)
    prefixes = np.all(lengths <= full.lengths[task.users]) and np.array_equal(
        full.items[np.minimum(flat, full.items.size - 1)], history.items
    )
    if not prefixes:
        raise InvalidRequest("the split's histories are not prefixes of the users' sequences")
    # every event after each row's history, keyed by (row, item); the first occurrence kept
    after = full.lengths[task.users] - lengths
    row_of = np.repeat(np.arange(len(task)), after)
    index = np.repeat(starts + lengths - np.cumsum(after) + after, after) + np.arange(after.sum())
    width = int(full.items.max()) + 1 if full.items.size else 1
    keys, first = np.unique(row_of * width + full.items[index], return_index=True)
    target_rows = np.repeat(np.arange(len(task)), targets.lengths)
    wanted = target_rows * width + targets.items
    found = np.searchsorted(keys, wanted)
    if np.any(found >= keys.size) or np.any(keys[np.minimum(found, keys.size - 1)] != wanted):
        raise InvalidRequest("a target item does not occur after its row's history")
    ratings = full.ratings[index[first[found]]]
    return LabelledEvents(target_rows, targets.items, ratings, ratings >= threshold)
