"""Token scores, optimal tokens, margins, SVM-neighbours, local optimality (§2.1, §2.5)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsvm.theory.svm import solve_frobenius
from attnsvm.theory.tokens import (
    is_locally_optimal,
    locally_optimal_sequences,
    margins,
    optimal_tokens,
    selected_tokens,
    self_attention_queries,
    svm_neighbors,
    token_scores,
)


def _unit(a):
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def _instance(seed, n, T, d):
    rng = np.random.default_rng(seed)
    X = _unit(rng.standard_normal((n, T, d)))
    Z = _unit(rng.standard_normal((n, d)))
    v = _unit(rng.standard_normal(d))
    Y = np.where(rng.standard_normal(n) > 0, 1.0, -1.0)
    return X, Z, Y, v


# one sequence, three tokens in R^2, query e1: logits of W = I are the first coordinates
X_HAND = np.array([[[1.0, 0.0], [0.5, 2.0], [-1.0, 1.0]]])
Z_HAND = np.array([[1.0, 0.0]])


def test_token_scores_by_hand():
    X = np.array([[[1.0, 2.0], [3.0, -1.0]], [[0.0, 1.0], [2.0, 2.0]]])
    scores = token_scores(X, np.array([1.0, -1.0]), np.array([1.0, 1.0]))
    np.testing.assert_array_equal(scores, [[3.0, 2.0], [-1.0, -4.0]])
    np.testing.assert_array_equal(optimal_tokens(scores), [0, 0])


def test_optimal_and_selected_tokens_take_the_first_index_on_ties():
    scores = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    np.testing.assert_array_equal(optimal_tokens(scores), [1, 0])
    np.testing.assert_array_equal(selected_tokens(np.array([[0.2, 0.4, 0.4]])), [1])


def test_margins_by_hand_and_inf_at_the_selected_token():
    # margins (x_alpha - x_t)^T W z with W = I, alpha = 0: 1 - 0.5 and 1 - (-1)
    got = margins(X_HAND, Z_HAND, [0], np.eye(2))
    np.testing.assert_array_equal(got, [[np.inf, 0.5, 2.0]])
    W = np.array([[2.0, 0.0], [1.0, 0.0]])  # W z = (2, 1): logits 2, 3, -1
    np.testing.assert_array_equal(margins(X_HAND, Z_HAND, [1], W), [[1.0, np.inf, 4.0]])
    np.testing.assert_array_equal(svm_neighbors(X_HAND, Z_HAND, [1], W), [[True, False, False]])


def test_local_optimality_by_hand():
    scores = np.array([[0.0, 1.0, 5.0], [2.0, 1.0, 0.0]])
    alpha = np.array([1, 0])
    # token 2 of sequence 0 scores higher than the selected token but is not a neighbour
    neighbors = np.array([[True, False, False], [False, True, True]])
    assert is_locally_optimal(scores, alpha, neighbors)
    neighbors[0, 2] = True
    np.testing.assert_array_equal(
        locally_optimal_sequences(scores, alpha, neighbors), [False, True]
    )
    assert not is_locally_optimal(scores, alpha, neighbors)
    with pytest.raises(ValueError, match="own neighbour"):
        is_locally_optimal(scores, alpha, np.array([[False, True, False], [False] * 3]))


@settings(max_examples=25)
@given(
    seed=st.integers(0, 2**32 - 1), n=st.integers(1, 6), T=st.integers(2, 8), d=st.integers(6, 10)
)
def test_opt_is_locally_optimal_when_feasible(seed, n, T, d):
    """theory.md §2.5: the global optimum beats every token, so certainly its neighbours."""
    X, Z, Y, v = _instance(seed, n, T, d)
    scores = token_scores(X, Y, v)
    opt = optimal_tokens(scores)
    result = solve_frobenius(X, Z, opt)
    assert result.status == "optimal"  # d >= n: always feasible for distinct unit tokens
    neighbors = svm_neighbors(X, Z, opt, result.W)
    np.testing.assert_array_equal(neighbors, result.support)
    assert is_locally_optimal(scores, opt, neighbors)


def test_self_attention_queries_copy_a_token():
    X, *_ = _instance(0, 3, 4, 5)
    Z = self_attention_queries(X, 2)
    np.testing.assert_array_equal(Z, X[:, 2])
    Z[0, 0] = 99.0
    assert X[0, 2, 0] != 99.0
    with pytest.raises(ValueError, match="k:"):
        self_attention_queries(X, 4)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: token_scores(np.ones((2, 3)), np.ones(2), np.ones(3)), "X"),
        (lambda: token_scores(np.ones((2, 3, 4)), np.ones(3), np.ones(4)), "Y"),
        (lambda: token_scores(np.ones((2, 3, 4)), np.ones(2), np.ones(3)), "v"),
        (lambda: margins(X_HAND, np.ones((2, 2)), [0], np.eye(2)), "Z"),
        (lambda: margins(X_HAND, Z_HAND, [3], np.eye(2)), "alpha"),
        (lambda: margins(X_HAND, Z_HAND, [-1], np.eye(2)), "alpha"),
        (lambda: margins(X_HAND, Z_HAND, [0.5], np.eye(2)), "alpha"),
        (lambda: margins(X_HAND, Z_HAND, [0, 1], np.eye(2)), "alpha"),
        (lambda: margins(X_HAND, Z_HAND, [0], np.eye(3)), "W"),
        (lambda: margins(X_HAND * np.nan, Z_HAND, [0], np.eye(2)), "X"),
        (lambda: svm_neighbors(X_HAND, Z_HAND, [0], np.eye(2), tol=-1.0), "tol"),
        (lambda: optimal_tokens(np.array(["a", "b"])), "scores"),
        (lambda: is_locally_optimal(np.ones((2, 3)), [0, 0], np.ones((2, 2), bool)), "neighbors"),
    ],
)
def test_bad_input_raises_a_value_error_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"^{name}:"):
        call()
