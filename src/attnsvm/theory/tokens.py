"""Token scores, optimal tokens, SVM-neighbours, locally-optimal selections (theory.md §2.1, §2.5).

Conventions (shared with :mod:`attnsvm.theory.svm`): ``X`` is ``(n, T, d)`` float64 tokens, ``Z``
is ``(n, d)`` query vectors (cross-attention; ``self_attention_queries`` gives ``z_i = x_{i,k}``),
``alpha`` is ``(n,)`` selected token indices, and the attention logits of sequence ``i`` are
``X_i @ W @ z_i``.
"""

from __future__ import annotations

import numpy as np

#: Default activity tolerance of :func:`svm_neighbors`: a constraint is active (its token is an
#: SVM-neighbour) when its margin is at most ``1 + NEIGHBOR_TOL`` (theory.md §2.5).
NEIGHBOR_TOL = 1e-5


def _float_array(value, name: str, ndim: int) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype == object or not (
        np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)
    ):
        raise ValueError(f"{name}: expected a real array, got dtype {array.dtype}")
    if array.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {array.shape}")
    array = array.astype(np.float64, copy=False)
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name}: contains NaN or infinite entries")
    return array


def check_tokens(X, Z) -> tuple[np.ndarray, np.ndarray]:
    """``X`` as ``(n, T, d)`` and ``Z`` as ``(n, d)`` float64 arrays, or a ValueError naming one."""
    X = _float_array(X, "X", 3)
    Z = _float_array(Z, "Z", 2)
    n, T, d = X.shape
    if n < 1 or T < 2 or d < 1:
        raise ValueError(f"X: need n >= 1 sequences of T >= 2 tokens in d >= 1, got {X.shape}")
    if Z.shape != (n, d):
        raise ValueError(f"Z: expected shape {(n, d)} (one query per sequence), got {Z.shape}")
    return X, Z


def check_indices(alpha, n: int, T: int, name: str = "alpha") -> np.ndarray:
    """``alpha`` as an ``(n,)`` int64 array of token indices in ``[0, T)``, or a ValueError."""
    array = np.asarray(alpha)
    if array.shape != (n,):
        raise ValueError(
            f"{name}: expected shape {(n,)} (one index per sequence), got {array.shape}"
        )
    integral = np.issubdtype(array.dtype, np.integer) or (
        np.issubdtype(array.dtype, np.floating) and np.all(array == np.round(array))
    )
    if not integral:
        raise ValueError(f"{name}: expected integer token indices, got dtype {array.dtype}")
    array = array.astype(np.int64)
    if np.any(array < 0) or np.any(array >= T):
        bad = int(np.flatnonzero((array < 0) | (array >= T))[0])
        raise ValueError(f"{name}: index {array[bad]} of sequence {bad} is outside [0, {T})")
    return array


def check_matrix(W, d: int, name: str = "W") -> np.ndarray:
    """``W`` as a ``(d, d)`` float64 array, or a ValueError naming it."""
    W = _float_array(W, name, 2)
    if W.shape != (d, d):
        raise ValueError(f"{name}: expected shape {(d, d)}, got {W.shape}")
    return W


def self_attention_queries(X, k: int = 0) -> np.ndarray:
    """The self-attention queries ``z_i = x_{i,k}`` as an ``(n, d)`` array (a copy)."""
    X = _float_array(X, "X", 3)
    T = X.shape[1]
    if not -T <= k < T:
        raise ValueError(f"k: token index {k} is outside [-{T}, {T})")
    return X[:, k].copy()


def token_scores(X, Y, v) -> np.ndarray:
    """``gamma_it = Y_i v^T x_it`` as an ``(n, T)`` array (theory.md §2.1)."""
    X = _float_array(X, "X", 3)
    n, _, d = X.shape
    Y = _float_array(Y, "Y", 1)
    v = _float_array(v, "v", 1)
    if Y.shape != (n,):
        raise ValueError(f"Y: expected shape {(n,)} (one label per sequence), got {Y.shape}")
    if v.shape != (d,):
        raise ValueError(f"v: expected shape {(d,)}, got {v.shape}")
    return Y[:, None] * (X @ v)


def optimal_tokens(scores) -> np.ndarray:
    """``opt_i = argmax_t scores_it`` (the first index on ties) for any ``(n, T)`` score matrix."""
    scores = _float_array(scores, "scores", 2)
    return np.argmax(scores, axis=1)


def selected_tokens(probs) -> np.ndarray:
    """The token each sequence attends to most, ``argmax_t s_it`` (first index on ties)."""
    probs = _float_array(probs, "probs", 2)
    return np.argmax(probs, axis=1)


def margins(X, Z, alpha, W) -> np.ndarray:
    """``(x_{i,alpha_i} - x_it)^T W z_i`` as an ``(n, T)`` array; ``+inf`` at ``t = alpha_i``.

    ``+inf`` marks "no constraint": ``margins(...).min(axis=1)`` is then the smallest margin of
    each sequence and ``margins(...) <= 1 + tol`` never flags the selected token itself.
    """
    X, Z = check_tokens(X, Z)
    n, T, d = X.shape
    alpha = check_indices(alpha, n, T)
    W = check_matrix(W, d)
    logits = np.einsum("itd,id->it", X, Z @ W.T)
    rows = np.arange(n)
    result = logits[rows, alpha][:, None] - logits
    result[rows, alpha] = np.inf
    return result


def svm_neighbors(X, Z, alpha, W, tol: float = NEIGHBOR_TOL) -> np.ndarray:
    """SVM-neighbours: the ``(n, T)`` mask of active constraints, margin ``<= 1 + tol`` (§2.5).

    ``W`` should be the Att-SVM solution for ``alpha`` (theory.md uses ``tol = 1e-5``).
    """
    if not tol >= 0:
        raise ValueError(f"tol: expected a non-negative tolerance, got {tol}")
    return margins(X, Z, alpha, W) <= 1.0 + tol


def locally_optimal_sequences(scores, alpha, neighbors) -> np.ndarray:
    """Per sequence: does the selected token beat every SVM-neighbour in score (strictly)?"""
    scores = _float_array(scores, "scores", 2)
    n, T = scores.shape
    alpha = check_indices(alpha, n, T)
    neighbors = np.asarray(neighbors)
    if neighbors.shape != (n, T) or neighbors.dtype != bool:
        raise ValueError(
            f"neighbors: expected an {(n, T)} bool mask, got {neighbors.dtype} {neighbors.shape}"
        )
    if np.any(neighbors[np.arange(n), alpha]):
        raise ValueError("neighbors: the selected token alpha_i cannot be its own neighbour")
    selected = scores[np.arange(n), alpha][:, None]
    return np.all(~neighbors | (selected > scores), axis=1)


def is_locally_optimal(scores, alpha, neighbors) -> bool:
    """Definition 2 (§2.5): ``gamma_{i,alpha_i} > gamma_it`` for every i and neighbour t."""
    return bool(np.all(locally_optimal_sequences(scores, alpha, neighbors)))
