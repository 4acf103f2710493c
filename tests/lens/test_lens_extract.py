"""The logits convention (X_i W z_i = the model's pre-softmax logits) and the token scores."""

import numpy as np
import pytest
import torch

from attnsvm.lens.extract import LensError, extract, float64_copy, head_grid
from attnsvm.lens.scores import counterfactual_scores, forced_target_logits, linear_scores
from attnsvm.rec.models import build_model
from attnsvm.rec.nn.attention import record_attention


def _model(norm: str, heads: int = 2, biases: bool = True):
    torch.manual_seed(0)
    model = build_model(
        "sasrec",
        30,
        hidden_size=16,
        ffn_size=16,
        num_blocks=2,
        num_heads=heads,
        max_len=8,
        norm=norm,
        init_std=0.3,
    )
    with torch.no_grad():
        for attention in model.attention_modules():
            for projection in (attention.q_proj, attention.k_proj, attention.v_proj):
                if biases:
                    projection.bias.normal_()
                else:
                    projection.bias.zero_()
    return float64_copy(model)


def _windows():
    seq = torch.randint(1, 31, (5, 8), generator=torch.Generator().manual_seed(1))
    seq[0, :3] = 0
    seq[1, :7] = 0
    return seq


def _module_logits(model64, seq, layer, head):
    """q·k/√d_h of the last query straight from the layer's own nn.Linear calls."""
    with record_attention(model64, weights=False) as recorder:
        model64(seq)
    attention = model64.attention_modules()[layer]
    inputs = recorder.layer_inputs[layer]
    d_h = 16 // attention.num_heads
    rows = slice(head * d_h, (head + 1) * d_h)
    q = attention.q_proj(inputs.query[:, -1])[:, rows]
    k = attention.k_proj(inputs.key)[..., rows]
    return (torch.einsum("nd,ntd->nt", q, k) / d_h**0.5).detach().numpy()


@pytest.mark.parametrize("norm", ["sasrec", "pre", "post"])
@pytest.mark.parametrize("biases", [True, False])
def test_X_W_z_are_the_pre_softmax_logits(norm, biases):
    model64, seq = _model(norm, biases=biases), _windows()
    valid = (seq != 0).numpy()
    for view in extract(model64, seq, head_grid(model64, None, None)):
        reference = _module_logits(model64, seq, view.layer, view.head)
        np.testing.assert_allclose(view.logits()[valid], reference[valid], rtol=1e-12, atol=1e-12)
        logits = view.logits()
        softmax = np.exp(logits - logits.max(1, keepdims=True))
        np.testing.assert_allclose(
            softmax / softmax.sum(1, keepdims=True), view.attention, atol=1e-13
        )
        # the softmax-invariant row only shifts every logit of a sequence by one number
        shifted = np.einsum("ntp,np->nt", view.X, view.Z @ view.W_selection.T)
        gap = np.where(valid, logits - shifted, np.nan)
        np.testing.assert_allclose(np.nanmax(gap, 1), np.nanmin(gap, 1), atol=1e-12)
        if not biases:
            np.testing.assert_allclose(view.W[:-1, -1], 0.0, atol=0)
            np.testing.assert_allclose(view.W[-1], 0.0, atol=0)


@pytest.mark.parametrize("norm", ["sasrec", "pre", "post"])
def test_forcing_the_models_own_attention_reproduces_its_logit(norm):
    model64, seq = _model(norm), _windows()
    targets = np.array([1, 2, 3, 4, 5])
    with torch.inference_mode():
        expected = model64.score_last(seq)[torch.arange(5), torch.from_numpy(targets)].numpy()
    for view in extract(model64, seq, head_grid(model64, None, None)):
        mixing = torch.from_numpy(view.attention)[:, None, :]
        got = forced_target_logits(model64, seq, targets, view.layer, view.head, mixing)[:, 0]
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_counterfactual_score_is_a_full_forward_with_one_hot_attention():
    """Brute force: patch the head so its last query attends to token t alone, run the model."""
    model64, seq = _model("sasrec"), _windows()
    targets = np.array([1, 2, 3, 4, 5])
    layer, head = 0, 1
    scores = counterfactual_scores(model64, seq, targets, layer, head, chunk=2)
    import attnsvm.rec.nn.attention as module

    original = module.reference_attention
    for t in (3, 7):
        calls = []

        def forced(q, k, v, keep_mask, dropout, t=t, calls=calls):
            out, weights = original(q, k, v, keep_mask, dropout)
            calls.append(len(calls))
            if calls[-1] != layer:  # blocks call it in order; force only the chosen layer
                return out, weights
            weights = weights.clone()
            weights[:, head, -1] = 0.0
            weights[:, head, -1, t] = 1.0
            return weights @ v, weights

        module.reference_attention = forced
        try:
            with torch.inference_mode(), record_attention(model64):  # the reference path
                out = model64(seq)[:, -1]
                logits = model64.logits(out)[torch.arange(5), torch.from_numpy(targets)]
        finally:
            module.reference_attention = original
        rows = (seq[:, t] != 0).numpy()
        np.testing.assert_allclose(scores[rows, t], logits.numpy()[rows], rtol=1e-12, atol=1e-12)
    assert np.isnan(scores[1, :7]).all()


@pytest.mark.parametrize("norm", ["sasrec", "pre", "post"])
def test_linear_score_is_the_direct_path_readout_of_one_token(norm):
    """Autograd reference on the last layer: with its FFN zeroed and every LayerNorm's σ held at
    the forward's own value, the target logit is affine in the head's output at the last
    position, and its gradient read on each token's value is γ."""
    model64, seq = _model(norm), _windows()
    targets = np.array([1, 2, 3, 4, 5])
    layer, head, d_h = 1, 1, 8
    block = model64.encoder.blocks[layer]
    with torch.no_grad():
        block.ffn.outer.weight.zero_()
        block.ffn.outer.bias.zero_()
    gamma = linear_scores(model64, seq, targets, layer, head)

    def frozen_sigma(module, args, _):
        u = args[0]
        centred = u - u.mean(-1, keepdim=True)
        sigma = torch.sqrt(u.var(-1, unbiased=False, keepdim=True) + module.eps).detach()
        return centred / sigma * module.weight + module.bias

    attention = model64.attention_modules()[layer]
    rows = slice(head * d_h, (head + 1) * d_h)
    shift = torch.zeros(5, d_h, dtype=torch.float64, requires_grad=True)

    def add_shift(_, args):
        heads_out = args[0].clone()
        heads_out[:, -1, rows] = heads_out[:, -1, rows] + shift
        return (heads_out,)

    norms = [m for m in model64.modules() if isinstance(m, torch.nn.LayerNorm)]
    hooks = [m.register_forward_hook(frozen_sigma) for m in norms]
    hooks.append(attention.out_proj.register_forward_pre_hook(add_shift))
    try:
        hidden = model64(seq)[:, -1]
        logits = model64.logits(hidden)[torch.arange(5), torch.from_numpy(targets)]
        (readout,) = torch.autograd.grad(logits.sum(), shift)
    finally:
        for hook in hooks:
            hook.remove()
    with record_attention(model64, weights=False) as recorder:
        model64(seq)
    keys = recorder.layer_inputs[layer].key
    values = attention.v_proj(keys)[..., rows]
    expected = torch.einsum("ntk,nk->nt", values, readout).detach().numpy()
    valid = (seq != 0).numpy()
    np.testing.assert_allclose(gamma[valid], expected[valid], rtol=1e-10, atol=1e-12)
    assert np.isnan(gamma[~valid]).all()


def test_bad_layer_or_head_is_a_clear_error():
    model64 = _model("sasrec")
    with pytest.raises(LensError, match="layer 5 does not exist"):
        head_grid(model64, 5, None)
    with pytest.raises(LensError, match="head 2 does not exist"):
        head_grid(model64, 0, 2)
