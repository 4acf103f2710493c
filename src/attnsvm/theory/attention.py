"""The 1-layer attention model f(X) = v^T X^T softmax(X W z), batched over independent seeds.

Shapes (torch float64): ``X (S, n, T, d)``, ``Y (S, n)``, ``Z (S, n, d)``, ``W (S, d, d)`` or
``K, Q (S, d, m)`` with ``W = K Q^T`` (theory.md §1.1: ``W = model.W.weight.T`` and
``K = key.weight.T``, ``Q = query.weight.T``). Logits of sequence i are ``X_i W z_i``.

Heads: linear ``f = v^T X^T s``, or ReLU ``f = 1^T ReLU(V^T X^T s)`` (base_nonlinear.py). Loss:
``L = mean_i softplus(-Y_i f_i)`` (the stable form of log(1 + e^{-u})), per seed.

Gradients are closed-form (theory.md §5 item 4). With ``g_it = df_i/ds_it`` the logit gradient is
``dL/dl_it = dL/df_i * s_it * sum_tau s_itau (g_it - g_itau)``; the pairwise form avoids the
cancellation of ``g_it - sum_tau s_tau g_tau`` once the softmax saturates.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from attnsvm.theory.instances import Instances

DTYPE = torch.float64


@dataclass(frozen=True)
class AttentionProblem:
    """Data and fixed head of S independent problems; ``head`` is ``"linear"`` or ``"relu"``."""

    X: torch.Tensor
    Y: torch.Tensor
    Z: torch.Tensor
    head: str
    head_param: torch.Tensor  # v (S, d) for "linear", V (S, d, d) for "relu"

    @classmethod
    def from_instances(cls, inst: Instances, device: str | torch.device = "cpu"):
        def t(a):
            return torch.as_tensor(np.ascontiguousarray(a), dtype=DTYPE, device=device)

        param = inst.v if inst.head == "linear" else inst.V
        return cls(t(inst.X), t(inst.Y), t(inst.Z), inst.head, t(param))

    def __post_init__(self):
        if self.head not in ("linear", "relu"):
            raise ValueError(f"head: expected 'linear' or 'relu', got {self.head!r}")
        S, n, _, d = self.X.shape
        expected = (S, d) if self.head == "linear" else (S, d, d)
        if self.Y.shape != (S, n) or self.Z.shape != (S, n, d):
            raise ValueError(
                f"Y, Z: expected {(S, n)} and {(S, n, d)}, got "
                f"{tuple(self.Y.shape)} and {tuple(self.Z.shape)}"
            )
        if tuple(self.head_param.shape) != expected:
            raise ValueError(
                f"head parameter: expected {expected}, got {tuple(self.head_param.shape)}"
            )

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return tuple(self.X.shape)

    @cached_property
    def _linear_values(self) -> torch.Tensor:
        return (self.X @ self.head_param[:, None, :, None])[..., 0]

    def logits(self, W: torch.Tensor) -> torch.Tensor:
        """``l_it = x_it^T W z_i``, ``(S, n, T)``."""
        Wz = self.Z @ W.transpose(-1, -2)  # row i is (W z_i)^T
        return (self.X @ Wz[..., None])[..., 0]

    def probs(self, W: torch.Tensor) -> torch.Tensor:
        """Softmax attention ``s_it``, ``(S, n, T)``."""
        logits = self.logits(W)
        weights = torch.exp(logits - logits.amax(-1, keepdim=True))
        return weights / weights.sum(-1, keepdim=True)

    def _pooled(self, probs: torch.Tensor) -> torch.Tensor:
        return (probs[..., None, :] @ self.X)[..., 0, :]  # X_i^T s_i, (S, n, d)

    def output(self, probs: torch.Tensor) -> torch.Tensor:
        """``f(X_i)`` for given attention ``probs``, ``(S, n)``."""
        if self.head == "linear":
            return (probs * self._linear_values).sum(-1)
        return torch.relu(self._pooled(probs) @ self.head_param).sum(-1)

    def _token_values(self, probs: torch.Tensor) -> torch.Tensor:
        """``g_it = df_i/ds_it`` at ``probs``, ``(S, n, T)``."""
        if self.head == "linear":
            return self._linear_values
        active = (self._pooled(probs) @ self.head_param > 0).to(DTYPE)
        direction = active @ self.head_param.transpose(-1, -2)  # V 1[V^T h > 0]
        return (self.X @ direction[..., None])[..., 0]

    def loss(self, probs: torch.Tensor) -> torch.Tensor:
        """Per-seed logistic loss ``mean_i softplus(-Y_i f_i)``, ``(S,)``."""
        return torch.nn.functional.softplus(-self.Y * self.output(probs)).mean(-1)

    def loss_and_grad(self, W: torch.Tensor):
        """``(loss (S,), dL/dW (S, d, d), probs (S, n, T))`` in closed form."""
        probs = self.probs(W)
        margin = self.Y * self.output(probs)
        loss = torch.nn.functional.softplus(-margin).mean(-1)
        dloss_df = -self.Y * torch.sigmoid(-margin) / self.X.shape[1]  # (S, n)
        g = self._token_values(probs)
        spread = ((g[..., :, None] - g[..., None, :]) @ probs[..., None])[..., 0]
        dlogits = dloss_df[..., None] * probs * spread
        # dL/dW = sum_{i,t} dl_it x_it z_i^T: one (d, nT) @ (nT, d) product per seed
        S, n, T, d = self.X.shape
        scaled_queries = (dlogits[..., None] * self.Z[:, :, None, :]).reshape(S, n * T, d)
        grad = self.X.reshape(S, n * T, d).transpose(-1, -2) @ scaled_queries
        return loss, grad, probs

    def kq_loss_and_grad(self, K: torch.Tensor, Q: torch.Tensor, ridge: float):
        """``L(KQ^T) + ridge (||K||^2 + ||Q||^2)``: ``(loss, dK, dQ, probs)`` per seed."""
        loss, grad, probs = self.loss_and_grad(K @ Q.transpose(-1, -2))
        penalty = (K * K).sum((-2, -1)) + (Q * Q).sum((-2, -1))
        dK = grad @ Q + 2 * ridge * K
        dQ = grad.transpose(-1, -2) @ K + 2 * ridge * Q
        return loss + ridge * penalty, dK, dQ, probs
