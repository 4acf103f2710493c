"""Issue 33's cheaper paths of ADT, MrTransformer, BiCAT's generation and SMM against the paths
they replaced (written out here as they were), in float64 with dropout off: the same states,
terms, gradients and generated items.

- ADT: rows in groups of similar length (``row_groups``), the decoder on its
  ``nn.MultiheadAttention`` weights without the module's call, the terms batched over layers;
  before, the whole window and torch's ``MultiheadAttention``.
- MrTransformer: the partner encoded in length groups; before, at the whole window.
- BiCAT's generation: only rows still generating, sorted, windows cut to their longest row;
  before, every row of a batch every round at the full window.
- SMM: trained through ``last_hidden`` (its last layer one query); before, ``forward``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnsvm.rec.data.batches import windows
from attnsvm.rec.data.sequences import Sequences
from attnsvm.rec.data.transforms import reverse_rows
from attnsvm.rec.models import adt, build_model, mrtransformer
from attnsvm.rec.models.row_groups import groups_by_length, scatter_rows
from attnsvm.rec.models.sasrec import SASRec
from attnsvm.rec.nn.attention import attention_mask
from attnsvm.rec.nn.losses import full_ce_loss
from attnsvm.rec.train.generate import generate_prior_items

NUM_ITEMS, LENGTH = 30, 10
SMALL = {"hidden_size": 16, "ffn_size": 16, "num_heads": 2, "max_len": LENGTH}
OFF = {"dropout": 0.0, "attention_dropout": 0.0}
CLOSE = {"atol": 1e-10, "rtol": 0.0}


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def batch(lengths=(10, 7, 4, 1, 9, 2)) -> torch.Tensor:
    """Left-padded rows of these lengths."""
    generator = torch.Generator().manual_seed(0)
    seq = torch.randint(1, NUM_ITEMS + 1, (len(lengths), LENGTH), generator=generator)
    for row, length in enumerate(lengths):
        seq[row, : LENGTH - length] = 0
    return seq


def large_weights(model: torch.nn.Module, std: float = 0.3) -> torch.nn.Module:
    """Every matrix redrawn at ``std``, so each part moves the outputs well above rounding."""
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.ndim > 1:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)
    return model


# -- the groups ------------------------------------------------------------------------------------


def test_groups_cover_every_row_once_each_cut_to_its_longest_row_at_the_least_cost():
    lengths = torch.tensor([5, 1, 9, 9, 2, 0, 7, 5, 3])
    valid = torch.arange(10)[None, :] >= 10 - lengths[:, None]
    for overhead in (0.0, 3.0, 8.0, 100.0):
        groups = groups_by_length(valid, overhead)
        rows = torch.cat([r for r, _ in groups])
        assert sorted(rows.tolist()) == list(range(len(lengths)))
        for members, width in groups:
            assert width == max(1, int(lengths[members].max()))
        cost = sum(len(r) * w + overhead for r, w in groups)
        # brute force: every split of the sorted rows into contiguous groups
        ordered = sorted(max(1, int(v)) for v in lengths)
        best = min(
            sum(len(part) * max(part) + overhead for part in np.split(ordered, list(cuts)))
            for k in range(len(ordered))
            for cuts in itertools.combinations(range(1, len(ordered)), k)
        )
        assert cost == pytest.approx(best)
    assert len(groups_by_length(valid, 0.0)) == len(set(lengths.clamp(min=1).tolist()))
    assert len(groups_by_length(valid, 1e9)) == 1


def test_scatter_puts_each_groups_states_back_in_its_rows_right_aligned():
    seq = batch()
    groups = groups_by_length(seq != 0, 2.0)
    states = [seq[rows][:, -width:, None].double() for rows, width in groups]
    torch.testing.assert_close(scatter_rows(groups, states, LENGTH)[..., 0], seq.double())


# -- ADT -------------------------------------------------------------------------------------------


def old_adt(model, seq: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Hidden states and every layer term as ADT computed them before: the whole window, the
    decoder through torch's ``MultiheadAttention``, one term at a time."""
    inputs, heads = [], []
    hooks = [
        b.register_forward_pre_hook(lambda _, a: inputs.append(a[0])) for b in model.encoder.blocks
    ]
    hooks += [
        b.attention.out_proj.register_forward_pre_hook(lambda _, a: heads.append(a[0]))
        for b in model.encoder.blocks
    ]
    hidden = SASRec.forward(model, seq)
    for hook in hooks:
        hook.remove()
    shifted = F.pad(seq[:, :-1], (1, 0))
    count = model.config.num_heads
    blocked = [
        (~attention_mask(keys != 0, causal=True)).expand(-1, count, -1, -1).flatten(0, 1)
        for keys in (shifted, seq)
    ]
    x, decoded = model.embed(shifted), []
    for layer in model.disentangling["decoder"]:
        normed = layer.norm(x)
        attended = layer.self_attention(
            normed, normed, normed, attn_mask=blocked[0], need_weights=False
        )[0]
        attended = layer.cross_attention(
            attended, hidden, hidden, attn_mask=blocked[1], need_weights=False
        )[0]
        x = (normed + attended + layer.ffn(attended)) * (shifted != 0).unsqueeze(-1)
        decoded.append(x)
    valid, window = (seq != 0).double(), len(seq) * model.config.max_len
    terms = {}
    for layer in range(model.config.num_blocks):
        error = (inputs[layer] - decoded[-1 - layer]).pow(2).mean(-1)
        terms[f"reconstruction_{layer + 1}"] = (error * valid).sum() / window
        outputs = heads[layer].view(*seq.shape, count, -1)
        log_probs = model.disentangling["head_classifiers"][layer](outputs).log_softmax(-1)
        nll = -log_probs.diagonal(dim1=-2, dim2=-1).mean(-1)
        terms[f"independence_{layer + 1}"] = (nll * valid).sum() / window
    return hidden, terms


def test_adt_grouped_step_equals_the_whole_window_step_in_states_terms_and_gradients(monkeypatch):
    monkeypatch.setattr(adt, "GROUP_OVERHEAD", 1.0)  # tiny rows: group them as a real batch would
    torch.manual_seed(0)
    weights = {"reconstruction_weights": "0.1,0.2", "independence_weights": "0.3,0.4"}
    model = large_weights(build_model("adt", NUM_ITEMS, **SMALL, **OFF, **weights).double())
    model.train()
    seq = batch()
    probe = torch.randn(*seq.shape, 16, generator=torch.Generator().manual_seed(1)).double()
    names = [name for name, weight in model.auxiliary_weights().items() if weight]
    results = []
    for path in ("old", "new"):
        model.zero_grad()
        if path == "old":
            hidden, terms = old_adt(model, seq)
        else:
            hidden = model(seq)
            assert len(model._trace) > 1  # the rows really ran in groups
            terms = model.auxiliary_losses(names, seq, hidden)
        loss = (hidden * probe).sum() + sum(terms.values())
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((hidden.detach(), {k: v.detach() for k, v in terms.items()}, grads))
    (old_hidden, old_terms, old_grads), (hidden, terms, grads) = results
    torch.testing.assert_close(hidden, old_hidden, **CLOSE)
    assert set(terms) == set(old_terms) and min(v.item() for v in old_terms.values()) > 1e-3
    for name in old_terms:
        torch.testing.assert_close(terms[name], old_terms[name], **CLOSE)
    assert set(grads) == set(old_grads)
    for name in old_grads:
        torch.testing.assert_close(grads[name], old_grads[name], **CLOSE)


def test_adt_positions_mean_divides_by_the_real_positions_of_every_group():
    torch.manual_seed(0)
    model = build_model(
        "adt", NUM_ITEMS, **SMALL, **OFF, independence_weights="1", aux_mean="positions"
    )
    model = model.double().train()
    seq = batch()
    window = model.auxiliary_losses(["independence_1"], seq, model(seq))["independence_1"]
    _, old_terms = old_adt(model, seq)
    scale = len(seq) * LENGTH / int((seq != 0).sum())
    torch.testing.assert_close(window, old_terms["independence_1"] * scale, **CLOSE)


# -- MrTransformer ---------------------------------------------------------------------------------


def test_mrtransformer_encoded_in_groups_equals_the_whole_window(monkeypatch):
    """Item states, preferences and their attention; training's forward runs in groups."""
    monkeypatch.setattr(mrtransformer, "GROUP_OVERHEAD", 1.0)
    torch.manual_seed(0)
    model = large_weights(build_model("mrtransformer", NUM_ITEMS, **SMALL, **OFF).double())
    seq = batch()
    with torch.no_grad():
        assert len(groups_by_length(seq != 0, mrtransformer.GROUP_OVERHEAD)) > 1
        grouped, whole = model.encode_in_groups(seq), model.encode(seq)
        for part, expected in zip(grouped, whole, strict=True):
            torch.testing.assert_close(part, expected, **CLOSE)
        assert whole[1].abs().amax(-1).min() > 0.1
        torch.testing.assert_close(model.train()(seq), model.eval()(seq), **CLOSE)


# -- BiCAT's generation ----------------------------------------------------------------------------


def old_generation(model, contexts: Sequences, items: int, below: int, batch_size: int):
    """Every row of a batch scored every round at the full window, as before."""
    max_len = model.config.max_len
    reversed_rows = reverse_rows(contexts)
    lengths = contexts.lengths
    wanted = np.minimum(np.maximum(below - lengths, 0), items)
    active = np.flatnonzero(wanted > 0)
    generated = {}
    with torch.no_grad():
        for start in range(0, active.size, batch_size):
            rows = active[start : start + batch_size]
            starts = reversed_rows.offsets[rows]
            sequence = torch.from_numpy(
                windows(reversed_rows.items, starts, starts + lengths[rows], max_len)
            )
            seen = torch.zeros(rows.size, model.num_items + 1, dtype=torch.bool)
            for index, row in enumerate(rows):
                seen[index, torch.from_numpy(contexts.row(int(row)))] = True
            seen[:, 0] = True
            picked = []
            for _ in range(int(wanted[rows].max())):
                best = model.score_last(sequence).masked_fill(seen, float("-inf")).argmax(1)
                picked.append(best)
                seen[torch.arange(rows.size), best] = True
                sequence = torch.cat([sequence[:, 1:], best[:, None]], dim=1)
            for index, row in enumerate(rows):
                generated[int(row)] = [int(p[index]) for p in picked][: wanted[row]]
    return generated


def test_generation_gives_the_items_of_one_full_window_round_per_row():
    torch.manual_seed(0)
    model = large_weights(build_model("bicat", NUM_ITEMS, **SMALL, **OFF).double()).eval()
    rng = np.random.default_rng(0)
    rows = [
        rng.choice(np.arange(1, NUM_ITEMS + 1), size=n, replace=False).tolist()
        for n in (1, 3, 8, 2, 12, 5, 7, 1, 4)
    ]
    contexts = Sequences.from_lists(rows)
    expected = old_generation(model, contexts, items=6, below=9, batch_size=4)
    generated = generate_prior_items(model, contexts, items=6, below=9, batch_size=3)
    assert sum(map(len, expected.values())) > 20
    for row in range(len(contexts)):
        assert generated.row(row).tolist() == expected.get(row, []), row


# -- SMM -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("options", [{}, {"cope": True}, {"sep": True}])
def test_smm_trains_through_the_last_query_with_the_forwards_value_and_gradient(options):
    torch.manual_seed(0)
    model = build_model("smm", NUM_ITEMS, **SMALL, **OFF, **options).double()
    model = large_weights(model).train()
    seq = model.scoring_input(batch()[:, 2:])
    assert model.training_forward([]) == model.last_position
    targets = torch.tensor([3, 9, 14, 21, 2, 30])
    results = []
    for hidden_of in (lambda s: model(s)[:, -1], lambda s: model.training_forward([])(s)[:, -1]):
        model.zero_grad()
        hidden = hidden_of(seq)
        full_ce_loss(hidden, targets, model.output_embedding(), model.output_bias()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((hidden.detach(), grads))
    torch.testing.assert_close(results[1][0], results[0][0], **CLOSE)
    assert results[0][0].abs().amax(1).min() > 0.1
    assert set(results[1][1]) == set(results[0][1])
    for name, grad in results[0][1].items():
        torch.testing.assert_close(results[1][1][name], grad, **CLOSE)
