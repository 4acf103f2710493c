"""The every-prefix models' cheaper step computes what the step computed before (issue 33).

BSARec, MaTrRec and AC-TSR train objective "last" through ``last_hidden`` (the trainer's
``training_forward``), whose last layer computes one query instead of L. It must be the function
``forward(…)[:, -1]`` is, in value and in gradient (float64, weights drawn large enough that
every term moves the output), and its last layer must really compute that one query. BSARec's
low-pass is a product with a basis of the kept frequencies: the official FFT filter, in float64.
(AdaMCT's cut windows: ``test_zoo_models``' padding tests.)
"""

import pytest
import torch
from zoo_helpers import MAX_LEN, NUM_ITEMS, make_model, one_thread

from attnsvm.rec.models.bsarec import FrequencyFilter
from attnsvm.rec.nn.attention import record_attention
from attnsvm.rec.nn.losses import full_ce_loss

LAST_QUERY = ("bsarec", "matrrec", "actsr")
CLOSE = {"atol": 1e-10, "rtol": 0.0}


@pytest.fixture(autouse=True)
def _single_thread():
    with one_thread():
        yield


def windows() -> torch.Tensor:
    """Four windows: full, left-padded, a single item, full again."""
    seq = torch.randint(1, NUM_ITEMS + 1, (4, MAX_LEN), generator=torch.Generator().manual_seed(3))
    seq[1, :3] = 0
    seq[2, :-1] = 0
    return seq


def model64(name: str) -> torch.nn.Module:
    """The model in float64 with every weight at std 0.3 (AC-TSR's calibrators and gate, the
    Fourier β and the scan's projections then move the last position well above rounding)."""
    model = make_model(name).double()
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for parameter_name, parameter in model.named_parameters():
            if parameter.ndim > 1 and "A_log" not in parameter_name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return model


@pytest.mark.parametrize("name", LAST_QUERY)
def test_last_hidden_is_the_forwards_last_position(name: str) -> None:
    model = model64(name).eval()
    seq = windows()
    with torch.no_grad():
        full = model(seq)[:, -1]
        torch.testing.assert_close(model.last_hidden(seq), full, **CLOSE)
        torch.testing.assert_close(model.score_last(seq), model.logits(full), **CLOSE)
    assert full.abs().amax(dim=1).min() > 0.1  # every row a real output, not a vacuous zero


def test_actsr_perturbed_stream_draws_the_full_forwards_noise() -> None:
    """The attack step's last query reads the same ε as the full forward: the last row of the
    whole (B, H, L, L) draw, so the random stream after it is the same too."""
    model = model64("actsr").eval()
    seq = windows()
    torch.manual_seed(4)
    full = model(seq, stream="perturbed")[:, -1]
    after_full = torch.rand(())
    torch.manual_seed(4)
    last = model.last_hidden(seq, stream="perturbed")
    torch.testing.assert_close(last, full, **CLOSE)
    assert torch.equal(torch.rand(()), after_full)


def test_actsr_attack_forward_on_length_groups_is_the_full_windows() -> None:
    """The attack step cuts padding per length group (here cuts of 1, 5, 8 and 8 columns): under
    the same seed, its last position, every layer's mask penalty and the attack objective's
    gradient are the full window's perturbed forward's."""
    model = model64("actsr").train()
    seq, targets = windows(), torch.tensor([3, 9, 14, 21])
    results = []
    for hidden_of in (
        lambda s: model(s, stream="perturbed")[:, -1:],
        model.perturbed_last_position,
    ):
        torch.manual_seed(4)
        hidden = hidden_of(seq)
        penalty = model.mask_penalty()
        objective = penalty - full_ce_loss(hidden[:, -1], targets, model.output_embedding())
        gradients = torch.autograd.grad(objective, model.attack_parameters())
        results.append((hidden, penalty, gradients))
    (full, full_penalty, full_gradients), (grouped, penalty, gradients) = results
    torch.testing.assert_close(grouped, full, **CLOSE)
    torch.testing.assert_close(penalty, full_penalty, **CLOSE)
    assert full_penalty > 1.0  # padding rows and columns count: √(L − 1) and more
    for gradient, expected in zip(gradients, full_gradients, strict=True):
        torch.testing.assert_close(gradient, expected, **CLOSE)


@pytest.mark.parametrize("name", LAST_QUERY)
def test_last_hidden_trains_the_same_gradient(name: str) -> None:
    """CE at the last position (dropout 0): every parameter's gradient through ``last_hidden``
    equals its gradient through the full forward."""
    model = model64(name).train()
    seq, targets = windows(), torch.tensor([3, 9, 14, 21])
    gradients = []
    for hidden_of in (lambda s: model(s)[:, -1], model.last_hidden):
        model.zero_grad()
        full_ce_loss(hidden_of(seq), targets, model.output_embedding()).backward()
        gradients.append(
            {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        )
    full, last = gradients
    assert full.keys() == last.keys() and len(full) > 10
    for parameter_name, gradient in full.items():
        torch.testing.assert_close(last[parameter_name], gradient, **CLOSE, msg=parameter_name)


@pytest.mark.parametrize("name", LAST_QUERY)
def test_the_last_layer_computes_one_query(name: str) -> None:
    """What makes the step cheaper: the last attention layer gets the last query alone while
    every earlier one gets all of them (and every layer all the keys)."""
    model = model64(name).eval()
    seq = windows()
    with torch.no_grad(), record_attention(model, weights=False) as recorder:
        model.last_hidden(seq)
    *earlier, last = recorder.layer_inputs
    assert last.query.shape[1] == 1 and last.key.shape[1] == MAX_LEN
    assert all(inputs.query.shape[1] == MAX_LEN for inputs in earlier)


@pytest.mark.parametrize("name", LAST_QUERY)
def test_the_trainer_trains_last_through_the_one_query_forward(name: str) -> None:
    model = make_model(name)
    assert model.training_forward(set()) == model.last_position
    # an auxiliary term of the model's own reads every position: the full forward then
    assert model.training_forward({"term"}) is model
    if name != "bsarec":  # MaTrRec and AC-TSR may train all positions ("causal")
        causal = make_model(name, objective="causal")
        assert causal.training_forward(set()) is causal


@pytest.mark.parametrize("name", ["adamct", "ssept", "convformer", "strec"])
def test_other_models_train_through_their_forward(name: str) -> None:
    """AdaMCT's squeeze-excitation reads every position of its last layer: no one-query path."""
    model = make_model(name)
    assert not model.trains_last_hidden
    assert model.training_forward(set()) is model


@pytest.mark.parametrize(
    ("length", "cutoff"), [(8, 5), (8, 7), (8, 9), (7, 7), (50, 5), (200, 9), (3, 20)]
)
def test_bsarec_low_pass_is_the_official_fft_filter(length: int, cutoff: int) -> None:
    """``U Uᵀ x`` against ``irfft(rfft(x) with bins ≥ c // 2 + 1 zeroed)`` (both "ortho"), with
    the Nyquist bin cut or kept, every bin kept, and at the last position alone."""
    low_pass = FrequencyFilter(4, cutoff, 0.0).double().low_pass
    generator = torch.Generator().manual_seed(length)
    x = torch.randn(3, length, 4, dtype=torch.float64, generator=generator)
    spectrum = torch.fft.rfft(x, dim=1, norm="ortho")
    spectrum[:, cutoff // 2 + 1 :] = 0
    official = torch.fft.irfft(spectrum, n=length, dim=1, norm="ortho")
    torch.testing.assert_close(low_pass(x), official, atol=1e-12, rtol=0)
    torch.testing.assert_close(low_pass(x, slice(-1, None)), official[:, -1:], atol=1e-12, rtol=0)
    if cutoff // 2 + 1 < length // 2 + 1:  # some bins cut: not the identity
        assert (official - x).abs().max() > 0.1
