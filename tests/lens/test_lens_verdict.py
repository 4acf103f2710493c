"""The lens's plain verdict (``attnsvm.lens.verdict``) and the reduced Att-SVM programs.

The verdict on a planted model is checked in ``test_lens_planted.py`` (the trained run is
shared); here each pattern is planted directly in the attention weights, and the conic
Att-SVM, now posed on the span of the differences and queries, is checked against the full
``p × p`` program it replaced (float64).
"""

from __future__ import annotations

import warnings

import cvxpy as cp
import numpy as np
import pytest

from attnsvm.lens.solve import Pairs, conic_svm
from attnsvm.lens.verdict import category_codes, head_verdict

N, L = 40, 10


def _histories(seed: int = 0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, L + 1, size=N)
    valid = np.arange(L)[None, :] >= (L - lengths)[:, None]
    windows = np.where(valid, rng.integers(1, 30, size=(N, L)), 0)
    return rng, valid, windows


def _attention(valid, focus, weight: float):
    """``weight`` on each row's ``focus`` position, the rest spread over the real tokens."""
    attention = np.where(valid, 1.0, 0.0)
    attention /= attention.sum(1, keepdims=True)
    attention *= 1.0 - weight
    attention[np.arange(len(focus)), focus] += weight
    return attention


def test_verdict_recent_item():
    _, valid, windows = _histories()
    v = head_verdict(
        0, 1, _attention(valid, np.full(N, L - 1), 0.6), valid, windows, windows[:, -1]
    )
    assert v.pattern == "recent"
    assert v.sentence.startswith("head 0.1 attends mostly to the most recent item (")
    assert v.recent > 0.6


def test_verdict_trigger_and_fixed_position():
    rng, valid, windows = _histories()
    trigger = L - 1 - rng.integers(1, 4, size=N)  # 1 to 3 positions back: varies
    v = head_verdict(1, 0, _attention(valid, trigger, 0.9), valid, windows, windows[:, -1])
    assert v.pattern == "trigger" and "single 'trigger' item" in v.sentence
    assert v.top > 0.9 and set(v.top_back) == {1, 2, 3}
    v = head_verdict(1, 0, _attention(valid, np.full(N, L - 3), 0.9), valid, windows, windows[:, 0])
    assert v.pattern == "position" and "the item 2 positions before" in v.sentence
    best = head_verdict(
        1, 0, _attention(valid, trigger, 0.9), valid, windows, windows[:, 0], None, trigger
    )
    assert best.top_is_best == 1.0 and "in 100 % of histories" in best.sentence


def test_verdict_same_category():
    rng, valid, windows = _histories()
    categories = np.arange(30) % 3  # item → category
    categories[0] = -1
    targets = rng.integers(1, 30, size=N)
    match = valid & (categories[windows] == categories[targets][:, None])
    attention = np.where(match, 1.0, 0.02) * valid
    attention /= attention.sum(1, keepdims=True)
    v = head_verdict(0, 0, attention, valid, windows, targets, categories)
    assert v.pattern == "category" and "same category as the next item" in v.sentence
    assert v.same_category > v.category_tokens
    flat = np.where(valid, 1.0, 0.0) / valid.sum(1, keepdims=True)
    v = head_verdict(0, 0, flat, valid, windows, targets, categories)
    assert v.pattern == "spread" and "of the next item's category" in v.sentence


def test_category_codes():
    codes = category_codes(np.array(["pad", "a", "b", "c"]), {"a": "x", "c": "x", "b": "y"})
    assert codes.tolist() == [-1, 0, 1, 0]
    assert category_codes(np.array(["pad", "a"]), {}) is None


def _full_program(pairs: Pairs, norm: str, C):
    """The program as posed before the span reduction: a full ``p × p`` variable."""
    delta = pairs.X[:, 0] - pairs.X[:, 1]
    W = cp.Variable((delta.shape[1],) * 2)
    margins = cp.sum(cp.multiply(delta, pairs.Z @ W.T), axis=1)
    objective = cp.norm(W, "fro") if norm == "frobenius" else cp.normNuc(W)
    if C is None:
        constraints = [margins >= 1]
    else:
        slack = cp.Variable(len(pairs), nonneg=True)
        objective, constraints = objective + C * cp.sum(slack), [margins >= 1 - slack]
    problem = cp.Problem(cp.Minimize(objective), constraints)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        problem.solve(solver="CLARABEL")
    return problem.value


@pytest.mark.parametrize("p", [6, 14])
@pytest.mark.parametrize("norm", ["frobenius", "nuclear"])
@pytest.mark.parametrize("C", [None, 1.0])
def test_span_reduced_program_equals_the_full_one(p, norm, C):
    rng = np.random.default_rng(p)
    n, length = 8, 5
    X = rng.normal(size=(n, length, p))
    X[:, :, -1] = 1.0  # the constant coordinate: no difference spans it
    Z = rng.normal(size=(n, p))
    Z[:, :2] = Z[:, 2:4]  # queries span less than p dimensions
    valid = np.ones((n, length), dtype=bool)
    if C is None:  # a feasible selection: each sequence's best token under a planted W
        alpha = np.argmax(np.einsum("ntp,pq,nq->nt", X, rng.normal(size=(p, p)), Z), axis=1)
    else:
        alpha = rng.integers(0, length, size=n)
    pairs = Pairs.build(X, Z, valid, alpha)
    solution = conic_svm(pairs, norm, C)
    full = _full_program(pairs, norm, C)
    total = solution.objective + (0.0 if C is None else C * solution.soft["slack_sum"])
    assert total == pytest.approx(full, rel=1e-5, abs=1e-7)
    assert solution.margins.min() >= (1.0 - 1e-9 if C is None else -np.inf)
