"""Losses against naive references (values and gradients), the gBCE formula, chunked-CE memory."""

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attnsvm.rec.nn import losses
from attnsvm.rec.nn.losses import (
    bce_loss,
    full_ce_loss,
    gbce_beta,
    gbce_loss,
    sampled_softmax_loss,
)

ITEMS, DIM, ROWS, K = 40, 6, 13, 5


def problem(seed: int = 0, bias: bool = False):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(ROWS, DIM, generator=generator, dtype=torch.float64, requires_grad=True)
    embedding = torch.randn(ITEMS + 1, DIM, generator=generator, dtype=torch.float64)
    embedding.requires_grad_(True)
    out_bias = None
    if bias:
        out_bias = torch.randn(ITEMS + 1, generator=generator, dtype=torch.float64)
        out_bias.requires_grad_(True)
    positives = torch.randint(1, ITEMS + 1, (ROWS,), generator=generator)
    negatives = torch.randint(1, ITEMS + 1, (ROWS, K), generator=generator)
    return hidden, positives, embedding, out_bias, negatives


def logit(hidden, embedding, bias, n: int, item: int) -> torch.Tensor:
    value = hidden[n] @ embedding[item]
    return value + bias[item] if bias is not None else value


def grads(loss: torch.Tensor, *tensors: torch.Tensor | None) -> list[torch.Tensor]:
    present = [t for t in tensors if t is not None]
    return list(torch.autograd.grad(loss, present))


def assert_same(loss, expected, *tensors) -> None:
    torch.testing.assert_close(loss, expected, atol=1e-10, rtol=1e-10)
    for got, want in zip(grads(loss, *tensors), grads(expected, *tensors), strict=True):
        torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)


#: how per-position negatives reach their logits: gathered rows of the table, or picked from
#: every item's logit (chunks of 2 rows here, so the chunking is exercised)
PATHS = {"gather": {"DENSE_ROWS_PER_NEGATIVE": 0}, "dense": {"DENSE_CHUNK_SCORES": 2 * (ITEMS + 1)}}


@pytest.fixture(params=sorted(PATHS))
def negatives_path(request, monkeypatch) -> str:
    for name, value in PATHS[request.param].items():
        monkeypatch.setattr(losses, name, value)
    return request.param


def naive_binary(hidden, positives, embedding, bias, negatives, beta: float) -> torch.Tensor:
    """Loop form of −1/(k+1) [β log σ(s⁺) + Σ_j log(1 − σ(s⁻_j))], accidental hits skipped."""
    total = 0.0
    for n in range(len(positives)):
        term = beta * torch.log(torch.sigmoid(logit(hidden, embedding, bias, n, positives[n])))
        for item in negatives[n]:
            if item != positives[n]:
                s = logit(hidden, embedding, bias, n, item)
                term = term + torch.log(1 - torch.sigmoid(s))
        total = total - term / (negatives.shape[1] + 1)
    return total / len(positives)


@pytest.mark.parametrize("with_bias", [False, True])
def test_bce_matches_loop(with_bias: bool, negatives_path: str) -> None:
    hidden, positives, embedding, bias, negatives = problem(1, with_bias)
    negatives[0, 0] = positives[0]  # an accidental hit
    loss = bce_loss(hidden, positives, embedding, negatives, bias)
    expected = naive_binary(hidden, positives, embedding, bias, negatives, beta=1.0)
    assert_same(loss, expected, hidden, embedding, bias)


def test_shared_negatives_equal_repeated_per_position_negatives() -> None:
    hidden, positives, embedding, _, negatives = problem(2)
    shared = negatives[0]
    for fn in (bce_loss, sampled_softmax_loss):
        a = fn(hidden, positives, embedding, shared)
        b = fn(hidden, positives, embedding, shared.expand(ROWS, K))
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_gbce_beta_formula() -> None:
    # α = k/(|I| − 1) = 256/3415; β = α(t(1 − 1/α) + 1/α) = tα − t + 1
    alpha = 256 / 3415
    assert gbce_beta(256, 3416, 0.75) == pytest.approx(alpha * (0.75 * (1 - 1 / alpha) + 1 / alpha))
    assert gbce_beta(256, 3416, 0.75) == pytest.approx(0.75 * alpha + 0.25)
    assert gbce_beta(256, 3416, 0.0) == pytest.approx(1.0)  # t = 0: plain BCE
    assert gbce_beta(256, 3416, 1.0) == pytest.approx(alpha)  # t = 1: fully calibrated
    with pytest.raises(ValueError, match="t must lie in"):
        gbce_beta(4, 10, 1.5)
    with pytest.raises(ValueError, match="num_negatives"):
        gbce_beta(10, 10, 0.5)


@pytest.mark.parametrize("t", [0.0, 0.75, 1.0])
def test_gbce_matches_direct_formula(t: float, negatives_path: str) -> None:
    hidden, positives, embedding, bias, negatives = problem(3, bias=True)
    loss = gbce_loss(hidden, positives, embedding, negatives, t, bias)
    beta = gbce_beta(K, ITEMS, t)
    expected = naive_binary(hidden, positives, embedding, bias, negatives, beta)
    assert_same(loss, expected, hidden, embedding, bias)


def test_gbce_equals_bce_with_the_gamma_transform() -> None:
    """gSASRec's TF trick: BCE on γ = log(1/(σ(s⁺)^−β − 1)) equals our β-weighted positive."""
    hidden, positives, embedding, _, negatives = problem(4)
    beta = gbce_beta(K, ITEMS, 0.75)
    s_pos = (hidden * embedding[positives]).sum(-1)
    gamma = torch.log(1 / (torch.sigmoid(s_pos) ** -beta - 1))
    s_neg = torch.einsum("nd,nkd->nk", hidden, embedding[negatives])
    hit = negatives == positives[:, None]
    expected = (
        torch.nn.functional.softplus(-gamma)
        + torch.nn.functional.softplus(s_neg).masked_fill(hit, 0).sum(-1)
    ) / (K + 1)
    loss = gbce_loss(hidden, positives, embedding, negatives, 0.75)
    torch.testing.assert_close(loss, expected.mean(), atol=1e-10, rtol=0)


def naive_sampled_softmax(hidden, positives, embedding, bias, negatives, log_q) -> torch.Tensor:
    total = 0.0
    for n in range(len(positives)):
        pos = positives[n]
        items = [pos] + [i for i in negatives[n] if i != pos]
        logits = torch.stack([logit(hidden, embedding, bias, n, i) for i in items])
        if log_q is not None:
            logits = logits - log_q[torch.tensor(items)]
        total = total - torch.log_softmax(logits, 0)[0]
    return total / len(positives)


@pytest.mark.parametrize("with_log_q", [False, True])
def test_sampled_softmax_matches_loop(with_log_q: bool, negatives_path: str) -> None:
    hidden, positives, embedding, bias, negatives = problem(5, bias=True)
    negatives[2, 1] = positives[2]
    log_q = None
    if with_log_q:
        popularity = torch.arange(1, ITEMS + 2, dtype=torch.float64)
        log_q = torch.log(popularity / popularity.sum())
    loss = sampled_softmax_loss(hidden, positives, embedding, negatives, bias, log_q)
    expected = naive_sampled_softmax(hidden, positives, embedding, bias, negatives, log_q)
    assert_same(loss, expected, hidden, embedding, bias)


def test_per_position_negatives_take_the_dense_path_where_the_table_is_small(monkeypatch):
    """The rule: all items' logits where the table has ≤ 32 rows per negative, the gathered rows
    elsewhere (and always for one negative a position); both give the loop's loss."""
    taken = []
    picked = losses._picked_from_all_items
    monkeypatch.setattr(
        losses, "_picked_from_all_items", lambda *args: taken.append(1) or picked(*args)
    )
    hidden, positives, embedding, bias, negatives = problem(7, bias=True)
    for k, dense in ((1, False), (2, True), (K, True)):  # 41 rows: dense from 2 negatives on
        taken.clear()
        loss = bce_loss(hidden, positives, embedding, negatives[:, :k], bias)
        expected = naive_binary(hidden, positives, embedding, bias, negatives[:, :k], beta=1.0)
        assert_same(loss, expected, hidden, embedding, bias)
        assert bool(taken) == dense


def test_uniform_log_q_changes_nothing() -> None:
    hidden, positives, embedding, _, negatives = problem(6)
    plain = sampled_softmax_loss(hidden, positives, embedding, negatives)
    uniform = torch.full((ITEMS + 1,), -math.log(ITEMS), dtype=torch.float64)
    corrected = sampled_softmax_loss(hidden, positives, embedding, negatives, log_q=uniform)
    torch.testing.assert_close(plain, corrected, atol=1e-12, rtol=0)


def naive_ce(hidden, positives, embedding, bias) -> torch.Tensor:
    logits = hidden @ embedding[1:].T  # items 1..num_items only
    if bias is not None:
        logits = logits + bias[1:]
    return torch.nn.functional.cross_entropy(logits, positives - 1)


@pytest.mark.parametrize("chunk_size", [None, 1, 4, 13, 100])
@pytest.mark.parametrize("with_bias", [False, True])
def test_full_ce_matches_naive(chunk_size: int | None, with_bias: bool) -> None:
    hidden, positives, embedding, bias, _ = problem(7, with_bias)
    loss = full_ce_loss(hidden, positives, embedding, bias, chunk_size)
    assert_same(loss, naive_ce(hidden, positives, embedding, bias), hidden, embedding, bias)


def test_chunked_ce_is_exact_when_the_target_probability_underflows() -> None:
    # float32: the target's logit 200 below the best one gives p = e^-200 = 0 after rounding;
    # the loss must still be the exact 200 + log(1 + …), not inf or a clamp
    hidden = torch.tensor([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    embedding = torch.tensor([[0.0, 0.0], [200.0, 0.0], [0.0, 0.0], [0.0, 3.0]], requires_grad=True)
    positives = torch.tensor([2, 3])
    loss = full_ce_loss(hidden, positives, embedding, chunk_size=1)
    reference = naive_ce(hidden, positives, embedding, None)
    assert torch.isfinite(loss) and loss.item() > 99.0
    torch.testing.assert_close(loss, reference)
    loss.backward()
    g_h, g_e = torch.autograd.grad(
        naive_ce(hidden, positives, embedding, None), [hidden, embedding]
    )
    torch.testing.assert_close(hidden.grad, g_h)
    torch.testing.assert_close(embedding.grad, g_e)


def test_chunked_ce_scales_with_the_incoming_gradient_and_float32() -> None:
    hidden, positives, embedding, _, _ = problem(8)
    h32 = hidden.detach().float().requires_grad_(True)
    e32 = embedding.detach().float().requires_grad_(True)
    (3.0 * full_ce_loss(h32, positives, e32, chunk_size=5)).backward()
    reference = 3.0 * naive_ce(hidden, positives, embedding, None)
    g_h, g_e = torch.autograd.grad(reference, [hidden, embedding])
    assert h32.grad.dtype == torch.float32
    torch.testing.assert_close(h32.grad, g_h.float(), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(e32.grad, g_e.float(), atol=1e-6, rtol=1e-5)


def test_chunked_ce_under_bf16_autocast_multiplies_in_bf16_close_to_float64() -> None:
    """bf16 operands (8 mantissa bits), float32 softmax and sums: the loss and gradients stay
    within a few bf16 roundings of the exact ones, and differ from the float32 path (so the
    bf16 matmuls did run)."""
    hidden, positives, embedding, bias, _ = problem(9, True)
    reference = naive_ce(hidden, positives, embedding, bias)
    g_h, g_e, g_b = torch.autograd.grad(reference, [hidden, embedding, bias])
    results = {}
    for mode in ("float32", "bf16"):
        h32, e32, b32 = (t.detach().float().requires_grad_(True) for t in (hidden, embedding, bias))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "bf16"):
            loss = full_ce_loss(h32, positives, e32, b32, chunk_size=4)
        loss.backward()
        assert loss.dtype == h32.grad.dtype == e32.grad.dtype == torch.float32
        results[mode] = (loss.detach(), h32.grad, e32.grad, b32.grad)
        scale = 2e-2 if mode == "bf16" else 1e-5
        torch.testing.assert_close(loss.double(), reference.detach(), atol=scale, rtol=scale)
        for got, exact in zip((h32.grad, e32.grad, b32.grad), (g_h, g_e, g_b), strict=True):
            assert (got.double() - exact).abs().max() <= scale * exact.abs().max()
    assert not torch.equal(results["bf16"][1], results["float32"][1])


class LargestTensor(TorchDispatchMode):
    """Records the largest number of elements of any tensor an op produces."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else [out]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("chunk_size", [None, 128])
def test_chunked_ce_memory_is_bounded_by_the_chunk(chunk_size: int | None) -> None:
    rows, items = 1024, 500
    hidden = torch.randn(rows, 8, requires_grad=True)
    embedding = torch.randn(items + 1, 8, requires_grad=True)
    positives = torch.randint(1, items + 1, (rows,))
    with LargestTensor() as probe:
        full_ce_loss(hidden, positives, embedding, chunk_size=chunk_size).backward()
    if chunk_size is None:
        assert probe.largest >= rows * (items + 1)  # the naive path holds every logit
    else:
        assert probe.largest <= max(chunk_size * (items + 1), rows * 8)


def test_bad_shapes_name_the_argument() -> None:
    hidden, positives, embedding, _, negatives = problem(9)
    with pytest.raises(ValueError, match="positives"):
        bce_loss(hidden, positives[:-1], embedding, negatives)
    with pytest.raises(ValueError, match="negatives"):
        bce_loss(hidden, positives, embedding, negatives[:-1])
    with pytest.raises(ValueError, match="embedding"):
        full_ce_loss(hidden, positives, embedding[:, :-1])
    with pytest.raises(ValueError, match="no target positions"):
        full_ce_loss(hidden[:0], positives[:0], embedding)
