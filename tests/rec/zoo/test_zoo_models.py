"""Every zoo model: registered, overfits tiny data, never reads its target, pads cleanly."""

import numpy as np
import pytest
import torch
from zoo_helpers import (
    MAX_LEN,
    NUM_ITEMS,
    SMALL,
    ZOO,
    make_model,
    one_thread,
    overfit,
    run,
    times_for,
    tiny_sequences,
)

from attnsvm.rec.data.batches import make_batch, make_examples
from attnsvm.rec.models import catalogue
from attnsvm.rec.nn.attention import record_attention

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


# models whose windows the trainer and the evaluator may cut to their longest row
PADDING_FREE = ("ssept", "actsr", "convformer", "adamct", "matrrec")


@pytest.mark.parametrize("name", ZOO)
def test_padding_free_models_read_a_padded_window_like_its_unpadded_self(name: str) -> None:
    """``padding_free`` lets training and scoring drop padding columns, so every real position's
    output (not only the last) must be the same with or without them."""
    model = make_model(name, **({"objective": "causal"} if name in CAUSAL_CAPABLE else {}))
    assert model.padding_free == (name in PADDING_FREE)
    if not model.padding_free:
        return
    model = model.double().eval()
    short = torch.randint(1, NUM_ITEMS + 1, (4, 5), generator=torch.Generator().manual_seed(1))
    short[1, :2] = 0
    padded = torch.nn.functional.pad(short, (MAX_LEN - 5, 0))
    users = torch.arange(4)
    real = short != 0
    torch.testing.assert_close(
        run(model, padded, users)[:, -5:][real], run(model, short, users)[real], atol=1e-12, rtol=0
    )


@pytest.mark.parametrize("name", ["bsarec", "ssept", "actsr", "adamct", "matrrec", "strec"])
def test_attention_models_expose_weights_for_the_lens(name: str) -> None:
    """The recorder leaves the output alone and reads one record per attention layer; the last
    query's weights are softmax(q·k/√d_h) over its real keys, recomputed from the recorded
    inputs (AC-TSR calibrates its weights away from that by design: rows sum to 1 only)."""
    model = make_model(name).double().eval()
    seq = random_sequences()
    users = torch.tensor([0, 1, 2])
    with record_attention(model) as recorder:
        recorded = run(model, seq, users)
    torch.testing.assert_close(recorded, run(model, seq, users), atol=1e-12, rtol=0)
    modules = model.attention_modules()
    assert len(recorder.attention) == len(recorder.layer_inputs) == len(modules) > 0
    heads, width = model.config.num_heads, model.config.hidden_size // model.config.num_heads
    for attention, weights, inputs in zip(
        modules, recorder.attention, recorder.layer_inputs, strict=True
    ):
        assert weights.shape[:2] == (3, heads)
        assert weights.shape[-1] == inputs.key.shape[1] <= MAX_LEN
        torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))
        if name == "actsr":
            continue
        q = attention.q_proj(inputs.query[:, -1]).view(3, heads, width)
        k = attention.k_proj(inputs.key).view(3, -1, heads, width)
        logits = torch.einsum("nhd,nthd->nht", q, k) / width**0.5
        real = seq != 0
        if inputs.key_positions is not None:  # STRec: the keys are the tokens kept so far
            real = torch.gather(real, 1, inputs.key_positions)
        expected = logits.masked_fill(~real[:, None], float("-inf")).softmax(-1)
        torch.testing.assert_close(weights[:, :, -1], expected, atol=1e-12, rtol=0)


def _extras(name: str, seq: torch.Tensor) -> dict[str, torch.Tensor]:
    """The extra inputs the lens reads a model with: SSE-PT's users, STRec's event times."""
    if name == "ssept":
        return {"users": torch.tensor([0, 5, 19])}
    return {"timestamps": times_for(seq)} if name == "strec" else {}


@pytest.mark.parametrize("name", ["bsarec", "ssept", "actsr", "adamct", "matrrec", "strec"])
def test_the_lens_reads_every_attention_model(name: str) -> None:
    """The lens's W = K Qᵀ/√d reproduces each head's attention of the last position exactly;
    AC-TSR's calibrated attention departs from the plain softmax(q·k) it reads, by design.
    STRec's later layers see only the tokens kept so far: the rest of the window is padding."""
    from attnsvm.lens.extract import extract, float64_copy, head_grid

    model = float64_copy(make_model(name))
    seq = random_sequences()
    views = extract(model, seq, head_grid(model, None, None), _extras(name, seq))
    assert len(views) == sum(m.num_heads for m in model.attention_modules())
    for view in views:
        kept = view.valid.sum(1)
        if name == "strec" and view.layer > 0:  # 3 tokens kept of the 8-column window
            assert (kept == 3).all() and view.valid[:, -1].all()
            assert (view.X[~view.valid] == 0).all()
        else:
            np.testing.assert_array_equal(view.valid, (seq != 0).numpy())
        logits = view.logits()
        softmax = np.exp(logits - logits.max(1, keepdims=True))
        softmax /= softmax.sum(1, keepdims=True)
        error = np.abs(softmax - view.attention).max()
        assert (error > 1e-4) if name == "actsr" else (error < 1e-12)


def _forced_reference(model64, seq, targets, layer: int, head: int, t: int, extras) -> np.ndarray:
    """Brute force, independent of the lens's hooks: the layer's attention recomputes its output
    from weights whose last row of ``head`` is one-hot on token t; the model runs as usual."""
    attention = model64.attention_modules()[layer]
    original = attention.forward

    def forced(query_input, key_input, keep_mask, **options):
        with record_attention(attention) as recorder:
            original(query_input, key_input, keep_mask, **options)
        weights = recorder.attention[0].clone()
        weights[:, head, -1] = 0.0
        weights[:, head, -1, t] = 1.0
        mixed = weights @ attention._heads(attention.v_proj(key_input))
        batch, _, length, _ = mixed.shape
        return attention.out_proj(mixed.transpose(1, 2).reshape(batch, length, -1))

    attention.forward = forced
    try:
        with torch.inference_mode():
            logits = model64.logits(model64(seq, **extras)[:, -1])
    finally:
        del attention.forward
    return logits[torch.arange(len(seq)), torch.from_numpy(targets)].numpy()


@pytest.mark.parametrize(
    "name", ["sasrec", "bert4rec", "bsarec", "ssept", "actsr", "adamct", "matrrec", "strec"]
)
def test_counterfactual_scores_force_one_token_in_any_model(name: str) -> None:
    """The lens's counterfactual score of token t is the target's logit with the head's last
    query attending t alone, whatever the architecture around the attention; a causal
    TransformerEncoder's last-position shortcut agrees with the whole re-run."""
    from attnsvm.lens.extract import float64_copy
    from attnsvm.lens.scores import counterfactual_scores, forced_by_rerun
    from attnsvm.rec.models import build_model

    if name in ZOO:
        model = make_model(name)
    else:
        torch.manual_seed(0)
        model = build_model(name, NUM_ITEMS, **SMALL)
    model64 = float64_copy(model).eval()
    seq = model64.scoring_input(random_sequences())
    targets = np.array([4, 9, 17])
    layer = len(model64.attention_modules()) - 1
    # SSE-PT is read with each row's own user (the unknown user would be another model)
    extras = _extras(name, seq)
    scores = counterfactual_scores(model64, seq, targets, layer, 1, extras)
    if name == "strec":  # its last layer's keys: 3 kept columns per row, forced one at a time
        with torch.inference_mode(), record_attention(model64, weights=False) as recorder:
            model64(seq, **extras)
        positions = recorder.layer_inputs[layer].key_positions
        assert np.isnan(scores).sum() == scores.size - positions.numel()
        for row, columns in enumerate(positions.tolist()):
            for key, column in enumerate(columns):
                expected = _forced_reference(
                    model64,
                    seq[row : row + 1],
                    targets[row : row + 1],
                    layer,
                    1,
                    key,
                    {"timestamps": extras["timestamps"][row : row + 1]},
                )
                np.testing.assert_allclose(scores[row, column], expected[0], rtol=1e-10)
        return
    valid = (seq != 0).numpy()
    assert np.isnan(scores[~valid]).all() and np.isfinite(scores[valid]).all()
    for t in (2, MAX_LEN - 1):
        rows = valid[:, t]
        expected = _forced_reference(model64, seq, targets, layer, 1, t, extras)
        np.testing.assert_allclose(scores[rows, t], expected[rows], rtol=1e-10, atol=1e-10)
    if name == "sasrec":
        rerun = forced_by_rerun(model64, seq, targets, layer, 1, rows_per_forward=MAX_LEN)
        np.testing.assert_allclose(rerun[valid], scores[valid], rtol=1e-10, atol=1e-10)


def test_the_lens_reads_ssept_with_each_users_own_embedding() -> None:
    from attnsvm.lens.extract import extract, float64_copy, head_grid
    from attnsvm.lens.scores import linear_scores

    model64 = float64_copy(make_model("ssept")).eval()
    seq, targets = random_sequences(), np.array([4, 9, 17])
    users = {"users": torch.tensor([0, 5, 19])}
    with torch.inference_mode():
        own = model64.attention_weights(seq, **users)
        unknown = model64.attention_weights(seq)
    for view in extract(model64, seq, head_grid(model64, None, None), users):
        expected = own[view.layer][:, view.head, -1].numpy() * view.valid
        np.testing.assert_allclose(view.attention, expected, atol=1e-12)
        assert not np.allclose(view.attention, unknown[view.layer][:, view.head, -1].numpy())
    with_users = linear_scores(model64, seq, targets, 1, 0, users)
    assert not np.allclose(
        with_users[seq != 0], linear_scores(model64, seq, targets, 1, 0)[seq != 0]
    )
