"""The trainer with the large-catalogue settings: shared, in-batch and mixed negatives and the
item-chunked CE take the same step whatever the length groups and processes; validation
samples its users once users × items passes ``eval.valid_max_scores``, the test never does."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from train_helpers import tiny_config

from attnsvm.rec.models import LossConfig
from attnsvm.rec.nn import embedding
from attnsvm.rec.nn.embedding import ItemEmbedding, sparse_row_gradients, table_rows
from attnsvm.rec.train import distributed, train
from attnsvm.rec.train.loop import TrainingLoop
from attnsvm.rec.train.scoring import build, load_split

LOSSES = [
    LossConfig(name="sampled_softmax", num_negatives=6, negatives="shared", logq_correction=True),
    LossConfig(
        name="sampled_softmax",
        num_negatives=6,
        negatives="in_batch",
        logq_correction=True,
        sampler="popularity",
    ),
    LossConfig(name="sampled_softmax", num_negatives=6, negatives="mixed", logq_correction=True),
    LossConfig(name="bce", num_negatives=4, negatives="shared"),
    LossConfig(name="ce", ce_chunk_size=7, ce_item_chunk=5),
]


def one_step_gradients(walks, loss, groups: int = 1, context=None):
    """The loss and the gradients of the first step of epoch 1 (no dropout, no clipping)."""
    config = tiny_config(walks, model="sasrec", dropout=0.0, loss=loss)
    config = dataclasses.replace(
        config, train=dataclasses.replace(config.train, length_groups=groups, grad_clip=None)
    )
    split = load_split(config.data)
    torch.manual_seed(0)
    model = build(config, split.num_items)
    loop = TrainingLoop(config, split, model, context or distributed.Context())
    value = loop.train_step(np.arange(len(loop.examples)), loop.begin_epoch(1))
    return value, {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("loss", LOSSES, ids=lambda loss: f"{loss.name}-{loss.negatives}")
def test_length_groups_take_the_same_step_with_large_catalogue_losses(walks, loss):
    whole_loss, whole = one_step_gradients(walks, loss, groups=1)
    grouped_loss, grouped = one_step_gradients(walks, loss, groups=4)
    assert grouped_loss == pytest.approx(whole_loss, rel=1e-6)
    for name, gradient in whole.items():
        assert gradient.abs().sum() > 0 or name.startswith("items.position"), name
        torch.testing.assert_close(grouped[name], gradient, atol=1e-7, rtol=1e-5, msg=name)


@pytest.mark.parametrize("loss", LOSSES[:3], ids=lambda loss: loss.negatives)
def test_two_processes_share_the_negatives_and_sum_to_one_step(walks, loss, monkeypatch):
    """Each process draws the global batch's shared negatives and log-q itself: its shard's
    gradient plus the other's is the single process's (the all-reduce replaced by that sum)."""
    monkeypatch.setattr(distributed, "all_reduce_gradients", lambda model, context: None)
    monkeypatch.setattr(distributed, "sum_scalar", lambda value, context: value)
    single_loss, single = one_step_gradients(walks, loss)
    shards = [
        one_step_gradients(walks, loss, context=distributed.Context(rank, 2)) for rank in (0, 1)
    ]
    assert shards[0][0] + shards[1][0] == pytest.approx(single_loss, rel=1e-6)
    for name, gradient in single.items():
        total = shards[0][1][name] + shards[1][1][name]
        torch.testing.assert_close(total, gradient, atol=1e-7, rtol=1e-5, msg=name)


def test_a_run_validates_on_a_sample_past_the_score_budget_and_tests_everyone(
    walks, tmp_path, capsys
):
    config = tiny_config(walks, epochs=2, loss=LOSSES[2])
    split = load_split(config.data)
    budget = 50 * split.num_items  # 50 of the 120 validation users
    config = dataclasses.replace(
        config, eval=dataclasses.replace(config.eval, valid_max_scores=budget)
    )
    result = train(config, tmp_path / "run", show_progress=True)
    said = capsys.readouterr().err
    assert "validation: a fixed sample of 50 of 120 users every epoch" in said
    assert "the test ranks every user" in said
    log = [json.loads(line) for line in (result.run_dir / "log.jsonl").read_text().splitlines()]
    assert [record["valid_users"] for record in log] == [50, 50]
    test = json.loads((result.run_dir / "test_eval.json").read_text())
    assert test["num_users"] == len(split.test) == 120
    quiet = train(config, tmp_path / "quiet", show_progress=False)
    assert "validation:" not in capsys.readouterr().err
    assert quiet.test == result.test  # the same run, only quieter


@pytest.mark.parametrize("loss", [LOSSES[2], LOSSES[4]], ids=["mixed", "ce-item-chunked"])
def test_padding_positions_are_left_out_of_the_loss(walks, loss):
    """The step's loss is the plain loss of its real target positions only: the padded ones
    (target 0) never reach it, whatever the negatives or the chunking."""
    from attnsvm.rec.data.batches import make_batch

    config = tiny_config(walks, model="sasrec", dropout=0.0, loss=loss)
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, length_groups=1))
    split = load_split(config.data)
    model = build(config, split.num_items)
    loop = TrainingLoop(config, split, model, distributed.Context())
    generator = loop.begin_epoch(1)
    index = np.arange(len(loop.examples))
    batch = make_batch(loop.train_rows, loop.examples, index, "causal", model.config.max_len)
    step = loop._prepare(batch, generator)
    hidden = model(step.inputs)
    real = step.targets != 0
    assert 0 < int(real.sum()) < real.numel()  # windows shorter than the longest are padded
    h, positives = hidden[real], step.targets[real]
    table, bias = model.output_embedding(), model.output_bias()
    bias = torch.zeros(len(table)) if bias is None else bias
    if loss.name == "ce":
        expected = torch.nn.functional.cross_entropy((h @ table.T + bias)[:, 1:], positives - 1)
    else:
        negatives, log_q = step.negatives, step.log_q
        positive = (h * table[positives]).sum(-1) + bias[positives] - log_q[positives]
        negative = h @ table[negatives].T + bias[negatives] - log_q[negatives]
        negative = negative.masked_fill(negatives == positives[:, None], -torch.inf)
        logits = torch.cat([positive[:, None], negative], dim=1)
        expected = (torch.logsumexp(logits, dim=1) - positive).mean()
    torch.testing.assert_close(loop._loss_share(step, hidden), expected, atol=1e-5, rtol=1e-5)


PER_POSITION = LossConfig(name="sampled_softmax", num_negatives=6, logq_correction=True)


@pytest.mark.parametrize(
    "loss", [*LOSSES, PER_POSITION], ids=lambda loss: f"{loss.name}-{loss.negatives}"
)
def test_large_catalogue_steps_add_sparse_rows_and_fuse_adamw_to_the_same_step(
    walks, loss, monkeypatch
):
    """Past ``SPARSE_ROWS_FROM_ITEMS`` (lowered here to the tiny catalogue) every lookup of the
    item table hands autograd a sparse gradient that the table's dense ``.grad`` adds, and
    AdamW runs fused: the same gradients and the same updated weights as the dense path."""

    def step(large: bool):
        if large:
            monkeypatch.setattr(embedding, "SPARSE_ROWS_FROM_ITEMS", 1)
        config = tiny_config(walks, model="sasrec", dropout=0.0, loss=loss)
        config = dataclasses.replace(
            config, train=dataclasses.replace(config.train, length_groups=4)
        )
        split = load_split(config.data)
        torch.manual_seed(0)
        model = build(config, split.num_items)
        loop = TrainingLoop(config, split, model, distributed.Context())
        table = model.items.input.weight
        lookups = []
        table.register_hook(lambda gradient: lookups.append(gradient.is_sparse))
        loop.train_step(np.arange(len(loop.examples)), loop.begin_epoch(1))
        assert loop.optimizer.defaults["fused"] == (True if large else None)
        return lookups, {
            name: (p.grad.clone(), p.detach().clone()) for name, p in model.named_parameters()
        }

    dense_lookups, dense = step(large=False)
    sparse_lookups, sparse = step(large=True)
    assert dense_lookups and not any(dense_lookups)
    # a sampled loss reads some rows; ce's product reads every row: its gradient stays dense
    assert sparse_lookups == [loss.name != "ce"] * len(sparse_lookups)
    for name, (gradient, weight) in dense.items():
        torch.testing.assert_close(sparse[name][0], gradient, atol=1e-7, rtol=1e-5, msg=name)
        torch.testing.assert_close(sparse[name][1], weight, atol=1e-7, rtol=1e-5, msg=name)


def test_a_lookup_of_a_marked_table_is_a_sparse_gradient_of_its_rows():
    items = ItemEmbedding(num_items=50, dim=4)
    (table,) = sparse_row_gradients(items)
    assert table.grad is not None and not table.grad.is_sparse
    seen = []
    table.register_hook(lambda gradient: seen.append(gradient))
    ids = torch.tensor([[0, 3, 3, 7]])
    (items(ids).sum() + table_rows(items.output_weight(), torch.tensor([7, 9])).sum()).backward()
    assert [g.is_sparse for g in seen] == [True]
    expected = torch.zeros(51, 4)
    expected[3], expected[7], expected[9] = 2.0, 2.0, 1.0  # padding (id 0) gets none
    torch.testing.assert_close(table.grad, expected)
