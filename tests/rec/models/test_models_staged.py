"""ADT, BiCAT and MrTransformer: each auxiliary term against its definition, written out."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnsvm.rec.models import LossConfig, build_model
from attnsvm.rec.models.adt import layer_weights
from attnsvm.rec.models.mrtransformer import PreferenceSwap, attention_overlap, coverage_loss
from attnsvm.rec.nn.attention import attention_mask

NUM_ITEMS, LENGTH = 30, 8
SMALL = {"hidden_size": 16, "ffn_size": 16, "num_heads": 2, "max_len": LENGTH}


def batch(seed: int = 0, rows: int = 4) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    seq = torch.randint(1, NUM_ITEMS + 1, (rows, LENGTH), generator=generator)
    seq[1, :3] = 0
    seq[2, :6] = 0
    return seq


def bce_step(model, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The main loss of a training step (BCE, fixed negatives) on a fixed dropout draw."""
    torch.manual_seed(5)
    hidden = model(inputs)
    mask = targets != 0
    negatives = (targets[mask] % NUM_ITEMS + 1)[:, None]
    loss = LossConfig(name="bce").compute(
        hidden[mask], targets[mask], model.output_embedding(), None, negatives
    )
    loss.backward()
    return loss


# -- ADT ------------------------------------------------------------------------------------------


def test_adt_with_zero_weights_is_sasrec_to_the_bit_in_losses_and_gradients():
    torch.manual_seed(0)
    sasrec = build_model("sasrec", NUM_ITEMS, **SMALL).train()
    torch.manual_seed(0)
    adt = build_model("adt", NUM_ITEMS, **SMALL).train()
    backbone = sasrec.state_dict()
    assert all(torch.equal(adt.state_dict()[name], value) for name, value in backbone.items())
    assert all(weight == 0 for weight in adt.auxiliary_weights().values())
    data = batch()
    inputs, targets = data[:, :-1], data[:, 1:]
    assert torch.equal(bce_step(adt, inputs, targets), bce_step(sasrec, inputs, targets))
    adt_parameters = dict(adt.named_parameters())
    for name, parameter in sasrec.named_parameters():
        assert torch.equal(adt_parameters[name].grad, parameter.grad), name
    for name, parameter in adt.disentangling.named_parameters():
        assert parameter.grad is None, name  # the decoder and classifiers never ran
    assert adt._trace is None


def test_adt_terms_follow_their_definitions():
    torch.manual_seed(0)
    overrides = {"reconstruction_weights": "0.1,0.2", "independence_weights": "0.3,0.4"}
    adt = build_model("adt", NUM_ITEMS, **SMALL, **overrides, aux_mean="positions").double()
    adt.eval()  # no dropout: the terms recomputed below see the same numbers
    adt._traced = lambda: True  # trace in eval mode too
    data = batch()
    hidden = adt(data)
    names = [n for n, w in adt.auxiliary_weights().items() if w]
    terms = adt.auxiliary_losses(names, data, hidden)
    valid = data != 0
    # layer inputs: the embedding, then each block's output
    x = adt.embed(data)
    keep = attention_mask(valid, causal=True)
    inputs, heads = [], []
    attention = adt.encoder.blocks[0].attention
    hook = attention.out_proj.register_forward_pre_hook(lambda _, args: heads.append(args[0]))
    for block in adt.encoder.blocks:
        inputs.append(x)
        x = block(x, keep)
    hook.remove()
    decoded = adt.decode(data, hidden)
    for layer in range(2):
        error = (inputs[layer] - decoded[1 - layer]).pow(2).mean(-1)[valid].mean()
        torch.testing.assert_close(terms[f"reconstruction_{layer + 1}"], error)
    # independence: each head's output through the layer's classifier, labelled by its index
    heads = heads[0].view(*data.shape, 2, -1)
    log_probs = adt.disentangling["head_classifiers"][0](heads).log_softmax(-1)
    nll = -(log_probs[..., 0, 0] + log_probs[..., 1, 1]) / 2
    torch.testing.assert_close(terms["independence_1"], nll[valid].mean())


def test_adt_official_weighting_quirk_is_a_switch():
    options = {**SMALL, "independence_weights": "0.1,0.000607"}
    assert build_model("adt", NUM_ITEMS, **options).independence == (0.1, 0.000607)
    quirk = build_model("adt", NUM_ITEMS, **options, independence_last_layer_weight=True)
    assert quirk.independence == (0.000607, 0.000607)
    assert layer_weights("0.5", 3, "x") == (0.5, 0.5, 0.5)
    with pytest.raises(ValueError, match="one weight ≥ 0 per layer"):
        layer_weights("0.1,0.2,0.3", 2, "x")


def test_adt_presets_carry_the_official_lambdas():
    model = build_model("adt-ml-1m", NUM_ITEMS, max_len=LENGTH, hidden_size=16, ffn_size=16)
    weights = model.auxiliary_weights()
    assert weights["reconstruction_1"] == 0.104292 and weights["independence_2"] == 0.000607
    assert weights["embedding_norm"] == 1e-3


# -- BiCAT ----------------------------------------------------------------------------------------


def test_bicat_kl_is_zero_for_equal_streams_and_positive_and_symmetric_otherwise():
    torch.manual_seed(0)
    model = build_model("bicat", NUM_ITEMS, **SMALL, kl_weight=1.0).double().eval()
    data = batch()
    hidden = model(data)
    assert model.kl_term(data, hidden, data).item() == 0.0
    original = data.clone()
    original[:, :2] = 0  # as if the first two items were a synthetic prefix
    kl = model.kl_term(data, hidden, original)
    assert kl.item() > 0
    p, q = hidden.softmax(-1), model(original).softmax(-1)
    both = 0.5 * ((p * (p / q).log()).sum(-1) + (q * (q / p).log()).sum(-1)) / p.shape[-1]
    expected = (both * (data != 0)).sum() / (len(data) * LENGTH)  # the window mean
    torch.testing.assert_close(kl, expected)


def test_bicat_forward_term_is_the_bce_of_the_chronological_row():
    torch.manual_seed(0)
    model = build_model(
        "bicat", NUM_ITEMS, **SMALL, forward_weight=0.4, forward_negatives="none"
    ).double()
    model.eval()
    row = batch(1)[:, :]  # (B, L) read as a row ending in its final target
    source = torch.cat([torch.zeros(len(row), 1, dtype=torch.long), row], dim=1)
    term = model.forward_term(source)
    inputs, targets = source[:, :-1], source[:, 1:]
    hidden = model(inputs)
    scores = (hidden * model.output_embedding()[targets]).sum(-1)
    expected = (F.softplus(-scores) * (inputs != 0)).sum() / (len(row) * LENGTH)
    torch.testing.assert_close(term, expected)
    assert model.auxiliary_streams() == ("source",)
    assert build_model("bicat", NUM_ITEMS, **SMALL).auxiliary_streams() == ()


# -- MrTransformer --------------------------------------------------------------------------------


def brute_force_coverage(attention: torch.Tensor) -> torch.Tensor:
    total = 0.0
    batch_size, tokens, length = attention.shape
    for b in range(batch_size):
        for k in range(tokens):
            for i in range(length):
                earlier = sum(float(attention[b, j, i]) for j in range(k))
                total += min(float(attention[b, k, i]), earlier)
    return torch.tensor(total / batch_size, dtype=torch.float64)


def test_coverage_loss_matches_a_brute_force_loop():
    attention = torch.rand(3, 4, 6, generator=torch.Generator().manual_seed(0)).double()
    attention = attention / attention.sum(-1, keepdim=True)
    torch.testing.assert_close(coverage_loss(attention), brute_force_coverage(attention))
    overlap = sum(
        torch.minimum(attention[:, k], attention[:, j]).sum(-1)
        for k in range(4)
        for j in range(k + 1, 4)
    )
    torch.testing.assert_close(attention_overlap(attention), overlap)
    # disjoint attention costs nothing
    disjoint = torch.eye(4, 6, dtype=torch.float64).expand(2, -1, -1)
    assert coverage_loss(disjoint).item() == 0.0


def test_the_swap_keeps_shapes_and_is_differentiable():
    torch.manual_seed(0)
    swap = PreferenceSwap(5).double()
    p_x = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    p_y = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    outputs = swap(p_x, p_y)
    assert [tuple(o.shape) for o in outputs] == [(2, 3, 5)] * 4
    assert torch.autograd.gradcheck(lambda a, b: swap(a, b), (p_x, p_y))
    sum(o.sum() for o in outputs).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in swap.parameters())


def test_mrtransformer_items_never_see_the_preference_tokens():
    torch.manual_seed(0)
    model = build_model("mrtransformer", NUM_ITEMS, **SMALL).double().eval()
    data = batch()
    items, preferences, attention = model.encode(data)
    assert preferences.shape == (4, 3, 16) and attention.shape == (4, 3, LENGTH)
    torch.testing.assert_close(attention.sum(-1) <= 1 + 1e-12, torch.ones(4, 3, dtype=torch.bool))
    assert (attention[data[:, None, :].expand(-1, 3, -1) == 0] == 0).all()
    with torch.no_grad():
        # move every preference token (not by a constant, which the embedding's LayerNorm removes)
        model.items.input.weight[NUM_ITEMS + 1 :] += torch.randn(3, 16, dtype=torch.float64)
    moved_items, moved_preferences, _ = model.encode(data)
    torch.testing.assert_close(moved_items, items, atol=1e-12, rtol=0)
    assert not torch.allclose(moved_preferences, preferences)


def test_mrtransformer_terms_need_streams_only_for_the_swap():
    options = {**SMALL, "coverage_weight": 1.0}
    assert build_model("mrtransformer", NUM_ITEMS, **options).auxiliary_streams() == ()
    swap = build_model("mrtransformer", NUM_ITEMS, **SMALL, swap_weight=1.0)
    assert swap.auxiliary_streams() == ("source", "partner")
    torch.manual_seed(0)
    swap.train()
    data = batch()
    hidden = swap(data)
    source = torch.cat([data, data[:, -1:]], dim=1)
    partner = torch.cat([batch(2), batch(2)[:, -1:]], dim=1)
    term = swap.auxiliary_losses(["swap"], data, hidden, source=source, partner=partner)
    term["swap"].backward()
    assert torch.isfinite(term["swap"]) and swap.swap.match.weight.grad.abs().sum() > 0
