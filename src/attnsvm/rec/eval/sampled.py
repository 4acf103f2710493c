"""Sampled metrics (legacy protocol, only on request): rank the targets among N sampled negatives.

Sampled metrics can reorder models relative to full ranking (Krichene & Rendle 2020; Latifi et
al. 2022), so every metric name carries its protocol, e.g. ``NDCG@10 (sampled: 100 uniform)``.

Negatives for row r are N distinct items outside the user's ``exclude`` row and targets, drawn
without replacement uniformly or with probability ∝ ``item_popularity`` (successive sampling,
the semantics of ``numpy.random.Generator.choice(replace=False, p=...)``), by the Gumbel-top-k
trick so a batch is drawn with one vectorised top-k. Row r always consumes the same random
numbers, so the negatives depend on the seed only, never on the batch size.
"""

from __future__ import annotations

from collections.abc import Sequence as SequenceOf

import numpy as np
import torch

from attnsvm.errors import InvalidRequest, shown
from attnsvm.rec.data.sequences import EvalTask
from attnsvm.rec.eval.metrics import check_ks, metrics_from_topk
from attnsvm.rec.eval.ranking import (
    EvalResult,
    ScoreFn,
    batch_scores,
    check_item_ids,
    check_no_nan,
    csr_block,
)
from attnsvm.rec.eval.topk import topk_lower_id_first

SAMPLERS = ("uniform", "popularity")


def sampling_log_weights(
    num_items: int, sampler: str, item_popularity: np.ndarray | None
) -> np.ndarray:
    """log of the unnormalised sampling weight of each item id (padding id 0 gets -inf)."""
    if sampler == "uniform":
        weights = np.ones(num_items + 1)
    elif sampler == "popularity":
        if item_popularity is None:
            raise ValueError("sampler='popularity' needs item_popularity")
        weights = np.asarray(item_popularity, dtype=np.float64)
        if weights.shape != (num_items + 1,) or np.any(weights < 0):
            raise ValueError(
                f"item_popularity must be non-negative with shape ({num_items + 1},), "
                f"got shape {weights.shape}"
            )
        weights = weights.copy()
    else:
        raise InvalidRequest(f"unknown sampler {shown(sampler)}; choose one of {SAMPLERS}")
    weights[0] = 0.0
    with np.errstate(divide="ignore"):
        return np.log(weights)


def sample_negatives(
    task: EvalTask,
    num_items: int,
    n_negatives: int,
    sampler: str = "uniform",
    *,
    seed: int = 0,
    item_popularity: np.ndarray | None = None,
    batch_size: int = 1024,
) -> np.ndarray:
    """``(len(task), n_negatives)`` distinct negatives per row (none seen, none a target)."""
    check_item_ids(task, num_items)
    log_weights = torch.from_numpy(sampling_log_weights(num_items, sampler, item_popularity))
    rng = np.random.default_rng(seed)
    out = np.zeros((len(task), n_negatives), dtype=np.int64)
    for start in range(0, len(task), batch_size):
        stop = min(start + batch_size, len(task))
        uniform = torch.from_numpy(rng.random((stop - start, num_items + 1)))
        keys = log_weights - torch.log(-torch.log(uniform))  # log w + Gumbel(0, 1)
        for seqs in (task.exclude, task.targets):
            rows, items = (torch.from_numpy(a) for a in csr_block(seqs, start, stop))
            keys[rows, items] = -torch.inf
        negatives, available = torch.topk(keys, n_negatives, dim=1)[1], torch.isfinite(keys)
        short = torch.nonzero(available.sum(dim=1) < n_negatives)[:, 0]
        if short.numel():
            row = start + int(short[0])
            raise InvalidRequest(
                f"task row {row} has only {int(available[short[0]].sum())} items to sample "
                f"from with sampler={sampler!r}; {n_negatives} negatives were asked for"
            )
        out[start:stop] = negatives.numpy()
    return out


def rank_among_candidates(
    score_fn: ScoreFn,
    task: EvalTask,
    num_items: int,
    negatives: np.ndarray,
    k: int,
    *,
    batch_size: int = 1024,
) -> np.ndarray:
    """Top-k of each row's candidates (its targets plus its negatives), ties to the lower id."""
    out = np.zeros((len(task), k), dtype=np.int64)
    with torch.inference_mode():
        for start in range(0, len(task), batch_size):
            stop = min(start + batch_size, len(task))
            rows = np.arange(start, stop, dtype=np.int64)
            scores = batch_scores(score_fn, rows, num_items)
            candidates = torch.zeros_like(scores, dtype=torch.bool)
            rows, items = (torch.from_numpy(a) for a in csr_block(task.targets, start, stop))
            candidates[rows.to(scores.device), items.to(scores.device)] = True
            candidates.scatter_(1, torch.from_numpy(negatives[start:stop]).to(scores.device), True)
            scores.masked_fill_(~candidates, -torch.inf)
            values, ids = topk_lower_id_first(scores, k)
            check_no_nan(values[:, 0], rows)
            out[start:stop] = ids.cpu().numpy()
    return out


def sampled_label(n_negatives: int, sampler: str) -> str:
    return f"sampled: {n_negatives} {sampler}"


def sampled_evaluate(
    score_fn: ScoreFn,
    task: EvalTask,
    num_items: int,
    n_negatives: int = 100,
    sampler: str = "uniform",
    *,
    seed: int = 0,
    ks: SequenceOf[int] = (1, 5, 10, 20),
    item_popularity: np.ndarray | None = None,
    batch_size: int = 1024,
) -> EvalResult:
    """HR/NDCG/MRR/Recall@K among targets + N negatives, named ``HR@10 (sampled: 100 uniform)``."""
    if not 1 <= n_negatives < num_items:
        raise InvalidRequest(f"n_negatives={n_negatives} must be in 1..{num_items - 1}")
    ks = check_ks(ks, n_negatives + 1)
    negatives = sample_negatives(
        task,
        num_items,
        n_negatives,
        sampler,
        seed=seed,
        item_popularity=item_popularity,
        batch_size=batch_size,
    )
    topk = rank_among_candidates(
        score_fn, task, num_items, negatives, max(ks), batch_size=batch_size
    )
    metrics, per_user = metrics_from_topk(topk, task.targets, ks)
    label = sampled_label(n_negatives, sampler)
    return EvalResult(
        {f"{name} ({label})": value for name, value in metrics.items()},
        {f"{name} ({label})": value for name, value in per_user.items()},
        f"{label} negatives per user, seen items and targets never sampled",
        np.asarray(task.users),
    )
