"""Nearest training examples by the items they hold: MrTransformer's pairs of similar sequences.

Each example's input window is a set of items, a multi-hot row ``x``; two windows are as far
apart as ``‖x − y‖² = |A| + |B| − 2|A ∩ B|`` (the exact L2 search of the official generator,
``faiss.IndexFlatL2`` on multi-hot rows). ``nearest_examples`` returns, for every example, its
k nearest examples, nearest first, ties to the lower index, the example itself included (at
distance 0, as an exact search of the index returns the query).

Everything is sparse and vectorised: the intersections ``|A ∩ B|`` of a block of query rows with
every row are one sparse product ``X_block Xᵀ``; every row outside that product shares no item
with the query and is at ``|A| + |B|``, so the k rows with the fewest items (whose intersections
are computed exactly, densely) complete the candidates. Blocks are sized so that their
product holds about ``budget`` entries, whatever the items' popularity.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from attnsvm.rec.data.batches import Examples
from attnsvm.rec.data.sequences import Sequences


def window_sets(rows: Sequences, examples: Examples, max_len: int, num_items: int) -> sp.csr_matrix:
    """(E, num_items + 1) binary CSR: the distinct items of each example's input window."""
    starts = rows.offsets[examples.rows]
    lengths = np.minimum(examples.ends, max_len)
    first = starts + examples.ends - lengths
    flat = np.repeat(first - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    data = np.ones(flat.size, dtype=np.int32)
    sets = sp.csr_matrix((data, rows.items[flat], indptr), shape=(len(examples), num_items + 1))
    sets.sum_duplicates()
    sets.data[:] = 1
    return sets


def _top_k(query_rows, candidates, distances, count: int, k: int) -> np.ndarray:
    """(count, k) candidates of smallest (distance, index) per query row, duplicates dropped."""
    order = np.lexsort((candidates, distances, query_rows))
    query_rows, candidates = query_rows[order], candidates[order]
    repeated = np.zeros(order.size, dtype=bool)
    repeated[1:] = (query_rows[1:] == query_rows[:-1]) & (candidates[1:] == candidates[:-1])
    query_rows, candidates = query_rows[~repeated], candidates[~repeated]
    starts = np.searchsorted(query_rows, np.arange(count))
    rank = np.arange(query_rows.size) - starts[query_rows]
    keep = rank < k
    out = np.empty((count, k), dtype=np.int64)
    out[query_rows[keep], rank[keep]] = candidates[keep]
    return out


def nearest_examples(
    rows: Sequences,
    examples: Examples,
    max_len: int,
    num_items: int,
    k: int,
    budget: int = 20_000_000,
) -> np.ndarray:
    """(E, min(k, E)) indices of each example's nearest examples (module docstring)."""
    sets = window_sets(rows, examples, max_len, num_items)
    total = sets.shape[0]
    k = min(k, total)
    sizes = np.diff(sets.indptr).astype(np.int64)
    fewest = np.lexsort((np.arange(total), sizes))[:k]
    fewest_sets = sets[fewest].T.tocsc()
    # a query's product row has at most Σ over its items of their example counts entries
    item_counts = np.bincount(sets.indices, minlength=num_items + 1)
    bound = np.asarray(sets @ item_counts).ravel()
    out = np.empty((total, k), dtype=np.int64)
    start = 0
    while start < total:
        stop = start + max(1, int(np.searchsorted(np.cumsum(bound[start:]), budget)))
        block = sets[start:stop]
        shared = (block @ sets.T).tocoo()
        fallback = np.asarray((block @ fewest_sets).todense())
        count = stop - start
        query_rows = np.concatenate([shared.row, np.repeat(np.arange(count), k)])
        candidates = np.concatenate([shared.col, np.tile(fewest, count)])
        overlap = np.concatenate([shared.data, fallback.ravel()]).astype(np.int64)
        distances = sizes[start:stop][query_rows] + sizes[candidates] - 2 * overlap
        out[start:stop] = _top_k(query_rows, candidates, distances, count, k)
        start = stop
    return out
