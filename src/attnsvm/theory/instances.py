"""The official notebooks' data generators, seeded and batched over seeds (theory.md §3).

Each generator calls ``torch.Generator().manual_seed(seed)`` and draws in the notebook's order, then
casts to float64, so ``paper_instances(seeds=[s], ...)`` is bit-identical to the notebook's
``data_generator(s)``. Arrays carry a leading seed axis ``S``: ``X (S, n, T, d)``, ``Y (S, n)``,
``Z (S, n, d)``; the linear head has ``v (S, d)``, the ReLU head ``V (S, d, d)`` (theory.md §1.1).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Instances:
    """A batch of attention problems, one per seed; ``head`` is ``"linear"`` or ``"relu"``."""

    seeds: np.ndarray
    X: np.ndarray
    Y: np.ndarray
    Z: np.ndarray
    head: str
    v: np.ndarray | None = None
    V: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(S, n, T, d)``."""
        return self.X.shape

    def scores(self) -> np.ndarray:
        """Token scores ``(S, n, T)``: ``Y_i v^T x_it`` (linear) or ``Y_i 1^T ReLU(V^T x_it)``."""
        if self.head == "linear":
            return self.Y[:, :, None] * np.einsum("sntd,sd->snt", self.X, self.v)
        hidden = np.maximum(np.einsum("sntd,sde->snte", self.X, self.V), 0.0)
        return self.Y[:, :, None] * hidden.sum(axis=-1)

    def optimal(self) -> np.ndarray:
        """``opt_i = argmax_t score_it`` per seed, ``(S, n)`` (first index on ties, as torch)."""
        return np.argmax(self.scores(), axis=-1)

    def select(self, keep) -> Instances:
        """The sub-batch of the seeds picked by ``keep`` (a bool mask or index array)."""
        pick = np.asarray(keep)

        def part(a):
            return None if a is None else a[pick]

        return Instances(
            self.seeds[pick],
            self.X[pick],
            self.Y[pick],
            self.Z[pick],
            self.head,
            part(self.v),
            part(self.V),
        )

    def one(self, s: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(X, Y, Z, head parameter)`` of the s-th seed of the batch (not the seed value)."""
        head = self.v[s] if self.head == "linear" else self.V[s]
        return self.X[s], self.Y[s], self.Z[s], head


def _seed_list(seeds: Iterable[int] | int) -> list[int]:
    values = list(range(seeds)) if isinstance(seeds, int) else [int(s) for s in seeds]
    if not values:
        raise ValueError("seeds: need at least one seed")
    return values


def _unit_rows(t: torch.Tensor) -> torch.Tensor:
    return t / torch.norm(t, dim=-1, keepdim=True)


def _labels(n: int, gen: torch.Generator) -> torch.Tensor:
    # the notebooks' "2 * ones(n) * (randn(n) > 0) - 1"
    return 2 * torch.ones(n) * (torch.randn(n, generator=gen) > 0) - 1


def _stack(seeds, draws, head: str) -> Instances:
    X, Y, Z, p = (np.stack([d[k].double().numpy() for d in draws]) for k in range(4))
    kwargs = {"v": p} if head == "linear" else {"V": p}
    return Instances(np.asarray(seeds, dtype=np.int64), X, Y, Z, head, **kwargs)


def _check_sizes(n: int, T: int, d: int) -> None:
    if n < 1 or T < 2 or d < 1:
        raise ValueError(f"need n >= 1, T >= 2, d >= 1; got n={n}, T={T}, d={d}")


def paper_instances(seeds: Iterable[int] | int, n: int, T: int, d: int) -> Instances:
    """local_converge / svm_rank generator: v, Y, X, Z in that order, unit-norm tokens (§3)."""
    _check_sizes(n, T, d)
    seeds = _seed_list(seeds)
    draws = []
    for seed in seeds:
        gen = torch.Generator().manual_seed(seed)
        v = _unit_rows(torch.randn(d, generator=gen))
        Y = _labels(n, gen)
        X = _unit_rows(torch.randn((n, T, d), generator=gen))
        Z = _unit_rows(torch.randn((n, d), generator=gen))
        draws.append((X, Y, Z, v))
    return _stack(seeds, draws, "linear")


def multi_token_instances(
    seeds: Iterable[int] | int, n: int = 3, T: int = 4, d: int = 10
) -> Instances:
    """multi_token_converge generator (ReLU head): V, X, Y, Z in that order, ``||V||_F = 1``.

    The notebook also builds ``v = 1/sqrt(d)`` but never uses it (no random draw); the head
    vector of ``f = 1^T ReLU(V^T X^T s)`` is all ones (theory.md §1.1).
    """
    _check_sizes(n, T, d)
    seeds = _seed_list(seeds)
    draws = []
    for seed in seeds:
        gen = torch.Generator().manual_seed(seed)
        V = torch.randn((d, d), generator=gen)
        V = V / torch.norm(V)
        X = _unit_rows(torch.randn((n, T, d), generator=gen))
        Y = _labels(n, gen)
        Z = _unit_rows(torch.randn((n, d), generator=gen))
        draws.append((X, Y, Z, V))
    return _stack(seeds, draws, "relu")


def visualization1() -> Instances:
    """visualization.ipynb (§3.1): n=2, T=3, d=2, seed 1, Y = (1, 1), tokens not normalised."""
    n, T, d = 2, 3, 2
    gen = torch.Generator().manual_seed(1)
    v = _unit_rows(torch.randn(d, generator=gen))
    Y = torch.ones(n)
    X = 0.3 * torch.randn((n, T, d), generator=gen)
    X[0] += torch.tensor([-1.0, 0.0])
    X[1] += torch.tensor([1.0, 0.0])
    Z = _unit_rows(torch.randn((n, d), generator=gen))
    return _stack([1], [(X, Y, Z, v)], "linear")


def visualization2() -> Instances:
    """visualization2.ipynb (§3.2): n=2, T=5, d=2, seed 3; token 0 fixed, the others shifted."""
    n, T, d = 2, 5, 2
    gen = torch.Generator().manual_seed(3)
    v = _unit_rows(torch.randn(d, generator=gen))
    Y = torch.ones(n)
    X = 0.5 * torch.randn((n, T, d), generator=gen)
    X[0, 0] = torch.tensor([1.0, 0.5])
    X[1, 0] = torch.tensor([1.0, -0.5])
    X[:, 1:] += torch.tensor([-1.0, 0.0])
    Z = _unit_rows(torch.randn((n, d), generator=gen))
    return _stack([3], [(X, Y, Z, v)], "linear")
