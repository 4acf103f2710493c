"""Batched normalised GD against the official one-seed loop (nn.Linear + autograd + SGD)."""

import math

import numpy as np
import pytest
import torch

from attnsvm.theory.attention import AttentionProblem
from attnsvm.theory.dynamics import EPS, default_init, train, visualization_init
from attnsvm.theory.instances import multi_token_instances, paper_instances
from attnsvm.theory.svm import correlation

STEPS = 60
EXACT = 30


def _official_run(X, Y, Z, head, relu, W0=None, K0=None, Q0=None, steps=STEPS):
    """local_converge.ipynb's loop on one seed, with the given init (W = weight.T etc.)."""
    X, Y, Z, head = (torch.as_tensor(a) for a in (X, Y, Z, head))
    d = X.shape[-1]
    univariate = W0 is not None
    if univariate:
        weight = torch.nn.Parameter(W0.T.clone())
        params = [weight]
    else:
        query, key = torch.nn.Parameter(Q0.T.clone()), torch.nn.Parameter(K0.T.clone())
        params = [query, key]
    optimizer = torch.optim.SGD(params, lr=0.1)
    Ws, probs_max = [], []
    z = Z.reshape(-1, 1, d)
    for _ in range(steps):
        optimizer.zero_grad()
        if univariate:
            out = torch.softmax(z @ (X @ weight.T).transpose(-2, -1), dim=-1)
        else:
            out = torch.softmax((z @ query.T) @ (X @ key.T).transpose(-2, -1), dim=-1)
        sfx = out
        pooled = out @ X
        y = (
            torch.relu(pooled @ head) @ torch.ones(d, dtype=torch.float64)
            if relu
            else pooled @ head
        ).view(-1)
        loss = torch.log(1 + torch.exp(-Y * y)).mean()
        if not univariate:
            loss = loss + EPS * (key.norm() ** 2 + query.norm() ** 2)
        loss.backward()
        for p in params:
            p.grad /= p.grad.norm() + EPS
        optimizer.step()
        Ws.append((weight.T if univariate else query.T.mm(key).T).detach().clone())
        probs_max.append(sfx.detach().max(dim=-1)[0].mean())
    return torch.stack(Ws).numpy(), torch.stack(probs_max).numpy(), sfx.detach()[:, 0].numpy()


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("parameterization", ["W", "KQ"])
def test_matches_official_loop(relu, parameterization):
    inst = (multi_token_instances if relu else paper_instances)(range(1, 3), 3, 4, 6)
    problem = AttentionProblem.from_instances(inst)
    init = default_init(range(10, 12), 6, parameterization)
    traj = train(problem, init, steps=STEPS, checkpoints=range(1, STEPS + 1))
    for s in range(2):
        X, Y, Z, head = inst.one(s)
        if parameterization == "W":
            Ws, pmax, final = _official_run(X, Y, Z, head, relu, W0=init[s])
        else:
            Ws, pmax, final = _official_run(X, Y, Z, head, relu, K0=init[0][s], Q0=init[1][s])
        # identical until the softmax saturates; then rounding differences grow chaotically
        # (theory.md §5 risks), so the tail is compared by direction and selection only
        np.testing.assert_allclose(traj.W[s, :EXACT], Ws[:EXACT], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(traj.max_prob[s, :EXACT], pmax[:EXACT], rtol=1e-12)
        assert correlation(traj.W[s, -1], Ws[-1]) > 0.999
        np.testing.assert_array_equal(traj.selected()[s], final.argmax(-1))


def test_default_init_is_the_nn_linear_law():
    W = default_init(range(200), 10)
    bound = 1 / math.sqrt(10)
    assert W.shape == (200, 10, 10) and W.dtype == torch.float64
    assert W.abs().max() <= bound and W.abs().max() > 0.99 * bound
    assert abs(W.var().item() - bound**2 / 3) < 0.05 * bound**2 / 3
    # same law and generator as nn.Linear when its global RNG is seeded the same way
    torch.manual_seed(4)
    linear = torch.nn.Linear(10, 10, bias=False)
    np.testing.assert_array_equal(
        default_init([4], 10)[0].numpy(), linear.weight.detach().double().T.numpy()
    )
    K, Q = default_init([1, 2], 10, "KQ", m=7)
    assert K.shape == Q.shape == (2, 10, 7)
    np.testing.assert_array_equal(default_init([1, 2], 10, "KQ", m=7)[0], K)


def test_visualization_init_and_normalised_step_length():
    K, Q = visualization_init([0], 2, "KQ")
    assert torch.all(Q == 0) and torch.any(K != 0)
    problem = AttentionProblem.from_instances(paper_instances(2, 3, 4, 5))
    traj = train(problem, visualization_init([0, 1], 5), steps=20, checkpoints=range(21))
    steps = np.linalg.norm(np.diff(traj.W, axis=1), axis=(-2, -1))
    np.testing.assert_allclose(steps, 0.1, rtol=1e-12)  # every step has length lr


def test_trajectory_helpers():
    problem = AttentionProblem.from_instances(paper_instances(2, 3, 4, 5))
    traj = train(problem, default_init([0, 1], 5), steps=30, checkpoints=[0, 10])
    np.testing.assert_array_equal(traj.checkpoints, [0, 10, 30])
    corr = traj.correlations(traj.final_W)
    np.testing.assert_allclose(corr[:, -1], 1.0)
    assert traj.selected().shape == (2, 3) and traj.at(10) == 1
    with pytest.raises(ValueError, match="checkpoint"):
        traj.at(11)
    with pytest.raises(ValueError, match="steps"):
        train(problem, default_init([0, 1], 5), steps=0)
