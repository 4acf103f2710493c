"""The exact top-k of a wide catalogue found from bfloat16 estimates of its scores.

A block whose scores are ``hidden @ table.T (+ bias)`` in float32 is ranked range by range from
bfloat16 products, which run at three times the float32 product's speed on CPUs with
AVX512-BF16 or AMX; only the few items whose estimate could reach a row's top-k are then
scored in float32, one (row, item) pair at a time.

Exact: an estimate differs from the float32 score by at most ``bound`` (``ESTIMATE_ERROR`` ×
‖h‖·max‖t‖ + the same share of max |bias|): bfloat16 rounds each operand to 2⁻⁸ of itself and
the product to 2⁻⁸ of itself, so the difference stays below 3·2⁻⁸ of Σ|hᵢtᵢ| ≤ ‖h‖‖t‖, plus the
float32 sums' error (K·2⁻²⁴ of the same), and the constant leaves 2.6× headroom on top. An item
of a row's top-k scores at least the k-th best score so far, and at least the k-th best of its
own range, which is at least the k-th highest of the range's block maxima of estimates less one
bound; so its estimate is at least the larger of (k-th so far − bound, k-th block maximum − 2
bounds). Every item whose estimate reaches that threshold is scored in float32 and ranked by
those scores, so the top-k is the float32 top-k. A range where the threshold admits more than
``MAX_HOT_BLOCKS`` blocks a row (scores nearly all equal) is scored in float32 whole instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnsvm.rec.eval.topk import first_by_score_then_id

#: an estimate's largest difference from the float32 score, as a share of ‖h‖·max‖t‖ (see above)
ESTIMATE_ERROR = 2**-5
#: items per block of estimates whose maximum decides whether the block is looked into
ESTIMATE_BLOCK = 64
#: blocks per row, on average over a range's rows, that may pass the threshold before the range
#: is scored in float32 instead (memory stays within a few range buffers)
MAX_HOT_BLOCKS = 32


def estimates_available(device: torch.device) -> bool:
    """bfloat16 products are worth their second pass on this device: a CPU with AVX512-BF16 or
    AMX (elsewhere they emulate bfloat16 and run slower than float32)."""
    cpu = torch.cpu
    native = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return device.type == "cpu" and any(getattr(cpu, name, lambda: False)() for name in native)


@dataclass(frozen=True)
class Estimates:
    """Estimates and exact float32 scores of a block of rows: ``hidden (rows, d)`` against
    ``table (items + 1, d)`` plus ``bias``; ``table_bf16`` is the table in bfloat16, made once
    for all blocks (``bfloat16_table``)."""

    hidden: torch.Tensor
    table: torch.Tensor
    table_bf16: torch.Tensor
    bias: torch.Tensor | None
    bound: torch.Tensor
    hidden_bf16: torch.Tensor

    @classmethod
    def of(
        cls,
        hidden: torch.Tensor,
        table: torch.Tensor,
        table_bf16: tuple[torch.Tensor, float],
        bias: torch.Tensor | None,
    ) -> Estimates | None:
        """The estimates of ``hidden``'s scores, or None where a hidden state is not finite (the
        float32 scores then carry the NaN to the ranker's check)."""
        if not bool(torch.isfinite(hidden).all()):
            return None
        table_bf16, scale = table_bf16
        bound = ESTIMATE_ERROR * (torch.linalg.vector_norm(hidden, dim=1) * scale)
        if bias is not None:
            bound = bound + ESTIMATE_ERROR * bias.abs().max()
        return cls(hidden, table, table_bf16, bias, bound, hidden.to(torch.bfloat16))

    def estimate(self, start: int, stop: int) -> torch.Tensor:
        """``(stop − start, rows)`` estimates of items start..stop − 1 (items × rows: the
        product's fastest layout)."""
        product = torch.mm(self.table_bf16[start:stop], self.hidden_bf16.T)
        if self.bias is None:
            return product
        return product.float() + self.bias[start:stop, None]

    def exact(self, rows: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """Float32 scores of the (row, item) pairs."""
        scores = (self.hidden[rows] * self.table[items]).sum(dim=1)
        return scores if self.bias is None else scores + self.bias[items]

    def candidates(
        self, start: int, stop: int, exclusions, k: int, kth_so_far: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The top-k ``(scores, item ids)`` of items start..stop − 1 among those that may enter
        each row's top-k, as ``ranking.range_top`` gives them (at most k columns; -inf and id 0
        after a row's own), with ``exclusions`` applied and never the padding id; None where too
        many may (score the range in float32).
        ``kth_so_far``: each row's k-th best float32 score over the items before ``start``."""
        estimates = self.estimate(start, stop)
        if start == 0:
            estimates[0] = -torch.inf  # the padding id
        exclusions.apply(estimates.T, start)
        width, rows = estimates.shape
        whole = width - width % ESTIMATE_BLOCK
        maxima = estimates[:whole].unflatten(0, (-1, ESTIMATE_BLOCK)).amax(dim=1)
        if whole < width:
            maxima = torch.cat([maxima, estimates[whole:].amax(dim=0, keepdim=True)])
        maxima = maxima.float()
        kth_block = torch.full((rows,), -torch.inf)
        if maxima.shape[0] >= k:
            kth_block = torch.topk(maxima, k, dim=0).values[k - 1]
        threshold = torch.maximum(kth_so_far - self.bound, kth_block - 2 * self.bound)
        hot = (maxima >= threshold) & (maxima > -torch.inf)
        if int(hot.sum()) > MAX_HOT_BLOCKS * rows:
            return None
        blocks, block_rows = torch.nonzero(hot, as_tuple=True)
        items = (blocks[:, None] * ESTIMATE_BLOCK + torch.arange(ESTIMATE_BLOCK)).flatten()
        item_rows = block_rows.repeat_interleave(ESTIMATE_BLOCK)
        inside = items < width
        items, item_rows = items[inside], item_rows[inside]
        values = estimates[items, item_rows].float()
        keep = (values >= threshold[item_rows]) & (values > -torch.inf)
        items, item_rows = items[keep] + start, item_rows[keep]
        return first_by_score_then_id(
            *by_row(item_rows, items, self.exact(item_rows, items), rows), k
        )


def by_row(
    rows: torch.Tensor, items: torch.Tensor, scores: torch.Tensor, count: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, item, score) triples as ``(count, widest)`` scores and item ids, -inf and 0 after
    each row's own."""
    order = torch.argsort(rows, stable=True)
    rows, items, scores = rows[order], items[order], scores[order]
    per_row = torch.bincount(rows, minlength=count)
    starts = torch.cumsum(per_row, dim=0) - per_row
    column = torch.arange(rows.numel()) - starts[rows]
    widest = int(per_row.max()) if count else 0
    values = torch.full((count, widest), -torch.inf)
    ids = torch.zeros((count, widest), dtype=torch.int64)
    values[rows, column] = scores
    ids[rows, column] = items
    return values, ids


def bfloat16_table(table: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The table in bfloat16 and the largest float32 row norm (the bound's ``max‖t‖``)."""
    return table.to(torch.bfloat16), float(torch.linalg.vector_norm(table, dim=1).max())
