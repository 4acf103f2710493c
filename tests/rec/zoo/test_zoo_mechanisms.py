"""Each mechanism against a reference: Mamba's scan, the FFT convolution, AC-TSR's min–max
update, SSE, SSE-PT's unknown user, STRec's time input, SAM."""

import math

import pytest
import torch
from zoo_helpers import MAX_LEN, NUM_ITEMS, make_model, one_thread

from attnsvm.rec.models.actsr import adversarial_step, calibrated_parameters
from attnsvm.rec.models.convformer import CausalDepthwiseConv
from attnsvm.rec.models.matrrec import MaTrRecConfig, SequentialScan, selective_scan
from attnsvm.rec.models.strec import query_counts
from attnsvm.rec.nn.losses import full_ce_loss
from attnsvm.rec.nn.sse import StochasticSharedEmbedding, sse_replace
from attnsvm.rec.train.sam import SAM


@pytest.fixture(autouse=True)
def _single_thread():
    with one_thread():
        yield


def naive_scan(u, delta, A, B, C, D):
    """The recurrence written out one (batch, channel, state) element at a time."""
    batch, length, channels = u.shape
    states = A.shape[1]
    y = torch.zeros_like(u)
    for b in range(batch):
        for d in range(channels):
            h = [0.0] * states
            for t in range(length):
                out = 0.0
                for n in range(states):
                    h[n] = math.exp(float(delta[b, t, d] * A[d, n])) * h[n] + float(
                        delta[b, t, d] * B[b, t, n] * u[b, t, d]
                    )
                    out += float(C[b, t, n]) * h[n]
                y[b, t, d] = out + float(D[d] * u[b, t, d])
    return y


@pytest.mark.parametrize("scan", ["sequential", "parallel"])
def test_selective_scan_equals_the_naive_recurrence(scan: str) -> None:
    generator = torch.Generator().manual_seed(0)
    batch, length, channels, states = 2, 13, 3, 4

    def rand(*shape):
        return torch.randn(*shape, generator=generator)

    u = rand(batch, length, channels)
    B, C = rand(batch, length, states), rand(batch, length, states)
    delta = torch.nn.functional.softplus(rand(batch, length, channels))
    A, D = -torch.exp(rand(channels, states)), rand(channels)
    expected = naive_scan(
        u.double(), delta.double(), A.double(), B.double(), C.double(), D.double()
    )
    got = selective_scan(u, delta, A, B, C, D, scan)
    torch.testing.assert_close(got.double(), expected, atol=1e-5, rtol=1e-5)


def test_sequential_scan_gradient_is_the_recurrences() -> None:
    """``SequentialScan``'s written-out backward against finite differences (float64) and
    against autograd through the parallel scan, every input's gradient."""
    generator = torch.Generator().manual_seed(1)
    batch, length, channels, states = 2, 7, 3, 4

    def inputs():
        shapes = (
            [(batch, length, channels)] * 2 + [(channels, states)] + [(batch, length, states)] * 2
        )
        u, delta, A, B, C = (
            torch.randn(*s, generator=generator, dtype=torch.float64) for s in shapes
        )
        delta, A = torch.nn.functional.softplus(delta), -torch.exp(A)
        return [x.requires_grad_() for x in (u, delta, A, B, C)]

    sequential = inputs()
    assert torch.autograd.gradcheck(SequentialScan.apply, sequential)
    parallel = [x.detach().clone().requires_grad_() for x in sequential]
    weights = torch.randn(batch, length, channels, generator=generator, dtype=torch.float64)
    D = torch.zeros(channels, dtype=torch.float64)
    (selective_scan(*sequential, D, "sequential") * weights).sum().backward()
    (selective_scan(*parallel, D, "parallel") * weights).sum().backward()
    for ours, reference in zip(sequential, parallel, strict=True):
        torch.testing.assert_close(ours.grad, reference.grad, atol=1e-10, rtol=1e-10)


def test_matrrec_scans_agree_inside_the_model_and_padding_is_inert() -> None:
    sequential = make_model("matrrec").double().eval()
    parallel = make_model("matrrec", scan="parallel").double().eval()
    seq = torch.randint(1, NUM_ITEMS + 1, (2, MAX_LEN))
    seq[1, :3] = 0
    torch.testing.assert_close(parallel(seq), sequential(seq), atol=1e-10, rtol=0)
    torch.testing.assert_close(sequential(seq[1:, 3:]), sequential(seq)[1:, 3:], atol=1e-10, rtol=0)


def test_matrrec_mamba_ssm_backend_needs_the_package() -> None:
    try:
        import mamba_ssm  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match="mamba-ssm package"):
            MaTrRecConfig(backend="mamba_ssm")
    else:
        pytest.skip("mamba-ssm is installed; the GPU parity check belongs on a GPU machine")


@pytest.mark.parametrize("kernel", [1, 3, 8, 13])
def test_fft_convolution_equals_the_direct_one(kernel: int) -> None:
    torch.manual_seed(0)
    direct = CausalDepthwiseConv(5, kernel, init_std=1.0, fft=False).double()
    fft = CausalDepthwiseConv(5, kernel, init_std=1.0, fft=True).double()
    fft.load_state_dict(direct.state_dict())
    x = torch.randn(2, 9, 5, dtype=torch.float64)
    out = direct(x)
    torch.testing.assert_close(fft(x), out, atol=1e-10, rtol=0)
    # by hand: y_t = Σ_m w_{k−1−m} x_{t−m}
    w = direct.weight[:, 0]
    t = 6
    by_hand = sum(w[:, kernel - 1 - m] * x[:, t - m] for m in range(min(kernel, t + 1)))
    torch.testing.assert_close(out[:, t], by_hand)


def test_actsr_adversarial_step_changes_only_the_attack_projections() -> None:
    model = make_model("actsr")
    model.train()
    seq = torch.randint(1, NUM_ITEMS + 1, (6, MAX_LEN))
    targets = torch.randint(1, NUM_ITEMS + 1, (6,))

    def loss_of_hidden(hidden):
        return full_ce_loss(hidden[:, -1], targets, model.output_embedding())

    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    attack_names = {
        name
        for name, p in model.named_parameters()
        if any(p is a for a in model.attack_parameters())
    }
    assert attack_names and all("attack_" in name for name in attack_names)
    optimizer = torch.optim.SGD(model.attack_parameters(), lr=0.5)
    adversarial_step(model, seq, loss_of_hidden, optimizer)
    for name, p in model.named_parameters():
        if name in attack_names:
            assert not torch.equal(p, before[name]), name
        else:
            assert torch.equal(p, before[name]), name
            assert p.grad is None, name


def test_actsr_recommendation_loss_does_not_train_the_attack_projections() -> None:
    model = make_model("actsr")
    seq = torch.randint(1, NUM_ITEMS + 1, (6, MAX_LEN))
    loss = full_ce_loss(
        model(seq)[:, -1], torch.randint(1, NUM_ITEMS + 1, (6,)), model.output_embedding()
    )
    loss.backward()
    assert all(p.grad is None or not p.grad.any() for p in model.attack_parameters())
    trained = calibrated_parameters(model)
    assert len(trained) + len(model.attack_parameters()) == len(list(model.parameters()))
    assert model.blocks[0].attention.q_proj.weight.grad.abs().sum() > 0
    # …yet the attack mask does shape the calibrated attention
    with torch.no_grad():
        model.eval()
        out = model(seq)
        for p in model.attack_parameters():
            p.add_(torch.randn_like(p))
        assert not torch.allclose(model(seq), out)


def test_sse_replaces_at_the_given_rate_and_never_touches_padding() -> None:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 1000, (200, 50), generator=generator)
    ids[:, :10] = 0
    out = sse_replace(ids, 0.3, 1000, generator)
    assert torch.all(out[:, :10] == 0)
    assert out.min() >= 0 and out.max() <= 1000
    changed = (out != ids)[:, 10:].double().mean()
    assert abs(float(changed) - 0.3 * 999 / 1000) < 0.01
    layer = StochasticSharedEmbedding(1000, 0.3).eval()
    assert torch.equal(layer(ids), ids)
    with pytest.raises(ValueError, match="probability"):
        sse_replace(ids, 1.5, 1000)


def test_ssept_personalises_and_falls_back_to_the_unknown_user() -> None:
    model = make_model("ssept").double().eval()
    seq = torch.randint(1, NUM_ITEMS + 1, (2, MAX_LEN))
    known = model.score_last(seq, users=torch.tensor([3, 4]))
    assert not torch.allclose(known[0], model.score_last(seq, users=torch.tensor([5, 4]))[0])
    unknown = model.score_last(seq)
    torch.testing.assert_close(model.score_last(seq, users=torch.tensor([20, 999])), unknown)
    assert model.output_embedding().shape == (NUM_ITEMS + 1, model.config.hidden_size)
    with pytest.raises(ValueError, match="item ids must lie"):
        model.score_last(seq + NUM_ITEMS, users=torch.tensor([3, 4]))


def test_strec_needs_timestamps_and_uses_them() -> None:
    model = make_model("strec").double().eval()
    seq = torch.randint(1, NUM_ITEMS + 1, (2, MAX_LEN))
    with pytest.raises(ValueError, match="STRec needs timestamps"):
        model(seq)
    slow = torch.arange(MAX_LEN, dtype=torch.float64).expand(2, -1) * 3600.0
    fast = slow.clone()
    fast[:, :4] = fast[:, :4] * 50  # earlier events much further back in time
    assert model(seq, slow).shape == (2, 1, model.config.hidden_size)
    assert not torch.allclose(model(seq, slow), model(seq, fast))
    assert query_counts(50, 3) == [14, 4, 1]


def _sam_step(start: torch.Tensor, rho: float, lr: float) -> tuple[float, torch.Tensor]:
    weights = torch.nn.Parameter(start.clone())
    optimizer = SAM([weights], torch.optim.SGD, rho=rho, lr=lr)

    def closure() -> float:
        optimizer.zero_grad()
        loss = ((weights - 0.5) ** 4).sum()
        loss.backward()
        return float(loss.detach())

    return optimizer.step(closure), weights.detach()


def test_sam_step_is_the_two_pass_update_by_hand() -> None:
    w0, rho, lr = torch.tensor([1.0, -2.0]), 0.1, 0.01
    g = 4 * (w0 - 0.5) ** 3
    perturbed = w0 + rho * g / g.norm()
    value, after = _sam_step(w0, rho, lr)
    assert value == pytest.approx(float(((w0 - 0.5) ** 4).sum()))
    torch.testing.assert_close(after, w0 - lr * 4 * (perturbed - 0.5) ** 3)
    # ρ = 0 is the base optimiser
    torch.testing.assert_close(_sam_step(w0, 0.0, lr)[1], w0 - lr * g)
    with pytest.raises(ValueError, match="rho"):
        SAM([torch.nn.Parameter(w0)], torch.optim.SGD, rho=-1.0, lr=lr)


def test_sam_resumes_and_follows_a_scheduler_like_its_base() -> None:
    weights = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    optimizer = SAM([weights], torch.optim.AdamW, rho=0.05, lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5)
    assert optimizer.base.param_groups[0]["lr"] == pytest.approx(0.05)

    def closure() -> float:
        optimizer.zero_grad()
        loss = (weights**2).sum()
        loss.backward()
        return float(loss.detach())

    optimizer.step(closure)
    scheduler.step()
    again = SAM([torch.nn.Parameter(weights.detach().clone())], torch.optim.AdamW, lr=0.1)
    again.load_state_dict(optimizer.state_dict())
    assert int(again.base.state[again.param_groups[0]["params"][0]]["step"]) == 1
