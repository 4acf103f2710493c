"""Random Att-SVM instances shared by the theory tests (test_svm, test_equivalence)."""

import numpy as np


def unit(a):
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def instances(seed, count, n, T, d, *, cross=True):
    """``count`` instances of the local_converge generator style, drawn in one vectorised call:
    unit-norm Gaussian tokens, unit queries (or z_i = x_i0), alpha = opt."""
    rng = np.random.default_rng(seed)
    X = unit(rng.standard_normal((count, n, T, d)))
    Z = unit(rng.standard_normal((count, n, d))) if cross else X[:, :, 0].copy()
    v = unit(rng.standard_normal((count, d)))
    Y = np.where(rng.standard_normal((count, n)) > 0, 1.0, -1.0)
    scores = Y[:, :, None] * np.einsum("cntd,cd->cnt", X, v)
    return [(X[c], Z[c], scores[c].argmax(axis=1)) for c in range(count)]
