"""The paper's normalised gradient descent, batched over seeds (theory.md §1.3).

``W <- W - lr * G / (||G||_F + eps)`` per seed with ``lr = 0.1`` and ``eps = finfo(float64).eps``;
in the (K, Q) case ``K`` and ``Q`` are each normalised by their own gradient norm and the loss
carries the ridge ``eps (||K||_F^2 + ||Q||_F^2)``. Iteration ``k`` evaluates the softmax at the
weights after ``k`` steps and then steps, as the notebooks' loop does; so the traces and the
"selected" tokens (argmax of the last iteration's softmax) line up with the notebooks' arrays.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from rich.progress import Progress

from attnsvm.theory.attention import DTYPE, AttentionProblem
from attnsvm.theory.svm import correlation

#: ``torch.finfo(torch.double).eps``: the gradient-norm guard and the (K, Q) ridge of the code.
EPS = float(torch.finfo(torch.float64).eps)
LEARNING_RATE = 0.1
PARAMETERIZATIONS = ("W", "KQ")


def _seed_list(seeds) -> list[int]:
    return [int(s) for s in np.atleast_1d(np.asarray(seeds))]


def default_init(seeds: Iterable[int], d: int, parameterization: str = "W", m: int | None = None):
    """PyTorch's ``nn.Linear`` default init, U(-1/sqrt(d), 1/sqrt(d)), one generator per seed.

    Drawn in float32 and cast, like ``SelfAttn(d).double()``; ``query`` is drawn before ``key``
    (their order in ``SelfAttn.__init__``). Returns ``W (S, d, d)`` or ``(K, Q)``, each
    ``(S, d, m)`` with ``K = key.weight.T`` and ``Q = query.weight.T``.
    """
    m = d if m is None else m
    bound = 1.0 / math.sqrt(d)

    def linear(gen, rows):
        return torch.empty(rows, d).uniform_(-bound, bound, generator=gen).to(DTYPE)

    if parameterization == "W":
        return torch.stack(
            [linear(torch.Generator().manual_seed(s), d).T for s in _seed_list(seeds)]
        )
    _check_parameterization(parameterization)
    Ks, Qs = [], []
    for s in _seed_list(seeds):
        gen = torch.Generator().manual_seed(s)
        query = linear(gen, m)
        key = linear(gen, m)
        Ks.append(key.T)
        Qs.append(query.T)
    return torch.stack(Ks), torch.stack(Qs)


def visualization_init(seeds: Iterable[int], d: int, parameterization: str = "W"):
    """visualization1/2: ``W(0) = 0``; ``Q(0) = 0`` and ``K(0) = 0.1 N(0, 1)`` (seeded)."""
    seeds = _seed_list(seeds)
    if parameterization == "W":
        return torch.zeros(len(seeds), d, d, dtype=DTYPE)
    _check_parameterization(parameterization)
    K = torch.stack(
        [
            0.1 * torch.randn(d, d, generator=torch.Generator().manual_seed(s), dtype=DTYPE)
            for s in seeds
        ]
    )
    return K, torch.zeros_like(K)


def _check_parameterization(parameterization: str) -> None:
    if parameterization not in PARAMETERIZATIONS:
        raise ValueError(
            f"parameterization: expected one of {PARAMETERIZATIONS}, got {parameterization!r}"
        )


@dataclass
class Trajectory:
    """Normalised-GD run of S seeds: weights at ``checkpoints`` and per-iteration traces.

    ``W[s, c]`` is ``W`` (or ``K Q^T``) after ``checkpoints[c]`` steps; ``max_prob[s, k]`` is
    ``mean_i max_t s_it`` and ``loss[s, k]`` the (ridged) loss at iteration ``k``, i.e. at the
    weights after ``k`` steps; ``final_probs`` is the softmax of the last iteration.
    """

    parameterization: str
    steps: int
    checkpoints: np.ndarray
    W: np.ndarray
    max_prob: np.ndarray
    loss: np.ndarray
    final_probs: np.ndarray

    @property
    def final_W(self) -> np.ndarray:
        """``W`` after all steps, ``(S, d, d)``."""
        if self.checkpoints[-1] != self.steps:
            raise ValueError("final_W: the last checkpoint is not the final step")
        return self.W[:, -1]

    def selected(self) -> np.ndarray:
        """``alpha_i = argmax_t s_it`` at the last iteration, ``(S, n)`` (the notebooks' ids)."""
        return np.argmax(self.final_probs, axis=-1)

    def correlations(self, W_ref) -> np.ndarray:
        """``corr(W(k), W_ref[s])`` at every checkpoint, ``(S, C)``; NaN where W_ref is NaN."""
        return correlation(self.W, np.asarray(W_ref)[:, None])

    def at(self, step: int) -> int:
        """Index of ``step`` among the checkpoints (a ValueError if it was not stored)."""
        hits = np.flatnonzero(self.checkpoints == step)
        if hits.size == 0:
            raise ValueError(f"step {step} is not a stored checkpoint")
        return int(hits[0])


def _checkpoints(checkpoints, steps: int) -> np.ndarray:
    if checkpoints is None:
        checkpoints = range(0, steps + 1, max(1, steps // 200))
    points = np.unique(np.append(np.asarray(list(checkpoints), dtype=np.int64), steps))
    if points[0] < 0 or points[-1] > steps:
        raise ValueError(f"checkpoints: expected step counts in [0, {steps}]")
    return points


@contextmanager
def one_thread():
    """Tiny batched tensors: intra-op threads only add overhead (40x slower on a busy box)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _normalised(G: torch.Tensor) -> torch.Tensor:
    return G / (torch.linalg.matrix_norm(G)[:, None, None] + EPS)


def train(
    problem: AttentionProblem,
    init,
    *,
    steps: int = 2000,
    lr: float = LEARNING_RATE,
    checkpoints: Iterable[int] | None = None,
    ridge: float = EPS,
    progress: bool = False,
) -> Trajectory:
    """Run normalised GD from ``init``: a ``W (S, d, d)`` tensor, or a ``(K, Q)`` pair.

    ``checkpoints`` are the step counts whose weights are kept (default: about 200 of them and
    the last); ``ridge`` applies to (K, Q) only; ``progress`` shows a rich progress bar.
    """
    if steps < 1:
        raise ValueError(f"steps: expected at least 1, got {steps}")
    kq = isinstance(init, tuple)
    device = problem.X.device
    if kq:
        K, Q = (p.to(device=device, dtype=DTYPE).clone() for p in init)
    else:
        W = init.to(device=device, dtype=DTYPE).clone()
    S = problem.X.shape[0]
    points = _checkpoints(checkpoints, steps)
    keep = {int(p): c for c, p in enumerate(points)}
    d = problem.X.shape[-1]
    stored = torch.empty(S, len(points), d, d, dtype=DTYPE, device=device)
    max_prob = torch.empty(S, steps, dtype=DTYPE, device=device)
    losses = torch.empty(S, steps, dtype=DTYPE, device=device)

    def store(k):
        if k in keep:
            stored[:, keep[k]] = K @ Q.transpose(-1, -2) if kq else W

    with one_thread(), Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task(f"normalised GD ({'KQ' if kq else 'W'}, {S} seeds)", total=steps)
        store(0)
        for k in range(steps):
            if kq:
                loss, dK, dQ, probs = problem.kq_loss_and_grad(K, Q, ridge)
                K -= lr * _normalised(dK)
                Q -= lr * _normalised(dQ)
            else:
                loss, grad, probs = problem.loss_and_grad(W)
                W -= lr * _normalised(grad)
            max_prob[:, k] = probs.amax(-1).mean(-1)
            losses[:, k] = loss
            store(k + 1)
            if progress and (k + 1) % 50 == 0:
                bar.update(task, completed=k + 1)
    return Trajectory(
        "KQ" if kq else "W",
        steps,
        points,
        stored.cpu().numpy(),
        max_prob.cpu().numpy(),
        losses.cpu().numpy(),
        probs.cpu().numpy(),
    )
