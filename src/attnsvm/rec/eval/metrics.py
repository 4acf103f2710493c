"""Ranking metrics from top-k lists, per user and averaged, all vectorised over users.

Definitions (``T`` = the user's set of distinct target items, ``rank`` is 1-based, ``K`` the cut):

* ``HR@K``     = 1 if any target is in the top K, else 0.
* ``Recall@K`` = |top K ∩ T| / min(K, |T|). The denominator is ``min(K, |T|)`` rather than
  ``|T|`` so that a perfect ranking scores 1 for every K; with one target (leave-one-out)
  ``Recall@K == HR@K``.
* ``NDCG@K``   = Σ_{hits} 1/log2(rank + 1) / IDCG, with binary relevance and the ideal DCG
  taken over min(K, |T|) positions. One target at rank r gives 1/log2(r + 1).
* ``MRR@K``    = 1/rank of the first target in the top K, else 0.
* ``coverage@K``   = distinct items recommended in anyone's top K / catalogue size.
* ``popularity@K`` = per user, the mean ``item_popularity`` of the items in the top K (0 for an
  empty list), averaged over users; the unit is whatever the caller passes (e.g. train counts).

Item id 0 in a top-k list means "no item" (fewer than k items were rankable); it is never a hit
and is ignored by coverage and popularity.
"""

from __future__ import annotations

from collections.abc import Sequence as SequenceOf

import numpy as np

from attnsvm.errors import InvalidRequest
from attnsvm.rec.data.sequences import Sequences

RANKING_METRICS = ("HR", "NDCG", "MRR", "Recall")


def check_ks(ks: SequenceOf[int], width: int) -> tuple[int, ...]:
    """The cut-offs as a tuple of ints, each in 1..width, or an InvalidRequest naming the others."""
    ks = tuple(int(k) for k in ks)
    if not ks:
        raise InvalidRequest("ks must name at least one cut-off")
    bad = [k for k in ks if not 1 <= k <= width]
    if bad:
        raise InvalidRequest(
            f"cut-offs {bad} are outside 1..{width} (the width of the top-k lists)"
        )
    return ks


def target_hits(topk: np.ndarray, targets: Sequences) -> tuple[np.ndarray, np.ndarray]:
    """``hits[r, j]`` = whether ``topk[r, j]`` is a target of row r, and the distinct-target counts.

    Each (row, item) pair is encoded as one int64 key so membership is a single ``np.isin``.
    """
    rows = np.repeat(np.arange(len(targets), dtype=np.int64), targets.lengths)
    width = int(max(topk.max(initial=0), targets.items.max(initial=0))) + 1
    target_keys = np.unique(rows * width + targets.items)
    n_relevant = np.bincount(target_keys // width, minlength=len(targets))
    topk_keys = np.arange(topk.shape[0], dtype=np.int64)[:, None] * width + topk
    hits = np.isin(topk_keys, target_keys) & (topk > 0)
    return hits, n_relevant


def metrics_from_topk(
    topk: np.ndarray,
    targets: Sequences,
    ks: SequenceOf[int] = (1, 5, 10, 20),
    *,
    num_items: int | None = None,
    item_popularity: np.ndarray | None = None,
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Mean metrics and per-user metric arrays for ranked lists ``topk`` (rows × width, best first).

    ``coverage@K`` needs ``num_items``; ``popularity@K`` needs ``item_popularity`` (indexed by
    item id, length num_items + 1). Every row must have at least one target.
    """
    topk = np.asarray(topk, dtype=np.int64)
    if topk.ndim != 2 or topk.shape[0] != len(targets):
        raise ValueError(f"topk has shape {topk.shape}; expected ({len(targets)}, width)")
    ks = check_ks(ks, topk.shape[1])
    hits, n_relevant = target_hits(topk, targets)
    no_target = np.flatnonzero(n_relevant == 0)
    if no_target.size:
        raise ValueError(
            f"{no_target.size} rows have no target (first: row {no_target[0]}); "
            "metrics are undefined for them"
        )
    discount = 1.0 / np.log2(np.arange(2, topk.shape[1] + 2, dtype=np.float64))
    ideal = np.cumsum(discount)
    per_user: dict[str, np.ndarray] = {}
    for k in ks:
        hits_k = hits[:, :k]
        n_hits = hits_k.sum(axis=1)
        first = np.argmax(hits_k, axis=1)  # 0 where there is no hit; masked below
        per_user[f"HR@{k}"] = (n_hits > 0).astype(np.float64)
        per_user[f"NDCG@{k}"] = (hits_k @ discount[:k]) / ideal[np.minimum(k, n_relevant) - 1]
        per_user[f"MRR@{k}"] = np.where(n_hits > 0, 1.0 / (first + 1), 0.0)
        per_user[f"Recall@{k}"] = n_hits / np.minimum(k, n_relevant)
    if item_popularity is not None:
        popularity = np.asarray(item_popularity, dtype=np.float64)
        if popularity.ndim != 1 or popularity.size <= topk.max(initial=0):
            raise ValueError(
                f"item_popularity has shape {popularity.shape}; it must be indexed by item id "
                f"(length > {topk.max(initial=0)})"
            )
        for k in ks:
            listed = topk[:, :k] > 0
            total = np.where(listed, popularity[topk[:, :k]], 0.0).sum(axis=1)
            per_user[f"popularity@{k}"] = total / np.maximum(listed.sum(axis=1), 1)
    order = [f"{name}@{k}" for name in (*RANKING_METRICS, "popularity") for k in ks]
    per_user = {name: per_user[name] for name in order if name in per_user}
    metrics = {name: float(values.mean()) for name, values in per_user.items()}
    if num_items is not None:
        for k in ks:
            recommended = np.unique(topk[:, :k])
            metrics[f"coverage@{k}"] = float(np.count_nonzero(recommended) / num_items)
    return metrics, per_user
