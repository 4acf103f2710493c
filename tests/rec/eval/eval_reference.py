"""Brute-force, loop-per-user references for the evaluation code (slow, obviously correct)."""

import math

import numpy as np


def reference_topk(scores, exclude_rows, target_rows, k, exclude_seen=True):
    """Sort each row's rankable items by (score desc, id asc); pad with 0 to length k.

    Excluded items (other than the row's own targets) and items scored -inf are not rankable.
    """
    out = []
    for r, row_scores in enumerate(scores):
        banned = set(exclude_rows[r]) - set(target_rows[r]) if exclude_seen else set()
        items = [
            i for i in range(1, len(row_scores)) if i not in banned and row_scores[i] > -math.inf
        ]
        items.sort(key=lambda i: (-row_scores[i], i))
        out.append((items + [0] * k)[:k])
    return np.array(out, dtype=np.int64)


def reference_metrics(topk, target_rows, ks):
    """Per-user HR, NDCG, MRR, Recall@K from the textbook definitions."""
    per_user = {f"{m}@{k}": [] for k in ks for m in ("HR", "NDCG", "MRR", "Recall")}
    for ranked, targets in zip(topk.tolist(), target_rows, strict=True):
        relevant = set(targets)
        for k in ks:
            ranks = [j + 1 for j, item in enumerate(ranked[:k]) if item in relevant]
            per_user[f"HR@{k}"].append(1.0 if ranks else 0.0)
            dcg = sum(1 / math.log2(r + 1) for r in ranks)
            idcg = sum(1 / math.log2(r + 1) for r in range(1, min(k, len(relevant)) + 1))
            per_user[f"NDCG@{k}"].append(dcg / idcg)
            per_user[f"MRR@{k}"].append(1 / ranks[0] if ranks else 0.0)
            per_user[f"Recall@{k}"].append(len(ranks) / min(k, len(relevant)))
    return {name: np.array(values) for name, values in per_user.items()}
