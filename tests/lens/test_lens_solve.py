"""The lens's nuclear-norm Att-SVM (``attnsvm.lens.solve``) against its KKT conditions and cvxpy.

The instances look like a recommender's attention: items drawn from a small catalogue (so
histories repeat items and constraints are nearly parallel, where working sets and interior
points get hard), a small offset per position, layer-normalised, a constant coordinate,
left padding, and the selection made by a random ``W`` so that the hard margin is feasible.
"""

from __future__ import annotations

import warnings
from concurrent.futures import Future

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsvm.lens import run as lens_run
from attnsvm.lens import solve as lens_solve
from attnsvm.lens.solve import Pairs, solve


def _lens_like(seed: int, n: int, length: int, p: int, catalogue: int):
    """``(pairs, guide)``: a feasible selection of ``n`` left-padded histories in ``p`` dims."""
    rng = np.random.default_rng(seed)
    items = rng.normal(size=(catalogue, p - 1))
    positions = 0.1 * rng.normal(size=(length, p - 1))
    H = items[rng.integers(0, catalogue, size=(n, length))] + positions[None]
    H = (H - H.mean(-1, keepdims=True)) / H.std(-1, keepdims=True)
    X = np.concatenate([H, np.ones((n, length, 1))], axis=-1)
    lengths = rng.integers(2, length + 1, size=n)
    valid = np.arange(length)[None, :] >= (length - lengths)[:, None]
    X[~valid] = 0.0
    Z = X[:, -1]
    guide = rng.normal(size=(p, p))
    logits = np.where(valid, np.einsum("ntp,pq,nq->nt", X, guide, Z), -np.inf)
    return Pairs.build(X, Z, valid, np.argmax(logits, axis=1)), guide


def _cvxpy_nuclear(pairs: Pairs) -> float:
    """The hard-margin nuclear-norm Att-SVM as written, one ``p × p`` variable, Clarabel."""
    delta = pairs.X[:, 0] - pairs.X[:, 1]
    W = cp.Variable((delta.shape[1],) * 2)
    margins = cp.sum(cp.multiply(delta, pairs.Z @ W.T), axis=1)
    problem = cp.Problem(cp.Minimize(cp.normNuc(W)), [margins >= 1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "almost solved": accurate to ~1e-8
        problem.solve(solver="CLARABEL")
    return problem.value


def _assert_nuclear_kkt(pairs: Pairs, solution, tol: float = 1e-6) -> None:
    """Optimality from scratch: margins ≥ 1, multipliers ≥ 0, complementarity, the dual
    ``||Σ λ_k δ_k z_kᵀ||_op ≤ 1`` and no duality gap ``Σ λ = ||W||_*``."""
    delta = pairs.X[:, 0] - pairs.X[:, 1]
    margins = np.einsum("kp,pq,kq->k", delta, solution.W, pairs.Z)
    dual = solution.dual
    assert margins.min() >= 1.0 - 1e-9
    assert dual.min() >= -tol
    assert np.max(np.abs(dual * (margins - 1.0))) <= tol * max(1.0, dual.max())
    assert np.linalg.norm(np.einsum("k,kp,kq->pq", dual, delta, pairs.Z), 2) <= 1.0 + tol
    nuclear = np.linalg.svd(solution.W, compute_uv=False).sum()
    assert nuclear == pytest.approx(solution.objective, rel=1e-12)
    assert dual.sum() == pytest.approx(nuclear, rel=tol)


@settings(max_examples=25)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 12),
    length=st.integers(3, 10),
    p=st.sampled_from([4, 7, 13, 17]),  # both sides of ACCURATE_NUCLEAR_DIM
    catalogue=st.sampled_from([5, 40]),
)
def test_nuclear_solution_meets_kkt_and_matches_cvxpy(seed, n, length, p, catalogue):
    pairs, guide = _lens_like(seed, n, length, p, catalogue)
    solutions = solve(pairs, guide=guide)
    nuclear = solutions["nuclear"]
    assert nuclear.kind == "hard" and nuclear.solver == "interior point"
    _assert_nuclear_kkt(pairs, nuclear)
    assert nuclear.objective == pytest.approx(_cvxpy_nuclear(pairs), rel=1e-5)
    # each minimiser is no better than the other in the other's norm
    frobenius = solutions["frobenius"]
    assert nuclear.objective <= np.linalg.norm(frobenius.W, "nuc") * (1 + 1e-7)
    assert np.linalg.norm(nuclear.W) >= frobenius.objective * (1 - 1e-7)


def test_working_set_stays_small_and_solves_the_whole_problem():
    """Fifty histories of a repetitive catalogue: the final working set is a fraction of the
    constraints, yet the solution certifies itself on all of them."""
    pairs, guide = _lens_like(3, 50, 12, 17, 20)
    nuclear = solve(pairs, guide=guide)["nuclear"]
    assert nuclear.working_set < len(pairs) / 2
    assert nuclear.rounds >= 1
    assert np.count_nonzero(nuclear.dual) <= nuclear.working_set
    _assert_nuclear_kkt(pairs, nuclear)


@pytest.mark.parametrize(("gap", "solver"), [(1e-9, "interior point"), (1e-3, "CLARABEL")])
def test_a_stalled_interior_point_round_is_kept_only_if_accurate(monkeypatch, gap, solver):
    """A round that stops short of its tolerance is kept at a small residual; at a large one
    the conic program solves that working set instead."""
    pairs, guide = _lens_like(5, 6, 6, 7, 10)
    reference = solve(pairs, guide=guide)["nuclear"]
    solve_sdp = lens_solve._sdp.solve

    def stalled(*args, **kwargs):
        result = solve_sdp(*args, **kwargs)
        result.converged, result.residuals = False, {"primal": 0.0, "dual": 0.0, "gap": gap}
        return result

    monkeypatch.setattr(lens_solve._sdp, "solve", stalled)
    stopped = solve(pairs, guide=guide)["nuclear"]
    assert stopped.solver.startswith(solver)
    assert (stopped.dual is None) == (solver == "CLARABEL")
    assert stopped.margins.min() >= 1.0 - 1e-9
    assert stopped.objective == pytest.approx(reference.objective, rel=1e-5)


class _View:
    def __init__(self, layer: int, sequences: int, tokens: int):
        self.layer = layer
        self.valid = np.ones((sequences, tokens + 1), dtype=bool)  # `tokens` rivals each


class _InlinePool:
    """A stand-in for the process pool that runs every job here and counts them."""

    used = 0

    def __init__(self, max_workers, mp_context):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def submit(self, fn, *args):
        _InlinePool.used += 1
        future = Future()
        future.set_result(fn(*args))
        return future


@pytest.mark.parametrize(("tokens", "pooled"), [(10, False), (1000, True)])
def test_heads_use_worker_processes_only_when_large(monkeypatch, tokens, pooled):
    monkeypatch.setattr(lens_run.os, "cpu_count", lambda: 4)
    monkeypatch.setattr(lens_run, "PARALLEL_CONSTRAINTS", 50 * 500)
    monkeypatch.setattr(lens_run, "ProcessPoolExecutor", _InlinePool)
    monkeypatch.setattr(lens_run, "_analyse_job", lambda job, C: job[0].layer)
    _InlinePool.used = 0
    jobs = [(_View(layer, 50, tokens), {}, []) for layer in range(3)]
    finished = []
    assert lens_run._analyse_heads(jobs, 1.0, lambda: finished.append(1)) == [0, 1, 2]
    assert len(finished) == 3
    assert _InlinePool.used == (3 if pooled else 0)
