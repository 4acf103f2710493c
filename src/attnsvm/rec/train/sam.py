"""Sharpness-aware minimisation (Foret et al., ICLR 2021), as SAMRec (Lai et al., RecSys 2023) uses.

One step, with the loss and gradients recomputed by ``closure``::

    g  = ∇L(w)                       (closure at w)
    ε̂  = ρ · g / ‖g‖₂                 (over all parameters together)
    g′ = ∇L(w + ε̂)                    (closure at the perturbed weights)
    w  ← base_step(w, g′)            (the base optimiser, e.g. AdamW, with g′)

Two forward/backward passes per step; ρ is the only hyper-parameter. The value returned is the
loss at ``w`` (the unperturbed weights), so training logs read as with the base optimiser.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch


class SAM(torch.optim.Optimizer):
    """Wraps ``base`` (an optimiser class) so that ``step(closure)`` is a SAM step."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        base: type[torch.optim.Optimizer],
        rho: float = 0.05,
        **base_kwargs,
    ) -> None:
        if rho < 0:
            raise ValueError(f"SAM rho must be ≥ 0, got {rho}")
        super().__init__(params, {"rho": rho, **base_kwargs})
        self.base = base(self.param_groups, **base_kwargs)
        self.param_groups = self.base.param_groups
        self.defaults.update(self.base.defaults)

    def state_dict(self) -> dict:
        """The base optimiser's state (SAM itself keeps none between steps), for resuming."""
        return self.base.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        self.base.load_state_dict(state_dict)

    @torch.no_grad()
    def _perturb(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        grads = [
            p.grad for group in self.param_groups for p in group["params"] if p.grad is not None
        ]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        moved = []
        for group in self.param_groups:
            scale = group["rho"] / (norm + 1e-12)
            for p in group["params"]:
                if p.grad is None:
                    continue
                step = p.grad * scale.to(p.grad.dtype)
                p.add_(step)
                moved.append((p, step))
        return moved

    def step(self, closure: Callable[[], float] | None = None) -> float:  # type: ignore[override]
        if closure is None:
            raise ValueError("SAM needs a closure that recomputes the loss and its gradients")
        with torch.enable_grad():
            loss = closure()
        moved = self._perturb()
        with torch.enable_grad():
            closure()
        with torch.no_grad():
            for p, step in moved:
                p.sub_(step)
        self.base.step()
        return loss
