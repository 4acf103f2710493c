"""Point the lens at the theory lab's 1-layer attention ``f(X) = vᵀ Xᵀ softmax(X W z)``.

The theory model is already in the paper's convention (logits ``X_i W z_i``, no biases, every
token real), so its "head view" is the data itself, the softmax of the last normalised-GD
iterate and ``W`` (or ``K Qᵀ``); its token score is the paper's ``γ_it = Y_i vᵀ x_it``. This is
how the lens is validated: on this model the theory says what it must report (theory.md §2.7).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnsvm.lens.analysis import HeadAnalysis, analyse_head
from attnsvm.theory.attention import AttentionProblem
from attnsvm.theory.dynamics import Trajectory, default_init, train
from attnsvm.theory.instances import Instances, paper_instances
from attnsvm.theory.tokens import token_scores


@dataclass(frozen=True)
class TheoryHead:
    """The ``HeadView`` interface for one seed of the theory model."""

    X: np.ndarray  # (n, T, d)
    Z: np.ndarray  # (n, d)
    attention: np.ndarray  # (n, T) softmax of the final iterate
    W_selection: np.ndarray  # (d, d): W, or K Qᵀ
    layer: int = 0
    head: int = 0

    @property
    def valid(self) -> np.ndarray:
        return np.ones(self.attention.shape, dtype=bool)


def analyse_seed(instances: Instances, trajectory: Trajectory, s: int) -> HeadAnalysis:
    """The lens's reading of seed index ``s`` after the trajectory's last step."""
    view = TheoryHead(
        instances.X[s], instances.Z[s], trajectory.final_probs[s], trajectory.final_W[s]
    )
    scores = {"linear": token_scores(instances.X[s], instances.Y[s], instances.v[s])}
    return analyse_head(view, scores)


def local_convergence(
    seeds, parameterization: str, *, n: int = 6, T: int = 8, d: int = 10, steps: int = 2000
) -> tuple[Instances, Trajectory, list[HeadAnalysis]]:
    """The paper's local-convergence setting (theory.md §3.3) trained by normalised GD, read by
    the lens seed by seed."""
    instances = paper_instances(seeds, n, T, d)
    problem = AttentionProblem.from_instances(instances)
    trajectory = train(
        problem, default_init(seeds, d, parameterization), steps=steps, checkpoints=[steps]
    )
    return (
        instances,
        trajectory,
        [analyse_seed(instances, trajectory, s) for s in range(len(instances.X))],
    )
