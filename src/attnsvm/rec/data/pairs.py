"""Nearest training examples by the items they hold: MrTransformer's pairs of similar sequences.

Each example's input window is a set of items, a multi-hot row ``x``; two windows are as far
apart as ``‖x − y‖² = |A| + |B| − 2|A ∩ B|`` (the exact L2 search of the official generator,
``faiss.IndexFlatL2`` on multi-hot rows). ``nearest_examples`` returns, for every example, its
k nearest examples, nearest first, ties to the lower index, the example itself included (at
distance 0, as an exact search of the index returns the query).

The search is exact, and bounds each query before it searches: its k nearest lie within
``reach``, the k-th smallest distance among a few windows measured first (the windows of its own
row whose ends are nearest its own, which overlap by their positions where the row repeats no
item, and the k windows with the fewest items). A window within reach has a size within reach
of the query's and shares at least ``|A| − reach`` of its items. So

- a query with ``|A| > reach`` (a long window of a long row) reads only the rows that hold
  ``|A| − reach`` of its items: a count per row, kept as the window slides along its own row.
  In those rows the windows of a fitting size are measured at once, their overlaps differences
  of one cumulative count of the query's items along the row;
- any other (short windows, short rows) takes its intersections with every window of a fitting
  size from one sparse product ``X_block Xᵀ``; a window outside it shares no item and is at
  ``|A| + |B|``, so the k windows with the fewest items complete its candidates. Blocks are sized
  so that their product holds about ``budget`` entries, whatever the items' popularity.
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


def nearest_examples(
    rows: Sequences,
    examples: Examples,
    max_len: int,
    num_items: int,
    k: int,
    budget: int = 20_000_000,
) -> np.ndarray:
    """(E, min(k, E)) indices of each example's nearest examples (module docstring)."""
    search = _Search(rows, examples, max_len, num_items, min(k, len(examples)))
    reach = search.reach()
    by_rows = search.sizes > reach
    out = np.empty((len(examples), search.k), dtype=np.int64)
    queries = np.flatnonzero(~by_rows)
    out[queries] = search.by_product(queries, reach, budget)
    queries = search.order[by_rows[search.order]]  # by row, then end: the windows slide
    out[queries] = search.by_rows(queries, reach)
    return out


def _top_k(query_rows, candidates, distances, count: int, k: int):
    """(count, k) candidates of smallest (distance, index) per query row, duplicates dropped,
    and (count, k) their distances."""
    order = np.lexsort((candidates, distances, query_rows))
    query_rows, candidates, distances = query_rows[order], candidates[order], distances[order]
    kept = np.ones(order.size, dtype=bool)
    kept[1:] = (query_rows[1:] != query_rows[:-1]) | (candidates[1:] != candidates[:-1])
    query_rows, candidates, distances = query_rows[kept], candidates[kept], distances[kept]
    rank = np.arange(query_rows.size) - np.searchsorted(query_rows, np.arange(count))[query_rows]
    keep = rank < k
    nearest = np.empty((count, k), dtype=np.int64)
    nearest[query_rows[keep], rank[keep]] = candidates[keep]
    nearest_distances = np.empty((count, k), dtype=np.int64)
    nearest_distances[query_rows[keep], rank[keep]] = distances[keep]
    return nearest, nearest_distances


def _ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(start, stop)`` over the pairs."""
    lengths = np.maximum(stops - starts, 0)
    return np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())


class _Search:
    """The windows of one search: their item sets, sizes and places in their rows."""

    def __init__(self, rows: Sequences, examples: Examples, max_len: int, num_items: int, k: int):
        self.rows, self.k, self.max_len = rows, k, max_len
        self.sets = window_sets(rows, examples, max_len, num_items)
        self.sizes = np.diff(self.sets.indptr).astype(np.int64)
        self.row_of = examples.rows.astype(np.int64)
        self.ends = examples.ends.astype(np.int64)
        self.starts = np.maximum(self.ends - max_len, 0)
        self.fewest = np.lexsort((np.arange(len(examples)), self.sizes))[:k]
        self.fewest_sets = self.sets[self.fewest].T.tocsc()
        owner = np.repeat(np.arange(len(rows)), rows.lengths)
        pairs = np.unique(owner * (num_items + 1) + rows.items)  # (row, item), each once
        holders = pairs // (num_items + 1)
        # where a row repeats no item, a window's size and overlaps are its positions'
        self.plain = np.bincount(holders, minlength=len(rows)) == rows.lengths
        self.holders = sp.csr_matrix(  # item → the rows that hold it
            (np.ones(pairs.size, dtype=np.int8), (pairs % (num_items + 1), holders)),
            shape=(num_items + 1, len(rows)),
        )
        self.order = np.lexsort((self.ends, self.row_of))  # by row, then end
        self.stride = int(self.ends.max()) + 2
        self.key = self.row_of[self.order] * self.stride + self.ends[self.order]

    def reach(self, chunk: int = 1 << 16) -> np.ndarray:
        """(E,) the k-th smallest distance from each window to its own row's windows with the
        nearest ends (rows without repeats) and the k windows with the fewest items."""
        out = np.empty(len(self.sizes), dtype=np.int64)
        for begin in range(0, len(self.order), chunk):
            queries = self.order[begin : begin + chunk]
            count = queries.size
            local = np.arange(count)
            shifts = np.arange(-self.k, self.k + 1)
            neighbour = np.clip(begin + local[:, None] + shifts, 0, len(self.order) - 1)
            neighbour = self.order[neighbour]
            same = (self.row_of[neighbour] == self.row_of[queries][:, None]) & self.plain[
                self.row_of[queries]
            ][:, None]
            overlap = np.minimum(self.ends[queries][:, None], self.ends[neighbour]) - np.maximum(
                self.starts[queries][:, None], self.starts[neighbour]
            )
            own = self.sizes[queries][:, None] + self.sizes[neighbour] - 2 * overlap.clip(0)
            shared = np.asarray((self.sets[queries] @ self.fewest_sets).todense())
            few = self.sizes[queries][:, None] + self.sizes[self.fewest] - 2 * shared
            query_rows = np.concatenate(
                [np.broadcast_to(local[:, None], same.shape)[same], np.repeat(local, self.k)]
            )
            candidates = np.concatenate([neighbour[same], np.tile(self.fewest, count)])
            distances = np.concatenate([own[same], few.ravel()])
            out[queries] = _top_k(query_rows, candidates, distances, count, self.k)[1][:, -1]
        return out

    def by_product(self, queries: np.ndarray, reach: np.ndarray, budget: int) -> np.ndarray:
        """(len(queries), k) nearest by sparse products with the windows of a size in reach,
        the queries grouped by the largest size they reach (up to a power of two)."""
        out = np.empty((queries.size, self.k), dtype=np.int64)
        limits = self.sizes[queries] + reach[queries]
        groups = 2 ** np.ceil(np.log2(np.maximum(limits, 1))).astype(np.int64)
        for limit in np.unique(groups):
            members = np.flatnonzero(groups == limit)
            out[members] = self._product(queries[members], reach[queries[members]], limit, budget)
        return out

    def _product(
        self, queries: np.ndarray, reach: np.ndarray, limit: int, budget: int
    ) -> np.ndarray:
        fitting = np.flatnonzero(self.sizes <= limit)
        right = self.sets[fitting].T.tocsc()
        # a query's product row has at most Σ over its items of their window counts entries
        bound = np.asarray(self.sets[queries] @ np.asarray(right.sum(axis=1)).ravel()).ravel()
        out = np.empty((queries.size, self.k), dtype=np.int64)
        start = 0
        while start < queries.size:
            stop = start + max(1, int(np.searchsorted(np.cumsum(bound[start:]), budget)))
            block = self.sets[queries[start:stop]]
            shared = (block @ right).tocoo()
            fallback = np.asarray((block @ self.fewest_sets).todense())
            count = stop - start
            query_rows = np.concatenate([shared.row, np.repeat(np.arange(count), self.k)])
            candidates = np.concatenate([fitting[shared.col], np.tile(self.fewest, count)])
            overlap = np.concatenate([shared.data, fallback.ravel()]).astype(np.int64)
            sizes = self.sizes[queries[start:stop]][query_rows]
            distances = sizes + self.sizes[candidates] - 2 * overlap
            within = distances <= reach[start:stop][query_rows]  # the rest cannot be nearest
            nearest = _top_k(
                query_rows[within], candidates[within], distances[within], count, self.k
            )
            out[start:stop] = nearest[0]
            start = stop
        return out

    def by_rows(self, queries: np.ndarray, reach: np.ndarray) -> np.ndarray:
        """(len(queries), k) nearest of queries given by row, then end, searched in the rows
        that hold enough of their items (module docstring)."""
        if queries.size == 0:
            return np.empty((0, self.k), dtype=np.int64)
        rows, items = self.rows, self.rows.items
        held = np.zeros(len(rows), dtype=np.int64)  # per row: how many of the window's items
        inside = np.zeros(self.sets.shape[1], dtype=np.int64)  # per item: its window count
        found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

        def move(positions: np.ndarray, step: int) -> None:
            for item in items[positions]:
                inside[item] += step
                if inside[item] == (1 if step > 0 else 0):  # it entered or left the window
                    holders = self.holders.indices[
                        self.holders.indptr[item] : self.holders.indptr[item + 1]
                    ]
                    held[holders] += step

        row, start, end = -1, 0, 0  # the window counted now, in absolute positions
        for number, query in enumerate(queries):
            offset = rows.offsets[self.row_of[query]]
            if self.row_of[query] != row:
                move(np.arange(start, end), -1)
                row, start, end = self.row_of[query], offset, offset
            new_start, new_end = offset + self.starts[query], offset + self.ends[query]
            move(np.arange(start, min(new_start, end)), -1)
            move(np.arange(max(new_start, end), new_end), +1)
            start, end = new_start, new_end
            size, limit = self.sizes[query], reach[query]
            near = np.flatnonzero(held >= size - limit)
            candidates, overlaps = self._overlaps(near, size - limit, size + limit, inside)
            distances = size + self.sizes[candidates] - 2 * overlaps
            within = distances <= limit
            found.append((np.full(within.sum(), number), candidates[within], distances[within]))
        move(np.arange(start, end), -1)
        query_rows, candidates, distances = (
            np.concatenate(part) for part in zip(*found, strict=True)
        )
        return _top_k(query_rows, candidates, distances, queries.size, self.k)[0]

    def _overlaps(self, near: np.ndarray, low: int, high: int, inside: np.ndarray):
        """The windows of rows ``near`` with a size in [low, high] and their overlaps with the
        window whose item counts are ``inside``."""
        plain = near[self.plain[near]]
        # where a row repeats no item, a window of end e holds min(e, max_len) items
        first_end = low if low <= self.max_len else self.stride  # none
        last_end = min(high if high < self.max_len else self.stride, self.stride - 1)
        begin = np.searchsorted(self.key, plain * self.stride + first_end)
        stop = np.searchsorted(self.key, plain * self.stride + last_end, side="right")
        some = stop > begin
        plain, begin, stop = plain[some], begin[some], stop[some]
        chosen = self.order[_ranges(begin, stop)]
        group = np.repeat(np.arange(plain.size), stop - begin)
        # one count of the window's items along each row, over the positions its chosen windows
        # cover: from the first one's start to the last one's end (a row's are by end)
        lows, highs = self.starts[self.order[begin]], self.ends[self.order[stop - 1]]
        offsets = self.rows.offsets[plain]
        hits = inside[self.rows.items[_ranges(offsets + lows, offsets + highs)]] > 0
        cumulative = np.concatenate([[0], np.cumsum(hits)])
        base = (np.cumsum(highs - lows) - (highs - lows) - lows)[group]
        overlaps = cumulative[base + self.ends[chosen]] - cumulative[base + self.starts[chosen]]
        repeating = near[~self.plain[near]]
        if repeating.size:
            begin = np.searchsorted(self.key, repeating * self.stride)
            stop = np.searchsorted(self.key, (repeating + 1) * self.stride)
            others = self.order[_ranges(begin, stop)]
            others = others[(self.sizes[others] >= low) & (self.sizes[others] <= high)]
            chosen = np.concatenate([chosen, others])
            overlaps = np.concatenate([overlaps, self.sets[others] @ (inside > 0)])
        return chosen, overlaps.astype(np.int64)
