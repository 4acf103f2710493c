"""The zoo's checks for the models trained with extra objectives (ADT, BiCAT, MrTransformer):
they overfit tiny data with their auxiliary terms on, never read their target, pad cleanly,
and the lens reads their encoder's attention only."""

import numpy as np
import pytest
import torch
from zoo_helpers import MAX_LEN, NUM_ITEMS, SMALL, one_thread, overfit, tiny_sequences

from attnsvm.rec.data.batches import make_batch, make_examples
from attnsvm.rec.models import build_model, catalogue
from attnsvm.rec.nn.attention import record_attention
from attnsvm.rec.nn.losses import full_ce_loss
from attnsvm.rec.train.streams import TrainingStreams

# every auxiliary term on, at weights of the papers' order
TERMS = {
    "adt": {"reconstruction_weights": "0.1,0.1", "independence_weights": "0.1,0.1"},
    "bicat": {"forward_weight": 0.4, "kl_weight": 1.0},
    "mrtransformer": {"coverage_weight": 1.0, "swap_weight": 1.0, "pair_neighbours": 3},
}
STAGED = tuple(TERMS)
# the coverage term spreads the preference tokens' attention first, which slows memorising
STEPS = {"adt": 60, "bicat": 60, "mrtransformer": 150}


@pytest.fixture(autouse=True)
def _single_thread():
    with one_thread():
        yield


def make(name: str, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return build_model(name, NUM_ITEMS, **{**SMALL, "num_blocks": 2, **overrides})


def overfit_with_terms(model, steps: int = 60, lr: float = 1e-2) -> float:
    """Full CE plus every auxiliary term (their streams built as the trainer builds them);
    returns HR@1 of each row's last item."""
    train = tiny_sequences()
    examples = make_examples(train, model.objective)
    index = np.arange(len(examples))
    batch = make_batch(train, examples, index, model.objective, MAX_LEN)
    streams = TrainingStreams.for_model(model, train, train, examples, seed=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    weights = {name: w for name, w in model.auxiliary_weights().items() if w}
    model.train()
    for step in range(steps):
        hidden = model(batch.inputs)
        if model.objective == "causal":
            mask = batch.targets != 0
            loss = full_ce_loss(hidden[mask], batch.targets[mask], model.output_embedding())
        else:
            loss = full_ce_loss(
                hidden[:, -1], batch.targets, model.output_embedding(), model.output_bias()
            )
        terms = model.auxiliary_losses(
            list(weights), batch.inputs, hidden, **streams.batch(index, step)
        )
        loss = loss + sum(weights[name] * term for name, term in terms.items())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    padded = torch.from_numpy(train.padded(MAX_LEN + 1))
    with torch.no_grad():
        scores = model.logits(model(padded[:, :-1])[:, -1])
    return float((scores.argmax(1) == padded[:, -1]).double().mean())


@pytest.mark.parametrize("name", STAGED)
def test_registered(name: str) -> None:
    assert name in dict(catalogue())


@pytest.mark.parametrize("name", STAGED)
def test_overfits_tiny_data_with_and_without_its_terms(name: str) -> None:
    assert overfit(make(name), tiny_sequences()) == 1.0
    assert overfit_with_terms(make(name, **TERMS[name]), STEPS[name]) == 1.0


@pytest.mark.parametrize("name", ["adt", "bicat"])
def test_causal_models_never_read_later_items(name: str) -> None:
    model = make(name, **TERMS[name]).double().eval()
    generator = torch.Generator().manual_seed(0)
    seq = torch.randint(1, NUM_ITEMS + 1, (3, MAX_LEN), generator=generator)
    seq[1, :3] = 0
    hidden = model(seq)
    for t in range(3, MAX_LEN - 1):
        changed = seq.clone()
        changed[:, t + 1 :] = torch.randint(1, NUM_ITEMS + 1, changed[:, t + 1 :].shape)
        later = model(changed)
        torch.testing.assert_close(later[:, : t + 1], hidden[:, : t + 1], atol=1e-12, rtol=0)
        assert not torch.allclose(later[0, t + 1 :], hidden[0, t + 1 :])
    # padding-free, as SASRec: every real position reads a padded window like the bare one
    assert model.padding_free
    padded = torch.nn.functional.pad(seq[:, 3:], (3, 0))
    torch.testing.assert_close(model(padded)[:, 3:], model(seq[:, 3:]), atol=1e-12, rtol=0)


def test_mrtransformer_never_puts_the_target_in_the_input_and_ignores_padding() -> None:
    model = make("mrtransformer", **TERMS["mrtransformer"]).double().eval()
    train = tiny_sequences(rows=5)
    examples = make_examples(train, "last")
    batch = make_batch(train, examples, np.arange(len(examples)), "last", MAX_LEN)
    for r in range(len(examples)):
        row = train.row(int(examples.rows[r]))
        window = batch.inputs[r][batch.inputs[r] != 0].numpy()
        np.testing.assert_array_equal(window, row[: examples.ends[r]][-MAX_LEN:])
        assert int(batch.targets[r]) == row[examples.ends[r]]
    short = batch.inputs[:8, -4:]
    full = torch.nn.functional.pad(short, (MAX_LEN - 4, 0))
    torch.testing.assert_close(model(full)[:, -1], model(short)[:, -1], atol=1e-10, rtol=0)


@pytest.mark.parametrize("name", STAGED)
def test_the_lens_records_the_encoder_attention_only(name: str) -> None:
    """The decoder (ADT) and the identification layer (MrTransformer) are no lens layers: the
    recorder gets one record per encoder layer, and recording leaves the output alone."""
    model = make(name, **TERMS[name]).double().eval()
    seq = torch.randint(1, NUM_ITEMS + 1, (3, MAX_LEN), generator=torch.Generator().manual_seed(2))
    with record_attention(model) as recorder:
        recorded = model(seq)
    torch.testing.assert_close(recorded, model(seq), atol=1e-12, rtol=0)
    assert len(recorder.attention) == len(model.attention_modules()) == 2
    for weights in recorder.attention:
        torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))
