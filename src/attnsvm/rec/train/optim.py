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


def adamw(params: Iterable[torch.nn.Parameter], train: TrainConfig) -> Optimizer:
    return torch.optim.AdamW(
        params, lr=train.lr, betas=train.betas, weight_decay=train.weight_decay
    )


def sam(params: Iterable[torch.nn.Parameter], train: TrainConfig) -> Optimizer:
    from attnsvm.rec.train.sam import SAM

    return SAM(
        params,
        torch.optim.AdamW,
        rho=train.sam_rho,
        lr=train.lr,
        betas=train.betas,
        weight_decay=train.weight_decay,
    )


OPTIMIZERS: dict[str, Callable[[Iterable[torch.nn.Parameter], TrainConfig], Optimizer]] = {
    "adamw": adamw,
    "sam": sam,
}


def warmup(optimizer: Optimizer, steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up from 0 to the optimiser's lr over ``steps`` steps, then constant."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / steps) if steps else 1.0
    )
