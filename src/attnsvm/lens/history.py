"""The lens on one history, fast enough to answer a click: every head's attention at the last
position, the token scores toward each of a few candidate next items, and the Att-SVM's reading.

The report (``run.py``) reads a sample of test users against their true next item. A history
typed into the explorer has no true next item, so its tokens are scored toward *candidates*
(the model's own top recommendations, or any items asked for): how much each history item,
attended alone by that head, would raise that candidate's logit (``scores.py``'s linear and
counterfactual scores).

Per head, the selected token (argmax attention) is read as the paper does (``analysis.py``):
**global** where it is the score's argmax, **local** where it beats every SVM-neighbour (the
active constraints of the Frobenius Att-SVM of the selection; the soft-margin one, C = 1, where
no ``W`` separates it), **neither** otherwise. The neighbours depend on the selection only, so
one Att-SVM per head serves every candidate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from attnsvm.lens.analysis import classify
from attnsvm.lens.extract import LensError, extract, head_grid
from attnsvm.lens.scores import counterfactual_scores, linear_scores
from attnsvm.lens.solve import SOFT_MARGIN_C, Pairs, conic_svm
from attnsvm.rec.models import SequentialRecommender
from attnsvm.theory import svm

SCORE_KINDS = ("linear", "counterfactual")


@dataclass
class HeadReading:
    """One head on one history; token lists follow ``HistoryReading.tokens``."""

    layer: int
    head: int
    keyed: list[bool]  # the token is among this layer's keys (STRec drops some)
    attention: list[float]  # the last query's attention weights (0 off the keys)
    selected: int  # token index of the largest weight
    svm: str  # "hard" | "soft" (no W separates the selection) | "none" (a single key)
    neighbours: list[int]  # token indices of the SVM-neighbours of the selection
    scores: dict[str, list[list[float | None]]]  # kind → per candidate, per token (None: no key)
    optimal: dict[str, list[int]]  # kind → per candidate, the best token
    classes: dict[str, list[str]]  # kind → per candidate, "global" | "local" | "neither"

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class HistoryReading:
    tokens: list[int]  # internal item ids the model read, oldest first (BERT4Rec: + mask token)
    candidates: list[int]  # internal ids the tokens were scored toward
    heads: list[HeadReading]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "tokens": self.tokens,
            "candidates": self.candidates,
            "heads": [h.to_dict() for h in self.heads],
            "notes": self.notes,
        }


def read_history(
    model64: SequentialRecommender,
    window: np.ndarray,
    candidates: np.ndarray,
    extras: dict[str, torch.Tensor] | None = None,
) -> HistoryReading:
    """Every head of ``model64`` (a float64 copy, ``extract.float64_copy``) on one left-padded
    ``window`` (L,) of internal ids, its tokens scored toward each of ``candidates`` (internal
    ids); ``extras``: the model's extra inputs for this one row (SSE-PT's ``users``)."""
    if model64.attention_modules() == []:
        raise LensError(f"{type(model64).__name__} has no attention layers")
    candidates = np.asarray(candidates, dtype=np.int64)
    if candidates.size == 0:
        raise LensError("no candidate items to score the history's tokens toward")
    item_seq = model64.scoring_input(torch.as_tensor(window, dtype=torch.long)[None])
    columns = np.flatnonzero(item_seq[0].numpy() != 0)
    extras = extras or {}
    views = extract(model64, item_seq, head_grid(model64, None, None), extras)
    # one row per candidate: the scores take one target per row
    repeated = item_seq.repeat(len(candidates), 1)
    repeated_extras = {
        name: value.repeat(len(candidates), *[1] * (value.ndim - 1))
        for name, value in extras.items()
    }
    notes: list[str] = []
    heads = []
    for view in views:
        scores = {}
        for kind, score in zip(SCORE_KINDS, (linear_scores, counterfactual_scores), strict=True):
            try:
                scores[kind] = score(
                    model64, repeated, candidates, view.layer, view.head, repeated_extras
                )[:, columns]
            except LensError as error:
                if str(error) not in notes:
                    notes.append(str(error))
        heads.append(_read_head(view, columns, scores))
    return HistoryReading(item_seq[0, columns].tolist(), candidates.tolist(), heads, notes)


def _read_head(view, columns: np.ndarray, scores: dict[str, np.ndarray]) -> HeadReading:
    valid = view.valid[0, columns]
    attention = view.attention[0, columns]
    selected = int(np.argmax(np.where(valid, attention, -np.inf)))
    kind, neighbours = _neighbours(view.X[0, columns], view.Z[0], valid, selected)
    optimal, classes, shown = {}, {}, {}
    for name, values in scores.items():
        rows = len(values)
        optimal[name] = np.argmax(np.where(valid, values, -np.inf), axis=1).tolist()
        classes[name] = classify(
            np.where(valid, values, np.nan),
            np.repeat(valid[None], rows, axis=0),
            np.full(rows, selected),
            np.repeat(neighbours[None], rows, axis=0),
        ).tolist()
        shown[name] = [
            [float(v) if ok else None for v, ok in zip(row, valid, strict=True)] for row in values
        ]
    return HeadReading(
        view.layer,
        view.head,
        valid.tolist(),
        attention.astype(float).tolist(),
        selected,
        kind,
        np.flatnonzero(neighbours).tolist(),
        shown,
        optimal,
        classes,
    )


def _neighbours(X: np.ndarray, z: np.ndarray, valid: np.ndarray, selected: int):
    """``(kind, (T,) mask)``: the SVM-neighbours of ``selected`` among the keyed tokens."""
    keys = np.flatnonzero(valid)
    mask = np.zeros(len(valid), dtype=bool)
    if len(keys) < 2:
        return "none", mask
    alpha = np.array([int(np.flatnonzero(keys == selected)[0])])
    result = svm.solve_frobenius(X[keys][None], z[None], alpha)
    if result.feasible:
        mask[keys] = result.support[0]
        mask[selected] = False
        return "hard", mask
    pairs = Pairs.build(X[None], z[None], valid[None], np.array([selected]))
    soft = conic_svm(pairs, "frobenius", SOFT_MARGIN_C)
    return "soft", soft.neighbours(pairs, (1, len(valid)))[0]
