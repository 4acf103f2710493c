"""Optimisers by name (``train.optimizer``) and the learning-rate warm-up.

The step calls ``optimizer.step(closure)``, where the closure recomputes loss and gradients, so a
two-pass optimiser (SAM: ascend to the neighbourhood's worst point, then descend) plugs in here
without touching the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from attnsvm.rec.config import TrainConfig

Optimizer = torch.optim.Optimizer


def adamw(
    params: Iterable[torch.nn.Parameter], train: TrainConfig, fused: bool = False
) -> Optimizer:
    """AdamW; ``fused``: one kernel per parameter (the same update in one pass over its
    weights and moments instead of about ten: what a million-item table's step is bound by),
    which the trainer chooses for large catalogues (``nn.embedding.SPARSE_ROWS_FROM_ITEMS``)."""
    return torch.optim.AdamW(
        params,
        lr=train.lr,
        betas=train.betas,
        weight_decay=train.weight_decay,
        fused=fused or None,  # None: torch's default (foreach), as before
    )


def sam(params: Iterable[torch.nn.Parameter], train: TrainConfig, fused: bool = False) -> Optimizer:
    from attnsvm.rec.train.sam import SAM

    return SAM(
        params,
        torch.optim.AdamW,
        rho=train.sam_rho,
        lr=train.lr,
        betas=train.betas,
        weight_decay=train.weight_decay,
        fused=fused or None,
    )


OPTIMIZERS: dict[str, Callable[..., Optimizer]] = {
    "adamw": adamw,
    "sam": sam,
}


def warmup(optimizer: Optimizer, steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up from 0 to the optimiser's lr over ``steps`` steps, then constant."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / steps) if steps else 1.0
    )
