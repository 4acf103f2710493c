"""Every zoo model: registered, overfits tiny data, never reads its target, pads cleanly."""

import numpy as np
import pytest
import torch
from zoo_helpers import (
    MAX_LEN,
    NUM_ITEMS,
    ZOO,
    make_model,
    one_thread,
    overfit,
    run,
    tiny_sequences,
)

from attnsvm.rec.models import catalogue
from attnsvm.rec.train.objectives import make_batch, make_examples

CAUSAL_CAPABLE = ("ssept", "actsr", "convformer", "matrrec")


@pytest.fixture(autouse=True)
def _single_thread():
    with one_thread():
        yield


def random_sequences(seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    seq = torch.randint(1, NUM_ITEMS + 1, (3, MAX_LEN), generator=generator)
    seq[1, :3] = 0
    return seq


@pytest.mark.parametrize("name", ZOO)
def test_registered(name: str) -> None:
    assert name in dict(catalogue())


@pytest.mark.parametrize("name", ZOO)
def test_overfits_tiny_data(name: str) -> None:
    model = make_model(name)
    assert overfit(model, tiny_sequences()) == 1.0


@pytest.mark.parametrize("name", CAUSAL_CAPABLE)
def test_causal_models_never_read_later_items(name: str) -> None:
    model = make_model(name, objective="causal").double().eval()
    seq = random_sequences()
    users = torch.tensor([0, 1, 2])
    hidden = run(model, seq, users)
    for t in range(3, MAX_LEN - 1):
        changed = seq.clone()
        changed[:, t + 1 :] = torch.randint(1, NUM_ITEMS + 1, changed[:, t + 1 :].shape)
        later = run(model, changed, users)
        torch.testing.assert_close(later[:, : t + 1], hidden[:, : t + 1], atol=1e-12, rtol=0)
        assert not torch.allclose(later[0, t + 1 :], hidden[0, t + 1 :])


@pytest.mark.parametrize(
    ("name", "field"), [("bsarec", "BSARecConfig"), ("adamct", "AdaMCTConfig")]
)
def test_non_causal_mixers_refuse_all_position_training(name: str, field: str) -> None:
    with pytest.raises(ValueError, match=f"{field}.objective must be 'last'"):
        make_model(name, objective="causal")


@pytest.mark.parametrize("name", ["bsarec", "adamct"])
def test_non_causal_mixers_do_read_later_items(name: str) -> None:
    """Why they refuse causal targets: an early position's output depends on later items."""
    model = make_model(name).double().eval()
    seq = random_sequences()
    changed = seq.clone()
    changed[:, -1] = changed[:, -1] % NUM_ITEMS + 1
    assert not torch.allclose(model(changed)[0, :-1], model(seq)[0, :-1])


@pytest.mark.parametrize("name", ZOO)
def test_last_position_training_never_puts_the_target_in_the_input(name: str) -> None:
    """Under "last" the trainer's window ends before the target; the scored output is the last
    position of that window, so the target cannot reach it, and scores ignore padding length."""
    model = (
        make_model(name, **({} if name in ("bsarec", "adamct", "strec") else {"objective": "last"}))
        .double()
        .eval()
    )
    train = tiny_sequences(rows=5)
    examples = make_examples(train, "last")
    batch = make_batch(train, examples, np.arange(len(examples)), "last", MAX_LEN)
    for r in range(len(examples)):
        row = train.row(int(examples.rows[r]))
        assert int(batch.targets[r]) == row[examples.ends[r]]
        window = batch.inputs[r][batch.inputs[r] != 0].numpy()
        np.testing.assert_array_equal(
            window, row[max(0, examples.ends[r] - MAX_LEN) : examples.ends[r]]
        )
    if name in ("bsarec", "strec"):
        return  # their FFT bins / query counts depend on the window length: always max_len
    # the output used for the target equals the output for the window alone, padded or not
    short = batch.inputs[:8, -4:]
    full = torch.nn.functional.pad(short, (MAX_LEN - 4, 0))
    users = torch.zeros(8, dtype=torch.long)
    torch.testing.assert_close(
        run(model, full, users)[:, -1], run(model, short, users)[:, -1], atol=1e-10, rtol=0
    )


@pytest.mark.parametrize("name", ["bsarec", "ssept", "actsr", "adamct", "matrrec", "strec"])
def test_attention_models_expose_weights_for_the_lens(name: str) -> None:
    model = make_model(name).double().eval()
    seq = random_sequences()
    out = run(model, seq, torch.tensor([0, 1, 2]), return_attention=True, return_layer_inputs=True)
    assert len(out.attention) == len(out.layer_inputs) == len(model.attention_modules()) > 0
    for weights in out.attention:
        assert weights.shape[:2] == (3, model.config.num_heads)
        torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))
    torch.testing.assert_close(out.hidden, run(model, seq, torch.tensor([0, 1, 2])))


@pytest.mark.parametrize("name", ["bsarec", "ssept", "actsr", "adamct", "matrrec"])
def test_the_lens_reads_every_attention_model(name: str) -> None:
    """The lens's W = K Qᵀ/√d reproduces each head's attention of the last position exactly;
    AC-TSR's calibrated attention departs from the plain softmax(q·k) it reads, by design."""
    from attnsvm.lens.extract import extract, float64_copy, head_grid

    model = float64_copy(make_model(name))
    views = extract(model, random_sequences(), head_grid(model, None, None))
    assert len(views) == sum(m.num_heads for m in model.attention_modules())
    for view in views:
        logits = view.logits()
        softmax = np.exp(logits - logits.max(1, keepdims=True))
        softmax /= softmax.sum(1, keepdims=True)
        error = np.abs(softmax - view.attention).max()
        assert (error > 1e-4) if name == "actsr" else (error < 1e-12)
