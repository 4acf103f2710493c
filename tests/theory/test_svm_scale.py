"""The solvers' large-problem paths on small instances: the corral factor's updates, Wolfe's bulk
minor cycles and weight-ordered refactorisations, the nuclear interior point's dropping of
inactive constraints and its working-set rounds, and the one-BLAS-thread policy.

Each path is forced on at a small size (its size thresholds lowered) and checked against the
exact small-problem path and against tight Clarabel; the full sizes, (1000, 50, 64) Frobenius
and (300, 50, 64) nuclear, run in ``benchmarks/theory_solvers.py`` and in the slow tests below.
"""

import warnings

import numpy as np
import pytest
from tests.theory.svm_instances import instances
from threadpoolctl import threadpool_info

from attnsvm.theory import _cholesky, _mnp, _sdp
from attnsvm.theory._compat import solve_official_style
from attnsvm.theory.instances import paper_instances
from attnsvm.theory.svm import solve_frobenius, solve_frobenius_cvxpy, solve_nuclear


def _spd(rng, size):
    features = rng.standard_normal((size, size + 8))
    return features @ features.T


def _assert_factor(factor: _cholesky.CorralFactor, M: np.ndarray) -> None:
    R = factor.buffer[: factor.size, : factor.size]
    assert factor.size == len(M)
    np.testing.assert_allclose(R.T @ R, M, rtol=0, atol=1e-11 * np.abs(M).max())
    assert np.all(R[np.tril_indices(len(M), -1)] == 0)  # upper triangular
    assert np.all(factor.buffer[: factor.size, factor.size :] == 0)  # the padding stays exact
    ones = np.linalg.solve(M, np.ones(len(M)))
    np.testing.assert_allclose(factor.inverse_ones(), ones, rtol=1e-8)


@pytest.mark.parametrize("seed", range(3))
def test_corral_factor_appends_deletions_and_refactorisation_stay_exact(seed):
    rng = np.random.default_rng(seed)
    M_all = _spd(rng, 420)
    order = list(range(300))
    factor = _cholesky.CorralFactor(capacity=16)
    for start in range(0, 300, 60):  # batches outgrow the buffer several times
        rows = order[:start]
        new = order[start : start + 60]
        assert factor.append_block(M_all[np.ix_(rows, new)], M_all[np.ix_(new, new)])
    _assert_factor(factor, M_all[np.ix_(order, order)])
    for positions in ([0], [299 - 1], [3, 4, 5, 100, 250], sorted(rng.choice(290, 40, False))):
        factor.delete(np.asarray(positions))
        order = [o for i, o in enumerate(order) if i not in set(positions)]
        _assert_factor(factor, M_all[np.ix_(order, order)])
    factor.delete(np.arange(factor.size - 10, factor.size))  # a pure truncation of the tail
    order = order[:-10]
    _assert_factor(factor, M_all[np.ix_(order, order)])
    order = list(rng.permutation(order))
    M = M_all[np.ix_(order, order)]
    factor.refactor(np.triu(M) + np.tril(np.full_like(M, np.nan), -1))  # reads the upper half
    _assert_factor(factor, M)
    with pytest.raises(np.linalg.LinAlgError):
        factor.refactor(-np.eye(5))
    _assert_factor(factor, M)  # a failed refactorisation leaves the factor as it was


def test_corral_factor_refuses_dependent_points():
    rng = np.random.default_rng(4)
    features = rng.standard_normal((6, 20))
    features[5] = features[3] + features[4] - features[2]  # in the span of the others
    M = features @ features.T
    factor = _cholesky.CorralFactor()
    assert factor.append_block(np.zeros((0, 5)), M[:5, :5])
    assert not factor.append_block(M[:5, 5:], M[5:, 5:])
    _assert_factor(factor, M[:5, :5])  # nothing appended


def _large_paths(monkeypatch, cutoff: int):
    """Take the bulk minor cycle and the reordering from corrals above ``cutoff`` points, and
    count how often each runs."""
    calls = {"refactor": 0, "bulk_drops": 0}
    refactor, delete = _cholesky.CorralFactor.refactor, _cholesky.CorralFactor.delete

    def counted_refactor(self, M):
        calls["refactor"] += 1
        return refactor(self, M)

    def counted_delete(self, positions):
        calls["bulk_drops"] += len(positions) > 1
        return delete(self, positions)

    monkeypatch.setattr(_mnp, "LARGE_CORRAL", cutoff)
    monkeypatch.setattr(_cholesky.CorralFactor, "refactor", counted_refactor)
    monkeypatch.setattr(_cholesky.CorralFactor, "delete", counted_delete)
    return calls


def _assert_kkt_equal(ours, reference, X, Z, alpha):
    assert ours.status == reference.status == "optimal"
    assert max(ours.kkt.values()) <= 1e-9
    assert np.linalg.norm(ours.W - reference.W) <= 1e-9 * np.linalg.norm(reference.W)
    accurate = solve_frobenius_cvxpy(X, Z, alpha)
    assert np.linalg.norm(ours.W - accurate.W) <= 1e-6 * np.linalg.norm(accurate.W)


PAPER = paper_instances(range(3), 60, 10, 16)
RANDOM = instances(17, 3, 40, 12, 12)


@pytest.mark.parametrize("reorder", [False, True])
@pytest.mark.parametrize(
    "problem", [(PAPER.X[s], PAPER.Z[s], PAPER.optimal()[s]) for s in range(3)] + RANDOM
)
def test_bulk_minor_cycles_and_reordering_give_the_exact_solution(monkeypatch, problem, reorder):
    """The corrals reach 100-170 points of 144-256 dimensions here (n > d, near the feasibility
    boundary like the benchmark's sizes): with the large-corral paths taken from 8 points on
    (bulk deletions; with ``reorder``, a weight-ordered refactorisation at every departure
    instead), the solution equals the exact small-problem path's (Wolfe's one-at-a-time
    cycle) and Clarabel's."""
    X, Z, alpha = problem
    exact = solve_frobenius(X, Z, alpha)
    calls = _large_paths(monkeypatch, 8)
    if reorder:
        monkeypatch.setattr(_mnp, "DELETION_FLOPS_PER_TAIL_ENTRY", 1e4)
    ours = solve_frobenius(X, Z, alpha)
    assert calls["refactor" if reorder else "bulk_drops"] >= 1
    _assert_kkt_equal(ours, exact, X, Z, alpha)


def test_a_bulk_step_without_progress_falls_back_to_wolfes_cycle(monkeypatch):
    """Every bulk minor cycle is refused (as if its corral had not lowered ``||u||``): Wolfe's
    exact cycle from a refactorised start must still give the exact solution."""
    X, Z, alpha = RANDOM[0]
    exact = solve_frobenius(X, Z, alpha)
    calls = _large_paths(monkeypatch, 8)
    minor_cycle = _mnp._minor_cycle

    def no_progress(kernel, factor, corral, mu, shift, bound):
        return minor_cycle(kernel, factor, corral, mu, shift, -np.inf)

    monkeypatch.setattr(_mnp, "_minor_cycle", no_progress)
    ours = solve_frobenius(X, Z, alpha)
    assert calls["refactor"] >= 1
    _assert_kkt_equal(ours, exact, X, Z, alpha)


def test_schur_matrix_upper_triangle_matches_the_definition():
    rng = np.random.default_rng(5)
    N, p, q = 40, 5, 4
    op = _sdp._Operator(rng.standard_normal((N, p)), rng.standard_normal((N, q)))
    Y, S = _spd(rng, p + q), _spd(rng, p + q)
    Sinv = np.linalg.inv(S)
    x, s = rng.random(N), rng.random(N)
    M = op.schur(Y, Sinv, x, s)
    F = [
        0.5 * (np.outer(u, v) + np.outer(v, u))
        for u, v in zip(
            np.hstack([op.delta, np.zeros((N, q))]),
            np.hstack([np.zeros((N, p)), op.zeta]),
            strict=True,
        )
    ]
    expected = np.array([[np.sum(Fk * (Y @ Fl @ Sinv)) for Fl in F] for Fk in F])
    expected += np.diag(x / s)
    upper = np.triu_indices(N)
    np.testing.assert_allclose(M[upper], expected[upper], rtol=1e-12, atol=1e-12)


def _nuclear_reference(X, Z, alpha):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Clarabel's "almost solved" is accurate to ~1e-9
        return solve_official_style(X, Z, alpha, fro=False, solver="CLARABEL")


@pytest.mark.parametrize("seed", range(2))
def test_nuclear_rounds_and_inactive_dropping_match_clarabel(seed):
    X, Z, alpha = instances(100 + seed, 1, 12, 12, 12)[0]
    ours = solve_nuclear(X, Z, alpha)
    full = _nuclear_reference(X, Z, alpha)
    assert ours.info["rounds"] >= 2  # the explorative round, then tight ones
    assert ours.objective == pytest.approx(full.objective, rel=1e-7)
    assert max(ours.kkt.values()) <= 1e-9


def test_nuclear_dropping_active_constraints_is_repaired_by_the_rounds(monkeypatch):
    """A rule that drops constraints long before they are known to be inactive (the slack
    threshold at 0): the ones it got wrong come back as violated, protected in the next round,
    and the solution is the same."""
    X, Z, alpha = instances(102, 1, 12, 12, 12)[0]
    reference = solve_nuclear(X, Z, alpha)
    monkeypatch.setattr(_sdp, "INACTIVE_SLACK", 0.0)
    monkeypatch.setattr(_sdp, "INACTIVE_RATIO", 1.0)
    reckless = solve_nuclear(X, Z, alpha)
    assert reckless.objective == pytest.approx(reference.objective, rel=1e-8)
    assert max(reckless.kkt.values()) <= 1e-9


def test_solvers_run_with_one_blas_thread_and_restore_the_callers_setting(monkeypatch):
    seen = []
    min_norm_point = _mnp.min_norm_point

    def spy(kernel, tol):
        seen.extend(lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas")
        return min_norm_point(kernel, tol=tol)

    monkeypatch.setattr(_mnp, "min_norm_point", spy)
    before = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
    X, Z, alpha = instances(3, 1, 4, 5, 6)[0]
    solve_frobenius(X, Z, alpha)
    assert seen and set(seen) == {1}
    assert [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"] == before


def _benchmark_instance(n: int, T: int, d: int):
    """benchmarks/theory_solvers.py's instance (the same draws, seed 0)."""
    rng = np.random.default_rng(0)
    v = rng.standard_normal(d)
    v /= np.linalg.norm(v)
    Y = np.where(rng.standard_normal(n) > 0, 1.0, -1.0)
    X = rng.standard_normal((n, T, d))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    Z = rng.standard_normal((n, d))
    Z /= np.linalg.norm(Z, axis=-1, keepdims=True)
    return X, Z, np.argmax(Y[:, None] * (X @ v), axis=1)


@pytest.mark.slow
def test_frobenius_at_1000_50_64_is_kkt_accurate():
    X, Z, alpha = _benchmark_instance(1000, 50, 64)
    result = solve_frobenius(X, Z, alpha)
    assert result.status == "optimal" and int(result.support.sum()) == 4026
    assert max(result.kkt.values()) <= 1e-9


@pytest.mark.slow
def test_nuclear_at_300_50_64_is_kkt_accurate():
    X, Z, alpha = _benchmark_instance(300, 50, 64)
    result = solve_nuclear(X, Z, alpha)
    assert result.status == "optimal" and max(result.kkt.values()) <= 1e-9
    assert result.objective == pytest.approx(195.2484438, rel=1e-8)
