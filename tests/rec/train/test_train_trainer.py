"""The trainer end to end on the walks data: layout, learning, resume, NaN, snapshots, reuse."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from safetensors import safe_open
from train_helpers import tiny_config

from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.models import LossConfig
from attnsvm.rec.train import (
    AttentionSnapshots,
    TrainingError,
    evaluate_run,
    load_model,
    load_run,
    recommend,
    train,
)
from attnsvm.rec.train.checkpoint import WEIGHTS, RunDirectory, read_weights
from attnsvm.rec.train.loop import TrainingLoop
from attnsvm.rec.train.runs import sampled_evaluate_run


def test_a_run_directory_is_whole_and_the_model_learns(trained_run):
    names = {p.name for p in trained_run.iterdir()}
    assert names == {
        "config.json",
        "model.json",
        "model.safetensors",
        "id_maps.json",
        "metrics.json",
        "test_eval.json",
        "test_eval.npz",
        "log.jsonl",
    }
    metrics = json.loads((trained_run / "metrics.json").read_text())
    assert metrics["protocol"].startswith("leave-one-out, full ranking, seen items excluded")
    log = [json.loads(line) for line in (trained_run / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == list(range(1, metrics["epochs"] + 1))
    best = max(log, key=lambda r: r["valid"]["NDCG@10"])
    assert metrics["best_epoch"] == best["epoch"] and metrics["valid"] == best["valid"]
    assert metrics["devices"] == ["cpu, 1 thread(s)"] == sorted({r["device"] for r in log})
    # the next item is determined by the last one: popularity would give HR@10 ≈ 1/3
    assert metrics["test"]["HR@10"] > 0.9


def test_evaluate_run_reproduces_the_saved_metrics(trained_run):
    saved = json.loads((trained_run / "metrics.json").read_text())
    assert evaluate_run(trained_run, "test").metrics == pytest.approx(saved["test"], abs=1e-12)
    assert evaluate_run(trained_run, "valid").metrics["NDCG@10"] == pytest.approx(
        saved["valid"]["NDCG@10"], abs=1e-12
    )


def test_recommend_speaks_external_ids(trained_run):
    run = load_run(trained_run)
    assert run.model.num_items == 30 and not run.model.training
    top = recommend(trained_run, history=["1", "4", "7"], k=3)
    assert top[0] == 10 and not {1, 4, 7} & set(top)
    by_user = recommend(trained_run, user="100", k=5)
    assert len(by_user) == 5 and len(set(by_user)) == 5
    with pytest.raises(ValueError, match=r"unknown item id\(s\) 999"):
        recommend(trained_run, history=["999"])
    with pytest.raises(ValueError, match=r"unknown user id 7"):
        recommend(trained_run, user="7")


def test_resumed_run_ends_like_an_uninterrupted_one(walks, tmp_path):
    config = tiny_config(walks, epochs=4)
    whole = train(config, tmp_path / "whole", show_progress=False)

    class Kill:
        def on_epoch_end(self, state):
            if state.epoch == 2:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(config, tmp_path / "cut", [Kill()], show_progress=False)
    assert not (tmp_path / "cut").exists() and (tmp_path / "cut.incomplete" / "resume.pt").exists()
    resumed = train(config, tmp_path / "cut", resume=True, show_progress=False)
    assert resumed.test == whole.test and resumed.valid == whole.valid
    a, b = load_run(whole.run_dir).model.state_dict(), load_run(resumed.run_dir).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_load_model_reads_an_unfinished_run_with_its_data_sizes(walks, tmp_path):
    """An interrupted SSE-PT run is scorable: its user table has the data's size, which only
    ``model.json`` knows (building from the config alone gave a one-row table)."""

    class Kill:
        def on_epoch_end(self, state):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        config = tiny_config(walks, model="ssept")
        config.model.overrides["user_size"] = 8
        train(config, tmp_path / "cut", [Kill()], show_progress=False)
    work = tmp_path / "cut.incomplete"
    model = load_model(work)
    assert not model.training and model.users.num_embeddings == 120 + 1  # + the unknown user
    with safe_open(work / "model.safetensors", framework="pt") as saved:
        assert all(torch.equal(saved.get_tensor(k), v) for k, v in model.state_dict().items())


def test_nan_loss_stops_with_a_clear_message(walks, tmp_path, monkeypatch):
    monkeypatch.setattr(LossConfig, "compute", lambda self, hidden, *args: hidden.sum() * np.nan)
    with pytest.raises(TrainingError, match=r"training loss became nan at epoch 1, step 1"):
        train(tiny_config(walks), tmp_path / "run", show_progress=False)
    assert not (tmp_path / "run").exists()


def test_attention_snapshots_every_epoch(walks, tmp_path):
    run = train(
        tiny_config(walks, epochs=2), tmp_path / "run", [AttentionSnapshots()], show_progress=False
    ).run_dir
    files = sorted(p.name for p in (run / "attention").iterdir())
    assert files == ["epoch_0000.safetensors", "epoch_0001.safetensors", "epoch_0002.safetensors"]
    with safe_open(run / "attention" / "epoch_0002.safetensors", framework="pt") as snapshot:
        assert json.loads(snapshot.metadata()["num_heads"]) == [1]
        q = snapshot.get_tensor("layer0.q_weight")
        assert q.shape == (16, 16) and set(snapshot.keys()) >= {"layer0.k_weight", "layer0.k_bias"}
    with safe_open(run / "attention" / "epoch_0000.safetensors", framework="pt") as snapshot:
        assert not torch.equal(snapshot.get_tensor("layer0.q_weight"), q)  # training moved W_Q


@pytest.mark.parametrize(
    ("model", "loss"),
    [
        ("bert4rec", None),
        (
            "sasrec",
            LossConfig(
                name="sampled_softmax", num_negatives=5, sampler="popularity", logq_correction=True
            ),
        ),
        ("gsasrec", LossConfig(name="gbce", num_negatives=5)),
        ("bsarec", None),
    ],
)
def test_every_objective_and_loss_trains(walks, tmp_path, model, loss):
    result = train(
        tiny_config(walks, model=model, epochs=1, loss=loss), tmp_path / "run", show_progress=False
    )
    assert 0.0 <= result.test["NDCG@10"] <= 1.0 and result.epochs == 1


def test_bad_data_leaves_no_run_directory(tmp_path):
    (tmp_path / "short.txt").write_text("1 5\n2 6\n3 7\n")
    with pytest.raises(DataFormatError, match=r"short.txt: no user has the 3 events"):
        train(tiny_config(tmp_path / "short.txt"), tmp_path / "run", show_progress=False)
    assert list(tmp_path.iterdir()) == [tmp_path / "short.txt"]
    assert not RunDirectory(tmp_path / "run").partial.exists()


def test_epoch_lines_mark_a_new_best_only_when_the_best_is_kept(walks, tmp_path, capsys):
    config = tiny_config(walks, epochs=2)
    train(config, tmp_path / "best", show_progress=False)
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("epoch   1") and " * " in first  # the first epoch is a new best
    last = dataclasses.replace(config, train=dataclasses.replace(config.train, keep="last"))
    train(last, tmp_path / "last", show_progress=False)
    assert " * " not in capsys.readouterr().err  # every epoch is kept: nothing to mark


def test_early_stopping_waits_for_min_steps(walks, tmp_path, monkeypatch):
    """A validation score that never improves after epoch 1 stops a patience-1 run at epoch 2;
    with ``min_steps`` it goes on until that many optimiser steps have run."""
    run_epoch = TrainingLoop.run_epoch

    def flat(self, progress):
        record = run_epoch(self, progress)
        record["valid"]["NDCG@10"] = 0.5
        steps_per_epoch.append(record["step"] // record["epoch"])
        return record

    monkeypatch.setattr(TrainingLoop, "run_epoch", flat)
    steps_per_epoch: list[int] = []
    config = tiny_config(walks, epochs=20)
    impatient = dataclasses.replace(config.train, patience=1)
    result = train(
        dataclasses.replace(config, train=impatient), tmp_path / "a", show_progress=False
    )
    assert (result.epochs, result.best_epoch, result.stopped_early) == (2, 1, True)
    waiting = dataclasses.replace(impatient, min_steps=3 * steps_per_epoch[0] + 1)
    result = train(dataclasses.replace(config, train=waiting), tmp_path / "b", show_progress=False)
    assert (result.epochs, result.best_epoch, result.stopped_early) == (4, 1, True)


def test_bf16_warmup_keep_last_and_labelled_sampled_metrics(walks, tmp_path):
    config = tiny_config(walks, epochs=2)
    config = dataclasses.replace(
        config,
        train=dataclasses.replace(
            config.train, bf16=True, warmup_steps=10, keep="last", patience=1
        ),
        eval=dataclasses.replace(config.eval, sampled_negatives=20, sampled_sampler="uniform"),
    )
    result = train(config, tmp_path / "run", show_progress=False)
    assert result.epochs == 2 and result.best_epoch == 2  # keep="last": no early stopping
    log = [json.loads(line) for line in (result.run_dir / "log.jsonl").read_text().splitlines()]
    assert log[0]["lr"] < config.train.lr  # still warming up after the first epoch's 4 steps
    metrics = json.loads((result.run_dir / "metrics.json").read_text())
    assert "NDCG@10 (sampled: 20 uniform)" in metrics["test_sampled"]
    # evaluating the run directory again draws the same negatives (the run's seed)
    again = sampled_evaluate_run(result.run_dir, 20, "uniform")
    assert again.metrics == pytest.approx(metrics["test_sampled"], abs=1e-12)
    wider = sampled_evaluate_run(result.run_dir, 15, "popularity").metrics
    assert "NDCG@10 (sampled: 15 popularity)" in wider


@pytest.mark.slow
def test_demo_learns_the_planted_structure(tmp_path):
    """``make demo``'s model (about a minute on 2 idle cores); popularity scores HR@10 = 0 here."""
    from attnsvm.rec.train import demo_train

    torch.set_num_threads(2)
    run_dir, metrics = demo_train(tmp_path, show_progress=False)
    assert metrics["HR@10"] > 0.3 and (run_dir / "model.safetensors").is_file()


@pytest.mark.parametrize(
    "loss",
    [
        LossConfig(name="ce"),
        LossConfig(name="bce", num_negatives=3),
        LossConfig(name="sampled_softmax", num_negatives=5),
    ],
    ids=lambda loss: loss.name,
)
def test_length_groups_take_the_same_step_as_the_whole_batch(walks, loss):
    """Rows grouped by length, each group without its shared padding, give the whole padded
    batch's loss and gradient (no dropout: its masks depend on the shapes; no clipping, which
    would hide a scale), for per-position negatives too (each group gets its own positions'
    negatives)."""
    from attnsvm.rec.train import distributed
    from attnsvm.rec.train.loop import TrainingLoop
    from attnsvm.rec.train.scoring import build, load_split

    losses, gradients = {}, {}
    for groups in (1, 4):
        config = tiny_config(walks, model="sasrec", dropout=0.0, loss=loss)
        config = dataclasses.replace(
            config, train=dataclasses.replace(config.train, length_groups=groups, grad_clip=None)
        )
        split = load_split(config.data)
        torch.manual_seed(0)
        model = build(config, split.num_items)
        loop = TrainingLoop(config, split, model, distributed.Context())
        pieces = loop._length_groups(torch.from_numpy(np.array([[0, 0, 1, 2], [3, 4, 5, 6]])))
        assert len(pieces) == (1 if groups == 1 else 2)
        losses[groups] = loop.train_step(np.arange(len(loop.examples)), loop.begin_epoch(1))
        gradients[groups] = {name: p.grad.clone() for name, p in model.named_parameters()}
    widths = [(w, len(rows)) for rows, w in pieces]
    assert widths == [(2, 1), (4, 1)]
    assert losses[4] == pytest.approx(losses[1], rel=1e-6)
    for name, gradient in gradients[1].items():
        assert gradient.abs().sum() > 0 or name.startswith("items.position"), name
        torch.testing.assert_close(gradients[4][name], gradient, atol=1e-7, rtol=1e-5, msg=name)


@pytest.mark.parametrize(("model", "loss_name"), [("sasrec", "bce"), ("bert4rec", "gbce")])
def test_negatives_avoid_the_items_of_their_own_row(walks, monkeypatch, model, loss_name):
    """With ``negatives_avoid_row`` the trainer hands each target's row to the sampler: the
    positive lies in the row it is mapped to, and no negative does (cloze rows are the items
    before masking)."""
    from attnsvm.rec.train import distributed, loop
    from attnsvm.rec.train.scoring import build, load_split

    calls = []

    def spy(negatives, rows, row_items, sampler):
        result = trainer_avoid(negatives, rows, row_items, sampler)
        calls.append((result, rows, row_items))
        return result

    trainer_avoid = loop.avoid_row_items
    monkeypatch.setattr(loop, "avoid_row_items", spy)
    loss = LossConfig(name=loss_name, num_negatives=4, negatives_avoid_row=True)
    config = tiny_config(walks, model=model, dropout=0.0, loss=loss)
    # one length group: the loss then sees the targets in row order
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, length_groups=1))
    split = load_split(config.data)
    model = build(config, split.num_items)
    training = loop.TrainingLoop(config, split, model, distributed.Context())
    generator = training.begin_epoch(1)
    positives = []
    original_compute = LossConfig.compute

    def compute(self, hidden, targets, *args, **kwargs):
        positives.append(targets)
        return original_compute(self, hidden, targets, *args, **kwargs)

    monkeypatch.setattr(LossConfig, "compute", compute)
    training.train_step(np.arange(len(training.examples)), generator)
    ((negatives, rows, row_items),) = calls
    assert len(rows) == len(negatives) == sum(len(p) for p in positives)
    row_items = row_items.numpy()
    for target, row in enumerate(rows):
        assert not set(negatives[target].tolist()) & set(row_items[row].tolist())
    # each target lies in the row it was mapped to
    targets = torch.cat(positives).numpy()
    assert all(targets[t] in row_items[row] for t, row in enumerate(rows))


def test_the_kept_weights_are_the_best_validation_epochs_not_the_last(walks, tmp_path, monkeypatch):
    """With validation peaking at epoch 2 of 4, the checkpoint, the model the test split is
    scored with and ``best_epoch`` are epoch 2's; the last epoch's weights are not kept."""
    states, scores = [], iter([0.2, 0.9, 0.4, 0.5])
    run_epoch = TrainingLoop.run_epoch

    def scripted(self, progress):
        record = run_epoch(self, progress)
        states.append({k: v.clone() for k, v in self.model.state_dict().items()})
        record["valid"]["NDCG@10"] = next(scores)
        return record

    monkeypatch.setattr(TrainingLoop, "run_epoch", scripted)
    run_dir = train(tiny_config(walks, epochs=4), tmp_path / "run", show_progress=False).run_dir
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["best_epoch"] == 2
    kept = read_weights(run_dir / "model.safetensors")  # tied parameters under each key
    assert all(torch.equal(kept[name], value) for name, value in states[1].items())
    assert not all(torch.equal(kept[name], value) for name, value in states[3].items())
    assert evaluate_run(run_dir, "test").metrics == pytest.approx(metrics["test"], abs=1e-12)


def test_keeping_the_last_epoch_the_validation_sample_changes_nothing_trained(walks, tmp_path):
    """With ``train.keep = last`` validation is a diagnostic: a run validated on a few users
    trains the same weights as one validated on all (the campaign's staged arms rely on it)."""
    config = tiny_config(walks, epochs=3, dropout=0.2)
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, keep="last"))
    sample = dataclasses.replace(config, eval=dataclasses.replace(config.eval, valid_users=5))
    everyone = train(config, tmp_path / "all", show_progress=False).run_dir
    few = train(sample, tmp_path / "few", show_progress=False).run_dir
    assert json.loads((few / "log.jsonl").read_text().splitlines()[0])["valid_users"] == 5
    kept, other = (
        read_weights(everyone / "model.safetensors"),
        read_weights(few / "model.safetensors"),
    )
    assert all(torch.equal(kept[name], other[name]) for name in kept)
    metrics = [json.loads((run / "metrics.json").read_text())["test"] for run in (everyone, few)]
    assert metrics[0] == metrics[1]


def test_a_loop_stepped_by_hand_trains_the_weights_train_keeps(walks, tmp_path):
    """``training_loop`` is the start of ``train()``: its epochs, run by hand, end on the weights
    a whole run keeps (``keep = last``: the final epoch's), dropout and shuffling included."""
    from rich.progress import Progress

    from attnsvm.rec.train import training_loop

    config = tiny_config(walks, epochs=2, dropout=0.2)
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, keep="last"))
    kept = read_weights(train(config, tmp_path / "run", show_progress=False).run_dir / WEIGHTS)
    loop = training_loop(config)
    with Progress(disable=True) as progress:
        records = [loop.run_epoch(progress) for _ in range(config.train.epochs)]
    assert [record["epoch"] for record in records] == [1, 2]
    stepped = loop.model.state_dict()
    assert all(torch.equal(stepped[name], kept[name]) for name in kept)


def test_a_loop_is_refused_for_a_config_train_refuses(walks):
    from attnsvm.rec.config import ConfigError
    from attnsvm.rec.train import training_loop

    config = tiny_config(walks)
    with pytest.raises(ConfigError, match=r"eval\.ks"):
        training_loop(dataclasses.replace(config, eval=dataclasses.replace(config.eval, ks=(500,))))
