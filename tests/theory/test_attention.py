"""The batched attention model against torch autograd and the official ``SelfAttn`` conventions."""

import numpy as np
import pytest
import torch

from attnsvm.theory.attention import AttentionProblem
from attnsvm.theory.instances import multi_token_instances, paper_instances


def _problem(head: str, seeds=range(4), n=3, T=5, d=4):
    if head == "linear":
        return AttentionProblem.from_instances(paper_instances(seeds, n, T, d))
    return AttentionProblem.from_instances(multi_token_instances(seeds, n, T, d))


def _autograd_loss(problem, W):
    logits = torch.einsum("sntd,sde,sne->snt", problem.X, W, problem.Z)
    probs = torch.softmax(logits, dim=-1)
    pooled = torch.einsum("snt,sntd->snd", probs, problem.X)
    if problem.head == "linear":
        out = torch.einsum("snd,sd->sn", pooled, problem.head_param)
    else:
        out = torch.relu(torch.einsum("snd,sde->sne", pooled, problem.head_param)).sum(-1)
    return torch.log(1 + torch.exp(-problem.Y * out)).mean(-1)


@pytest.mark.parametrize("head", ["linear", "relu"])
@pytest.mark.parametrize("scale", [0.3, 3.0])
def test_closed_form_gradient_matches_autograd(head, scale):
    problem = _problem(head)
    gen = torch.Generator().manual_seed(7)
    W = scale * torch.randn(4, 4, 4, dtype=torch.float64, generator=gen)
    loss, grad, _ = problem.loss_and_grad(W)
    W_ad = W.clone().requires_grad_(True)
    reference = _autograd_loss(problem, W_ad)
    reference.sum().backward()
    np.testing.assert_allclose(loss.numpy(), reference.detach().numpy(), rtol=1e-13)
    np.testing.assert_allclose(grad.numpy(), W_ad.grad.numpy(), rtol=1e-10, atol=1e-14)


def test_kq_gradient_matches_autograd_with_ridge():
    problem = _problem("linear")
    gen = torch.Generator().manual_seed(3)
    K = torch.randn(4, 4, 6, dtype=torch.float64, generator=gen)
    Q = torch.randn(4, 4, 6, dtype=torch.float64, generator=gen)
    ridge = 0.01
    loss, dK, dQ, _ = problem.kq_loss_and_grad(K, Q, ridge)
    K_ad, Q_ad = K.clone().requires_grad_(True), Q.clone().requires_grad_(True)
    reference = _autograd_loss(problem, K_ad @ Q_ad.transpose(-1, -2)) + ridge * (
        (K_ad**2).sum((-2, -1)) + (Q_ad**2).sum((-2, -1))
    )
    reference.sum().backward()
    np.testing.assert_allclose(loss.numpy(), reference.detach().numpy(), rtol=1e-13)
    np.testing.assert_allclose(dK.numpy(), K_ad.grad.numpy(), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(dQ.numpy(), Q_ad.grad.numpy(), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("relu", [False, True])
def test_conventions_match_the_official_selfattn(relu):
    """W = W.weight.T and W = key.weight.T query.weight... as ``base.py`` computes the softmax."""
    inst = (multi_token_instances if relu else paper_instances)([5], 3, 4, 5)
    problem = AttentionProblem.from_instances(inst)
    X, _, Z, head = (torch.as_tensor(a) for a in inst.one(0))
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(5, 5, dtype=torch.float64, generator=gen)
    query = torch.randn(5, 5, dtype=torch.float64, generator=gen)
    key = torch.randn(5, 5, dtype=torch.float64, generator=gen)
    z = Z.reshape(3, 1, 5)
    # base.py: softmax(cross_input @ W(input_seq)^T), W(x) = x @ weight^T
    official_w = torch.softmax(z @ (X @ weight.T).transpose(-2, -1), dim=-1)[:, 0]
    official_kq = torch.softmax((z @ query.T) @ (X @ key.T).transpose(-2, -1), dim=-1)[:, 0]
    ours_w = problem.probs(weight.T[None])[0]
    ours_kq = problem.probs((key.T @ query)[None])[0]
    np.testing.assert_allclose(ours_w.numpy(), official_w.numpy(), rtol=1e-12)
    np.testing.assert_allclose(ours_kq.numpy(), official_kq.numpy(), rtol=1e-12)
    # output head: base.py "out @ v" or base_nonlinear.py "relu(out @ value(x)) @ ones"
    if relu:
        official_out = torch.relu(official_w[:, None] @ (X @ head))[:, 0].sum(-1)
    else:
        official_out = (official_w[:, None] @ X)[:, 0] @ head
    np.testing.assert_allclose(
        problem.output(ours_w[None])[0].numpy(), official_out.numpy(), rtol=1e-12
    )


def test_loss_is_stable_for_large_outputs():
    problem = _problem("linear")
    probs = problem.probs(torch.zeros(4, 4, 4, dtype=torch.float64))
    huge = AttentionProblem(problem.X * 1e3, problem.Y, problem.Z, "linear", problem.head_param)
    assert torch.isfinite(huge.loss(probs)).all()


def test_bad_shapes_are_reported_by_name():
    problem = _problem("linear")
    with pytest.raises(ValueError, match="head parameter"):
        AttentionProblem(problem.X, problem.Y, problem.Z, "linear", problem.head_param[:, :2])
    with pytest.raises(ValueError, match="head"):
        AttentionProblem(problem.X, problem.Y, problem.Z, "tanh", problem.head_param)


def _gradient_60_digits(problem: AttentionProblem, W: np.ndarray) -> np.ndarray:
    """dL/dW of seed 0 in 60-digit arithmetic from the same float64 inputs (linear head),
    by the plain chain rule: ``dl_it = dL/df_i · s_it (g_it − Σ_τ s_iτ g_iτ)``."""
    import mpmath

    mpmath.mp.dps = 60
    X, Y, Z = (problem.X[0].numpy(), problem.Y[0].numpy(), problem.Z[0].numpy())
    v = problem.head_param[0].numpy()
    n, _, d = X.shape
    mp = np.vectorize(mpmath.mpf, otypes=[object])
    X, Y, Z, v, W = mp(X), mp(Y), mp(Z), mp(v), mp(W)
    grad = np.full((d, d), mpmath.mpf(0), dtype=object)
    for i in range(n):
        logits = X[i] @ (W @ Z[i])
        top = max(logits)
        weights = np.array([mpmath.exp(value - top) for value in logits], dtype=object)
        s = weights / weights.sum()
        g = X[i] @ v
        f = (s * g).sum()
        dloss_df = -Y[i] / (1 + mpmath.exp(Y[i] * f)) / n
        dlogits = dloss_df * s * (g - (s * g).sum())
        grad += np.outer((dlogits[:, None] * X[i]).sum(0), Z[i])
    return grad.astype(float)


def test_closed_form_gradient_is_accurate_where_the_softmax_saturates():
    """Along a normalised-GD trajectory (1,000 steps, the softmax saturated at the end) the
    closed-form gradient agrees with a 60-digit reference to near float64 precision: the
    pairwise form keeps the cancellation in ``g − Σ s g`` out of the float64 arithmetic."""
    from attnsvm.theory.dynamics import default_init, train

    problem = AttentionProblem.from_instances(paper_instances([0], 6, 8, 10))
    trajectory = train(problem, default_init([10_000], 10), steps=1000, checkpoints=[0, 500, 1000])
    assert trajectory.max_prob[0, -1] > 0.99  # saturated: the regime where cancellation bites
    for c in range(len(trajectory.checkpoints)):
        W = trajectory.W[0, c]
        _, grad, _ = problem.loss_and_grad(torch.from_numpy(W)[None])
        reference = _gradient_60_digits(problem, W)
        error = np.linalg.norm(grad[0].numpy() - reference) / np.linalg.norm(reference)
        assert error < 1e-10, (trajectory.checkpoints[c], error)
