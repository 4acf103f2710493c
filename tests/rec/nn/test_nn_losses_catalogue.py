"""Losses for large catalogues against the plain losses (values and gradients, float64): the
item-chunked full cross-entropy, sampled softmax on negatives shared by the batch, and the
shared draws with their log-q correction; LossConfig's new settings and their errors."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_nn_losses import LargestTensor

from attnsvm.rec.config import RunConfig, apply_overrides, load_config, save_config
from attnsvm.rec.data.samplers import PopularitySampler, UniformSampler
from attnsvm.rec.models import LossConfig
from attnsvm.rec.nn import losses
from attnsvm.rec.nn.losses import full_ce_loss, sampled_softmax_loss

TIGHT = {"atol": 1e-10, "rtol": 1e-10}


def problem(rows: int, items: int, dim: int, seed: int, bias: bool):
    generator = torch.Generator().manual_seed(seed)

    def leaf(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64).requires_grad_(True)

    hidden, embedding = leaf(rows, dim), leaf(items + 1, dim)
    out_bias = leaf(items + 1) if bias else None
    positives = torch.randint(1, items + 1, (rows,), generator=generator)
    return hidden, positives, embedding, out_bias


def plain_ce(hidden, positives, embedding, bias):
    """Softmax CE over items 1..num_items, every logit materialised."""
    logits = hidden @ embedding[1:].T
    if bias is not None:
        logits = logits + bias[1:]
    return torch.nn.functional.cross_entropy(logits, positives - 1)


def assert_same_loss_and_gradients(loss, expected, tensors, **tolerance):
    tolerance = tolerance or TIGHT
    present = [t for t in tensors if t is not None]
    torch.testing.assert_close(loss, expected, **tolerance)
    got = torch.autograd.grad(loss, present)
    want = torch.autograd.grad(expected, present)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, **tolerance)


# -- the item-chunked full cross-entropy ------------------------------------------------------


@settings(max_examples=60)
@given(
    rows=st.integers(1, 40),
    items=st.integers(2, 90),
    dim=st.integers(1, 9),
    row_chunk=st.none() | st.integers(1, 50),
    item_chunk=st.integers(1, 100),
    bias=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_item_chunked_ce_equals_the_plain_ce(rows, items, dim, row_chunk, item_chunk, bias, seed):
    hidden, positives, embedding, out_bias = problem(rows, items, dim, seed, bias)
    loss = full_ce_loss(hidden, positives, embedding, out_bias, row_chunk, item_chunk)
    expected = plain_ce(hidden, positives, embedding, out_bias)
    assert_same_loss_and_gradients(loss, expected, (hidden, embedding, out_bias))


def test_item_chunked_ce_leaves_the_padding_row_untrained_and_scales_with_the_gradient():
    hidden, positives, embedding, out_bias = problem(17, 30, 5, 1, True)
    (3.0 * full_ce_loss(hidden, positives, embedding, out_bias, 4, 7)).backward()
    assert torch.equal(embedding.grad[0], torch.zeros(5, dtype=torch.float64))
    assert out_bias.grad[0] == 0
    reference = 3.0 * plain_ce(hidden, positives, embedding, out_bias)
    for got, want in zip(
        (hidden.grad, embedding.grad, out_bias.grad),
        torch.autograd.grad(reference, [hidden, embedding, out_bias]),
        strict=True,
    ):
        torch.testing.assert_close(got, want, **TIGHT)


def test_item_chunked_ce_is_exact_when_the_target_probability_underflows():
    # float32: the target 200 below the best logit; an online log-sum-exp must not lose it
    hidden = torch.tensor([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    embedding = torch.tensor([[0.0, 0.0], [200.0, 0.0], [0.0, 0.0], [0.0, 3.0]])
    embedding.requires_grad_(True)
    positives = torch.tensor([2, 3])
    loss = full_ce_loss(hidden, positives, embedding, chunk_size=1, item_chunk=1)
    assert torch.isfinite(loss) and loss.item() > 99.0
    assert_same_loss_and_gradients(
        loss,
        plain_ce(hidden, positives, embedding, None),
        (hidden, embedding),
        atol=1e-5,
        rtol=1e-6,
    )


def test_item_chunked_ce_under_bf16_autocast_stays_close_to_float64():
    hidden, positives, embedding, out_bias = problem(23, 50, 8, 2, True)
    reference = plain_ce(hidden, positives, embedding, out_bias)
    exact = torch.autograd.grad(reference, [hidden, embedding, out_bias])
    h, e, b = (t.detach().float().requires_grad_(True) for t in (hidden, embedding, out_bias))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = full_ce_loss(h, positives, e, b, chunk_size=8, item_chunk=16)
    loss.backward()
    assert loss.dtype == h.grad.dtype == e.grad.dtype == torch.float32
    torch.testing.assert_close(loss.double(), reference.detach(), atol=2e-2, rtol=2e-2)
    for got, want in zip((h.grad, e.grad, b.grad), exact, strict=True):
        assert (got.double() - want).abs().max() <= 2e-2 * want.abs().max()


def test_item_chunked_ce_holds_one_tile_of_logits_at_most():
    rows, items, dim = 512, 3000, 4
    hidden = torch.randn(rows, dim, requires_grad=True)
    embedding = torch.randn(items + 1, dim, requires_grad=True)
    positives = torch.randint(1, items + 1, (rows,))
    with LargestTensor() as probe:
        full_ce_loss(hidden, positives, embedding, chunk_size=128, item_chunk=256).backward()
    # the tile, or the parameter-sized gradient of the table: never rows × items
    assert probe.largest <= max(128 * 256, (items + 1) * dim)


# -- sampled softmax on shared negatives ------------------------------------------------------


def looped_sampled_softmax(hidden, positives, embedding, bias, negatives, log_q):
    """Per position: the positive against every shared negative that is not the positive."""
    total = 0.0
    for n, positive in enumerate(positives.tolist()):
        items = [positive] + [i for i in negatives.tolist() if i != positive]
        logits = torch.stack([hidden[n] @ embedding[i] for i in items])
        if bias is not None:
            logits = logits + bias[items]
        if log_q is not None:
            logits = logits - log_q[items]
        total = total - torch.log_softmax(logits, 0)[0]
    return total / len(positives)


@settings(max_examples=40)
@given(
    rows=st.integers(1, 12),
    items=st.integers(2, 25),
    k=st.integers(1, 12),
    bias=st.booleans(),
    corrected=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_shared_negatives_sampled_softmax_equals_the_loop(rows, items, k, bias, corrected, seed):
    hidden, positives, embedding, out_bias = problem(rows, items, 3, seed, bias)
    generator = torch.Generator().manual_seed(seed + 1)
    negatives = torch.randint(1, items + 1, (k,), generator=generator)
    negatives[0] = positives[0]  # an accidental hit, masked for row 0 only
    log_q = None
    if corrected:
        log_q = torch.log(torch.rand(items + 1, generator=generator, dtype=torch.float64) + 0.1)
    loss = sampled_softmax_loss(hidden, positives, embedding, negatives, out_bias, log_q)
    expected = looped_sampled_softmax(hidden, positives, embedding, out_bias, negatives, log_q)
    assert_same_loss_and_gradients(loss, expected, (hidden, embedding, out_bias))


def test_the_shared_loss_is_one_product_with_the_negatives(monkeypatch):
    """Shared negatives: the logits come from (positions × d) @ (d × k), never a gather of
    (positions × k × d) negative embeddings as per-position negatives need over a table too
    large to read them off all items' logits (forced here: this table is small)."""
    monkeypatch.setattr(losses, "DENSE_ROWS_PER_NEGATIVE", 0)
    hidden, positives, embedding, _ = problem(300, 1000, 16, 3, False)
    negatives = torch.randint(1, 1001, (64,))
    with LargestTensor() as shared:
        sampled_softmax_loss(hidden, positives, embedding, negatives).backward()
    with LargestTensor() as per_position:
        sampled_softmax_loss(hidden, positives, embedding, negatives.expand(300, 64)).backward()
    # the table's gradient or the (positions × (k + 1)) logits, against positions × k × d
    assert shared.largest <= max(1001 * 16, 300 * 65) < 300 * 64 * 16 <= per_position.largest


def test_per_position_negatives_read_off_all_items_hold_a_chunk_of_logits_at_once(monkeypatch):
    """Over a small table per-position negatives come from all items' logits, formed for a few
    rows at a time: nothing larger than a chunk, the (positions × (k + 1)) picked logits or the
    table's gradient is made, forward or backward, and the loss is the gathered path's."""
    hidden, positives, embedding, _ = problem(300, 1000, 16, 4, False)
    negatives = torch.randint(1, 1001, (300, 64))
    monkeypatch.setattr(losses, "DENSE_CHUNK_SCORES", 20_000)
    with LargestTensor() as dense:
        value = sampled_softmax_loss(hidden, positives, embedding, negatives)
        value.backward()
    assert dense.largest <= max(20_000, 300 * 65, 1001 * 16) < 300 * 1001
    monkeypatch.setattr(losses, "DENSE_ROWS_PER_NEGATIVE", 0)
    gathered = sampled_softmax_loss(hidden, positives, embedding, negatives)
    torch.testing.assert_close(value, gathered, **TIGHT)


# -- drawing the shared negatives --------------------------------------------------------------


def popularity(items: int = 20) -> np.ndarray:
    counts = np.arange(items + 1, dtype=np.float64) ** 2
    counts[0] = 0
    return counts


def test_shared_draws_come_from_the_sampler_with_its_log_q():
    config = LossConfig(name="sampled_softmax", num_negatives=7, negatives="shared")
    counts = popularity()
    sampler_log_q = torch.log(torch.from_numpy(counts / counts.sum())).float()
    negatives, log_q = config.shared_negatives(
        PopularitySampler(counts, seed=4), torch.tensor([3, 3, 5]), sampler_log_q
    )
    np.testing.assert_array_equal(negatives.numpy(), PopularitySampler(counts, seed=4).draw(7))
    assert log_q is None  # no correction asked
    corrected = config.replace(logq_correction=True)
    _, log_q = corrected.shared_negatives(PopularitySampler(counts, seed=4), [3], sampler_log_q)
    assert log_q is sampler_log_q


def test_in_batch_draws_are_targets_with_the_log_of_their_expected_draws():
    config = LossConfig(
        name="sampled_softmax", num_negatives=4000, negatives="in_batch", logq_correction=True
    )
    targets = torch.tensor([[2, 2, 2, 9], [9, 5, 2, 2]])  # counts: 2 → 5, 9 → 2, 5 → 1 of 8
    sampler_log_q = torch.full((11,), -math.log(10.0))
    negatives, log_q = config.shared_negatives(UniformSampler(10, seed=1), targets, sampler_log_q)
    drawn = np.bincount(negatives.numpy(), minlength=11)
    assert set(np.flatnonzero(drawn)) == {2, 5, 9}
    np.testing.assert_allclose(drawn[[2, 9, 5]] / 4000, [5 / 8, 2 / 8, 1 / 8], atol=0.03)
    expected = np.full(11, -np.inf)
    expected[[2, 9, 5]] = np.log(4000 * np.array([5, 2, 1]) / 8)
    np.testing.assert_allclose(log_q.numpy(), expected, rtol=1e-6)


def test_mixed_draws_half_from_each_and_correct_by_the_mixture():
    config = LossConfig(
        name="sampled_softmax", num_negatives=5, negatives="mixed", logq_correction=True
    )
    counts = popularity(10)
    q = counts / counts.sum()
    targets = torch.tensor([4, 4, 7, 1])
    with np.errstate(divide="ignore"):  # the padding id is never drawn
        sampler_log_q = torch.from_numpy(np.log(q)).float()
    negatives, log_q = config.shared_negatives(
        PopularitySampler(counts, seed=2), targets, sampler_log_q
    )
    reference = PopularitySampler(counts, seed=2)
    np.testing.assert_array_equal(negatives[:3].numpy(), reference.draw(3))  # ⌈5/2⌉ sampled
    assert set(negatives[3:].tolist()) <= {1, 4, 7}  # ⌊5/2⌋ from the batch's targets
    in_batch = np.bincount([4, 4, 7, 1], minlength=11) / 4
    expected = np.log(3 * q[1:] + 2 * in_batch[1:])
    np.testing.assert_allclose(log_q.numpy()[1:], expected, rtol=1e-6)


def test_a_per_position_config_does_not_draw_shared_negatives():
    with pytest.raises(ValueError, match="draws per position"):
        LossConfig(name="bce").shared_negatives(UniformSampler(5), [1], torch.zeros(6))


# -- the settings ------------------------------------------------------------------------------


def test_the_new_loss_settings_round_trip_through_dicts_files_and_the_command_line(tmp_path):
    config = LossConfig(
        name="sampled_softmax",
        num_negatives=512,
        negatives="mixed",
        logq_correction=True,
        ce_item_chunk=4096,
    )
    assert LossConfig.from_dict(config.to_dict()) == config
    run = apply_overrides(
        RunConfig(),
        [
            "loss.name=sampled_softmax",
            "loss.num_negatives=512",
            "loss.negatives=mixed",
            "loss.logq_correction=true",
            "loss.ce_item_chunk=4096",
        ],
    )
    assert run.loss.negatives == "mixed" and run.loss.ce_item_chunk == 4096
    for name in ("run.toml", "run.json"):
        save_config(run, tmp_path / name)
        assert load_config(tmp_path / name) == run


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"negatives": "batch"}, r"negatives must be one of \('per_position', 'shared'"),
        ({"name": "ce", "negatives": "shared"}, "needs a sampled loss"),
        (
            {"name": "bce", "negatives": "shared", "negatives_avoid_row": True},
            "negatives_avoid_row needs negatives = 'per_position'",
        ),
        ({"name": "bce", "negatives": "mixed"}, "num_negatives must be ≥ 2, got 1"),
        ({"ce_item_chunk": 0}, "ce_item_chunk must be ≥ 1 or None, got 0"),
    ],
)
def test_bad_loss_settings_get_a_clear_error(settings, message):
    with pytest.raises(ValueError, match=message):
        LossConfig(**settings)
