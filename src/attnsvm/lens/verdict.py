"""The lens's plain verdict: what each head attends to, in the data's own terms.

Computed from what the lens already extracted (the last query's attention over each sampled
history), before any Att-SVM term: per head, the share of its weight on the most recent item,
the share on the single item it attends to most and where that item lies (positions back from
the most recent one), and, where the data's items have categories, the share on items of the
same category as the true next item. One sentence per head says the dominant pattern:

- **the most recent item**: at least ``MOSTLY`` of the weight on it;
- **one earlier item at a fixed distance**: ``MOSTLY`` of the weight on the top item, which is
  the same number of positions back in at least ``FIXED`` of the sequences;
- **a single "trigger" item**: ``MOSTLY`` of the weight on one item whose position varies (what
  matters is which item, not where it is);
- **items of the target's category**: at least ``MOSTLY`` of the weight on them, where that is
  more than their share of the history;
- otherwise **spread**: the weight falls over many items (the mean share per position back).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Share of a head's attention weight that makes a pattern "mostly".
MOSTLY = 0.5
#: Share of sequences whose top item is at the same distance that makes a position "fixed".
FIXED = 0.6


@dataclass(frozen=True)
class HeadVerdict:
    """One head's pattern and the numbers behind it (shares are means over the sequences)."""

    layer: int
    head: int
    pattern: str  # "recent" | "position" | "trigger" | "category" | "spread"
    sentence: str
    recent: float  # weight on the most recent item
    top: float  # weight on the item attended to most
    top_back: dict[int, float]  # positions back of the top item → share of sequences
    same_category: float | None  # weight on items of the true next item's category
    category_tokens: float | None  # share of history items of that category
    top_is_best: float | None  # the top item is the one that most raises the true next item

    def summary(self) -> dict:
        return {
            "layer": self.layer,
            "head": self.head,
            "pattern": self.pattern,
            "sentence": self.sentence,
            "recent": self.recent,
            "top": self.top,
            "top_positions_back": {str(k): v for k, v in self.top_back.items()},
            "same_category": self.same_category,
            "category_tokens": self.category_tokens,
            "top_is_best": self.top_is_best,
        }


def _pct(share: float) -> str:
    return f"{100 * share:.0f} %"


def head_verdict(
    layer: int,
    head: int,
    attention: np.ndarray,
    valid: np.ndarray,
    windows: np.ndarray,
    targets: np.ndarray,
    categories: np.ndarray | None = None,
    best: np.ndarray | None = None,
) -> HeadVerdict:
    """The verdict of one head: ``attention``/``valid``/``windows`` ``(n, L)`` (the last query's
    weights, real tokens, item ids of left-padded histories), ``targets`` ``(n,)`` the true next
    items, ``categories`` an item id → category code array (negative: none) or None, ``best``
    ``(n,)`` the position of the item that most raises the true next item (a token score's
    optimum) or None."""
    n, L = valid.shape
    rows = np.arange(n)
    weights = np.where(valid, attention, 0.0)
    weights = weights / np.maximum(weights.sum(1, keepdims=True), 1e-300)
    last = L - 1 - np.argmax(valid[:, ::-1], axis=1)  # the most recent real token
    recent = float(weights[rows, last].mean())
    top_position = np.argmax(np.where(valid, weights, -np.inf), axis=1)
    top = float(weights[rows, top_position].mean())
    backs, counts = np.unique(last - top_position, return_counts=True)
    top_back = {int(b): float(c / n) for b, c in zip(backs, counts, strict=True)}
    common_back = max(top_back, key=top_back.get)
    same = tokens = None
    if categories is not None:
        item_category = categories[windows]
        target_category = categories[targets][:, None]
        match = valid & (item_category == target_category) & (target_category >= 0)
        known = categories[targets] >= 0
        if known.any():
            same = float((weights * match).sum(1)[known].mean())
            tokens = float((match.sum(1) / np.maximum(valid.sum(1), 1))[known].mean())
    top_is_best = None if best is None else float(np.mean(top_position == best))
    name = f"head {layer}.{head}"
    if recent >= MOSTLY:
        pattern = "recent"
        sentence = f"{name} attends mostly to the most recent item ({_pct(recent)} of its weight)"
    elif top >= MOSTLY and top_back[common_back] >= FIXED:
        pattern = "position"
        sentence = (
            f"{name} attends mostly to the item {common_back} position"
            f"{'s' if common_back != 1 else ''} before the most recent one ({_pct(top)} of its "
            f"weight on one item, at that distance in {_pct(top_back[common_back])} of histories)"
        )
    elif top >= MOSTLY:
        pattern = "trigger"
        spread = sorted(top_back, key=top_back.get, reverse=True)[:3]
        sentence = (
            f"{name} attends mostly to a single 'trigger' item ({_pct(top)} of its weight on "
            f"one item, whose position varies: most often "
            f"{', '.join(str(b) for b in spread)} positions before the most recent one)"
        )
    elif same is not None and same >= MOSTLY and same > tokens:
        pattern = "category"
        sentence = (
            f"{name} attends mostly to items of the same category as the next item "
            f"({_pct(same)} of its weight, on {_pct(tokens)} of the history's items)"
        )
    else:
        pattern = "spread"
        sentence = (
            f"{name} spreads its attention: {_pct(recent)} of its weight on the most recent "
            f"item, {_pct(top)} on the item it attends to most"
        )
    if same is not None and pattern != "category":
        sentence += (
            f"; {_pct(same)} of its weight is on items of the next item's category "
            f"({_pct(tokens)} of the history's items)"
        )
    if top_is_best is not None:
        sentence += (
            f"; the item it attends to most is the one that would most raise the true next "
            f"item's score in {_pct(top_is_best)} of histories"
        )
    return HeadVerdict(
        layer, head, pattern, sentence + ".", recent, top, top_back, same, tokens, top_is_best
    )


def category_codes(item_ids: np.ndarray, categories: dict[str, str]) -> np.ndarray | None:
    """Internal item id → category code (−1: none; index 0 is padding), or None without any
    category for the catalogue ``item_ids`` (external ids by internal id)."""
    if not categories:
        return None
    names: dict[str, int] = {}
    codes = np.full(len(item_ids), -1, dtype=np.int64)
    for internal, external in enumerate(np.asarray(item_ids).tolist()):
        category = categories.get(str(external)) if internal > 0 else None
        if category is not None:
            codes[internal] = names.setdefault(category, len(names))
    return codes if (codes >= 0).any() else None
