"""Negative samplers. None ever returns the padding id 0; with ``exclude_positive`` none
returns the positive it is drawn for. Each is deterministic given its seed.

* ``UniformSampler``: uniform over ``1..num_items`` (exclusion is exact, without rejection:
  draw from ``num_items - 1`` ids and skip over the positive).
* ``PopularitySampler``: proportional to ``count ** alpha`` (inverse-CDF draws; exclusion by
  redrawing the collisions, which samples exactly from the distribution conditioned on
  "not the positive").
* ``in_batch_sampler``: the batch's own non-padding positives, each occurrence equally likely
  (the sampled-softmax "in-batch" distribution).
* ``avoid_row_items``: redraws, from the same sampler, every negative that is one of the items of
  its own training row (window), as Klenitskiy & Vasilev's sampler does (SASRec's avoids the
  user's whole training sequence); that samples from the distribution conditioned on "not one
  of the row's items".

``negative_sampler`` picks an epoch's sampler by name, and ``log_q`` gives the log-probability
of drawing each item (the sampled-softmax correction).
"""

from __future__ import annotations

import numpy as np
import torch


def _as_numpy(positives: np.ndarray | torch.Tensor) -> np.ndarray:
    if isinstance(positives, torch.Tensor):
        return positives.detach().cpu().numpy().astype(np.int64, copy=False)
    return np.asarray(positives, dtype=np.int64)


class _Sampler:
    """The interface of every sampler: ``sample`` shapes the request, ``_sample`` draws."""

    def sample(
        self,
        positives: np.ndarray | torch.Tensor,
        num_negatives: int = 1,
        exclude_positive: bool = True,
    ) -> torch.Tensor:
        """``positives.shape + (num_negatives,)`` negatives; padding positives exclude nothing."""
        pos = _as_numpy(positives)[..., None]
        shape = (*pos.shape[:-1], num_negatives)
        return torch.from_numpy(self._sample(pos, shape, exclude_positive))

    def _sample(self, pos: np.ndarray, shape: tuple[int, ...], exclude: bool) -> np.ndarray:
        raise NotImplementedError


class UniformSampler(_Sampler):
    def __init__(self, num_items: int, seed: int = 0) -> None:
        if num_items < 2:
            raise ValueError("uniform sampling needs at least 2 items")
        self.num_items = num_items
        self.rng = np.random.default_rng(seed)
        self.support = np.ones(num_items + 1, dtype=bool)
        self.support[0] = False

    def draw(self, count: int) -> np.ndarray:
        """``count`` independent draws from the unconditioned distribution."""
        return self.rng.integers(1, self.num_items + 1, size=count)

    def _sample(self, pos: np.ndarray, shape: tuple[int, ...], exclude: bool) -> np.ndarray:
        if not exclude:
            return self.rng.integers(1, self.num_items + 1, size=shape)
        real = pos > 0
        draw = self.rng.integers(1, np.where(real, self.num_items, self.num_items + 1), size=shape)
        return draw + (real & (draw >= pos))


class PopularitySampler(_Sampler):
    def __init__(self, counts: np.ndarray, alpha: float = 1.0, seed: int = 0) -> None:
        """``counts[i]`` for item ids ``0..num_items`` (``counts[0]``, padding, is ignored)."""
        weights = np.asarray(counts, dtype=np.float64).copy() ** alpha
        weights[0] = 0.0
        if np.any(weights < 0) or np.count_nonzero(weights) < 2:
            raise ValueError("popularity sampling needs at least 2 items with positive counts")
        self.probability = weights / weights.sum()
        cumulative = np.cumsum(weights)
        self.cdf = cumulative / cumulative[-1]  # exactly 1.0 from the last positive weight on
        self.rng = np.random.default_rng(seed)
        self.support = self.probability > 0

    def draw(self, count: int) -> np.ndarray:
        """``count`` independent draws from the unconditioned distribution."""
        return self._draw((count,))

    @classmethod
    def from_items(
        cls, items: np.ndarray, num_items: int, alpha: float = 1.0, seed: int = 0
    ) -> PopularitySampler:
        return cls(np.bincount(items, minlength=num_items + 1), alpha, seed)

    def _draw(self, shape: tuple[int, ...]) -> np.ndarray:
        u = self.rng.random(shape)
        return np.minimum(np.searchsorted(self.cdf, u, side="right"), self.cdf.size - 1)

    def _sample(self, pos: np.ndarray, shape: tuple[int, ...], exclude: bool) -> np.ndarray:
        draw = self._draw(shape)
        if exclude:
            certain = self.probability[np.clip(pos, 0, self.cdf.size - 1)] >= 1.0
            if np.any(certain & (pos > 0)):
                raise ValueError("a positive holds all the probability; nothing else to draw")
            clash = draw == pos
            while clash.any():
                draw[clash] = self._draw((int(clash.sum()),))
                clash = draw == pos
        return draw


def in_batch_sampler(
    positives: np.ndarray | torch.Tensor, num_items: int, seed: int = 0
) -> PopularitySampler:
    """A sampler over this batch's non-padding positives (frequency-weighted)."""
    pos = _as_numpy(positives).ravel()
    return PopularitySampler.from_items(pos[pos > 0], num_items, seed=seed)


def avoid_row_items(
    negatives: np.ndarray | torch.Tensor,
    rows: np.ndarray,
    row_items: np.ndarray,
    sampler: UniformSampler | PopularitySampler,
) -> torch.Tensor:
    """``negatives`` (targets × k, drawn by ``sampler``) with every draw that is an item of its
    target's row redrawn from ``sampler`` until none is.

    ``rows[t]`` is target t's row of ``row_items`` (rows × width item ids, 0 = padding): the
    items of that training row, its inputs and its targets. Raises ``ValueError`` when a row
    holds every item the sampler can draw.
    """
    negatives = _as_numpy(negatives).copy()
    row_items = _as_numpy(row_items)
    seen = np.zeros((len(row_items), sampler.support.size), dtype=bool)
    seen[np.arange(len(row_items))[:, None], row_items] = True
    seen[:, 0] = False
    exhausted = ~(sampler.support & ~seen).any(axis=1)
    if exhausted.any():
        row = int(np.flatnonzero(exhausted)[0])
        raise ValueError(f"training row {row} holds every item the sampler can draw")
    owner = np.broadcast_to(np.asarray(rows)[:, None], negatives.shape)
    clash = seen[owner, negatives]
    while clash.any():
        negatives[clash] = sampler.draw(int(clash.sum()))
        clash[clash] = seen[owner[clash], negatives[clash]]
    return torch.from_numpy(negatives)


def negative_sampler(kind: str, popularity: np.ndarray, seed: int):
    """The data layer's sampler for one epoch; it never returns the positive it is drawn for."""
    if kind == "uniform":
        return UniformSampler(popularity.size - 1, seed=seed)
    if kind == "popularity":
        return PopularitySampler(popularity, seed=seed)
    raise ValueError(f"unknown sampler {kind!r} (expected uniform or popularity)")


def log_q(kind: str, popularity: np.ndarray) -> torch.Tensor:
    """log-probability of drawing each item id (index 0, padding, is never drawn: −∞)."""
    if kind == "uniform":
        probability = np.full(popularity.size, 1.0 / (popularity.size - 1))
        probability[0] = 0.0
    else:
        probability = PopularitySampler(popularity).probability
    with np.errstate(divide="ignore"):
        return torch.from_numpy(np.log(probability)).float()
