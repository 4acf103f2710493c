"""Exact top-k by (score desc, item id asc): the primitives the ranker and the server share.

``torch.topk`` alone keeps an arbitrary subset of the items tied at the k-th score; these
functions settle every tie by the lower id, and pre-select wide rows by block maxima (exact,
an order of magnitude cheaper than ``torch.topk`` over every column).
"""

from __future__ import annotations

import torch

#: items per block of a wide row's block-maxima pre-selection (``_top_by_blocks``)
TOPK_BLOCK = 64


def top_by_score_then_id(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's top min(k, columns) (scores, column indices) ordered by (score desc, index
    asc), -inf entries included; rows many blocks wide are pre-selected by block maxima."""
    if scores.shape[1] <= k:
        return torch.sort(scores, dim=1, descending=True, stable=True)
    if scores.shape[1] >= 4 * TOPK_BLOCK * (k + 1):
        return _top_by_blocks(scores, k)
    return _top_by_topk(scores, k)


def _top_by_topk(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``top_by_score_then_id`` by ``torch.topk`` over every column (more than k of them)."""
    values, ids = torch.topk(scores, k + 1, dim=1)
    # topk keeps an arbitrary subset of the items tied at the k-th score. A tie crosses the
    # boundary exactly when the (k+1)-th score equals the k-th; those rows are re-ranked by a
    # full stable sort (exact, and rare for real models).
    boundary = values[:, k - 1]
    ambiguous = torch.nonzero((values[:, k] == boundary) & (boundary > -torch.inf))[:, 0]
    values, ids = values[:, :k], ids[:, :k]
    if ambiguous.numel():
        order = torch.sort(scores[ambiguous], dim=1, descending=True, stable=True).indices
        ids[ambiguous] = order[:, :k]
        values[ambiguous] = torch.gather(scores[ambiguous], 1, ids[ambiguous])
    return first_by_score_then_id(values, ids, k)


def _top_by_blocks(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``top_by_score_then_id`` of a wide row from the k blocks of ``TOPK_BLOCK`` columns with
    the highest maxima (plus the columns after the last whole block): a max-reduction is an
    order of magnitude cheaper than ``torch.topk`` over every column.

    Exact: the k highest block maxima are k distinct scores, so the k-th of them is at most the
    row's k-th best score, and every column scoring at least that lies in a block whose max does
    too. Unless the (k+1)-th block max ties the k-th, those are the k blocks chosen; rows with
    such a tie are ranked over every column instead.
    """
    rows, columns = scores.shape
    whole = columns - columns % TOPK_BLOCK
    maxima = scores[:, :whole].unflatten(1, (-1, TOPK_BLOCK)).amax(dim=2)
    top, blocks = torch.topk(maxima, k + 1, dim=1)
    # ascending blocks give ascending candidate columns, so candidate order is column order
    blocks = torch.sort(blocks[:, :k], dim=1).values
    within = torch.arange(TOPK_BLOCK, device=scores.device)
    candidates = (blocks[:, :, None] * TOPK_BLOCK + within).flatten(1)
    tail = torch.arange(whole, columns, device=scores.device).expand(rows, -1)
    candidates = torch.cat([candidates, tail], dim=1)
    values, picked = _top_by_topk(torch.gather(scores, 1, candidates), k)
    ids = torch.gather(candidates, 1, picked)
    tied = torch.nonzero((top[:, k] == top[:, k - 1]) & (top[:, k - 1] > -torch.inf))[:, 0]
    if tied.numel():
        values[tied], ids[tied] = _top_by_topk(scores[tied], k)
    return values, ids


def first_by_score_then_id(
    values: torch.Tensor, ids: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first k of each row's (value, id) pairs in (value desc, id asc) order: sorted by id,
    then stably by value, so ties read lower id first."""
    ids, by_id = torch.sort(ids, dim=1)
    values = torch.gather(values, 1, by_id)
    values, by_score = torch.sort(values, dim=1, descending=True, stable=True)
    return values[:, :k], torch.gather(ids, 1, by_score[:, :k])


def topk_lower_id_first(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k (scores, item ids) per row ordered by (score desc, id asc); -inf entries get id 0."""
    values, ids = top_by_score_then_id(scores, k)
    return values, ids.masked_fill_(values == -torch.inf, 0)
