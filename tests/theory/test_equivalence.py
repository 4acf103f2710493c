"""SVM-equivalence (theory.md §2.8) against base_nonlinear.py's problems in cvxpy."""

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.theory.svm_instances import instances, unit

from attnsvm.theory.equivalence import equivalence_pairs, solve_svm_equivalence
from attnsvm.theory.svm import CLARABEL_ACCURATE, solve_frobenius


def _equivalence_reference(X, Z, probs, W_gd, O):
    """base_nonlinear.py's two problems, vectorised, in cvxpy with accurate Clarabel."""
    d = X.shape[2]
    (i, t, tau), (eq_i, eq_t, eq_ref) = equivalence_pairs(O)
    ineq = np.einsum("kd,ke->kde", X[i, t] - X[i, tau], Z[i]).reshape(len(i), d * d)
    eq = np.einsum("kd,ke->kde", X[eq_i, eq_t] - X[eq_i, eq_ref], Z[eq_i]).reshape(len(eq_i), d * d)
    W = cp.Variable(d * d)
    constraints = [ineq @ W >= 1] + ([eq @ W == 0] if len(eq_i) else [])
    cp.Problem(cp.Minimize(cp.sum_squares(W)), constraints).solve(
        solver="CLARABEL", **CLARABEL_ACCURATE
    )
    if W.value is None:
        return None, None
    log_ratio = np.log(probs[eq_i, eq_t] / probs[eq_i, eq_ref])
    W_fin = (np.linalg.pinv(eq) @ log_ratio if len(eq_i) else np.zeros(d * d)).reshape(d, d)
    return W.value.reshape(d, d), W_fin


def _softmax_instance(seed, n, T, d, scale):
    """Probabilities of a random W: a few tokens keep mass, the others are masked."""
    rng = np.random.default_rng(seed)
    X, Z = unit(rng.standard_normal((n, T, d))), unit(rng.standard_normal((n, d)))
    W_gd = scale * rng.standard_normal((d, d))
    logits = np.einsum("itd,id->it", X, Z @ W_gd.T)
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    return X, Z, probs / probs.sum(axis=1, keepdims=True), W_gd


@settings(max_examples=30)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 4),
    T=st.integers(2, 6),
    d=st.integers(4, 10),
    scale=st.floats(2.0, 20.0),
)
def test_svm_equivalence_matches_the_cvxpy_reference(seed, n, T, d, scale):
    X, Z, probs, W_gd = _softmax_instance(seed, n, T, d, scale)
    O = probs >= 1e-3
    if O.all():
        with pytest.raises(ValueError, match=r"^probs:"):
            solve_svm_equivalence(X, Z, probs, W_gd)
        return
    result = solve_svm_equivalence(X, Z, probs, W_gd)
    np.testing.assert_array_equal(result.O, O)
    W_dir, W_fin = _equivalence_reference(X, Z, probs, W_gd, O)
    assert result.status == ("optimal" if W_dir is not None else "infeasible")
    if W_dir is None:
        return
    assert np.linalg.norm(result.W_dir - W_dir) <= 1e-6 * np.linalg.norm(W_dir)
    np.testing.assert_allclose(result.W_fin, W_fin, atol=1e-8 * (1 + np.abs(W_fin).max()))
    assert abs(np.sum(result.W_fin * result.W_dir)) <= 1e-8 * np.linalg.norm(result.W_dir) * (
        1 + np.linalg.norm(result.W_fin)
    )
    R = np.sum((W_gd - result.W_fin) * result.W_dir) / np.sum(result.W_dir**2)
    assert pytest.approx(R, rel=1e-12) == result.R
    np.testing.assert_allclose(result.W_eq, result.W_fin + result.R * result.W_dir)
    assert max(result.direction.kkt.values()) <= 1e-8


def test_svm_equivalence_with_single_selections_is_the_att_svm():
    X, Z, alpha = instances(2, 1, 3, 5, 6)[0]
    probs = np.full((3, 5), 1e-9)
    probs[np.arange(3), alpha] = 1.0
    W_gd = np.eye(6)
    result = solve_svm_equivalence(X, Z, probs, W_gd)
    np.testing.assert_allclose(result.W_dir, solve_frobenius(X, Z, alpha).W, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(result.W_fin, 0.0)
    assert pytest.approx(np.sum(W_gd * result.W_dir) / np.sum(result.W_dir**2)) == result.R


def test_svm_equivalence_reports_infeasible_instead_of_raising():
    # d = 1: sequence 0 needs 2w >= 1, sequence 1 (mirrored tokens) needs -2w >= 1
    X = np.array([[[1.0], [1.0], [-1.0]], [[1.0], [-1.0], [-1.0]]])
    probs = np.array([[0.5, 0.5 - 1e-9, 1e-9], [1e-9, 0.5, 0.5 - 1e-9]])
    result = solve_svm_equivalence(X, np.ones((2, 1)), probs, np.eye(1))
    assert result.status == "infeasible" and result.W_eq is None
    assert result.direction.certificate.sum() == pytest.approx(1.0)


def test_svm_equivalence_equalities_spanning_everything_are_infeasible():
    """n = 4, d = 4: 18 equalities span all of R^{4x4}, so W = 0 and no margin can hold."""
    X, Z, probs, W_gd = _softmax_instance(0, 4, 6, 4, 3.0)
    assert solve_svm_equivalence(X, Z, probs, W_gd).status == "infeasible"
    assert _equivalence_reference(X, Z, probs, W_gd, probs >= 1e-3)[0] is None


def test_svm_equivalence_rejects_bad_probabilities():
    X, Z, _ = instances(2, 1, 2, 3, 4)[0]
    with pytest.raises(ValueError, match=r"^probs:"):
        solve_svm_equivalence(X, Z, np.full((2, 3), 1 / 3), np.eye(4))
    with pytest.raises(ValueError, match=r"^probs:"):
        solve_svm_equivalence(X, Z, np.full((2, 4), 1 / 4), np.eye(4))
    with pytest.raises(ValueError, match=r"^W_gd:"):
        solve_svm_equivalence(X, Z, np.eye(2, 3), np.eye(3))
