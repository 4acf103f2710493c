"""Staged training through the platform: generation without leakage, training streams, the
loss options, ADT at λ = 0 against SASRec, and the recipes end to end (with resume)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from train_helpers import NUM_ITEMS, tiny_config
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.rec.config import DataConfig, ModelChoice, load_config
from attnsvm.rec.config_base import ConfigError
from attnsvm.rec.data.batches import make_batch, make_examples
from attnsvm.rec.data.transforms import reverse_rows, training_rows
from attnsvm.rec.models import LossConfig, build_model
from attnsvm.rec.train import distributed, train
from attnsvm.rec.train.generate import generate_prior_items, generation_contexts
from attnsvm.rec.train.loop import TrainingLoop
from attnsvm.rec.train.recipe import resume_recipe, run_recipe
from attnsvm.rec.train.scoring import build, load_split
from attnsvm.rec.train.streams import TrainingStreams

SENTINEL = NUM_ITEMS + 1
TINY = [
    "model.hidden_size=16",
    "model.ffn_size=16",
    "model.num_heads=2",
    "data.max_len=12",
    "train.epochs=2",
    "train.batch_size=32",
    "eval.ks=1,10",
    "eval.batch_size=64",
]


@pytest.fixture(scope="module")
def sentinel_walks(tmp_path_factory) -> Path:
    """Walks as ``write_walks`` makes them; every third user's validation and test items are
    the sentinel item, which appears nowhere in training."""
    rng = np.random.default_rng(1)
    lines = []
    for user in range(60):
        length, start = rng.integers(5, 10), rng.integers(NUM_ITEMS)
        items = [(start + 3 * step) % NUM_ITEMS + 1 for step in range(length)]
        if user % 3 == 0:
            items[-2:] = [SENTINEL, SENTINEL]
        lines.append(" ".join(map(str, [user + 100, *items])))
    path = tmp_path_factory.mktemp("sentinel") / "walks.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_no_leak_generation_never_reads_a_validation_or_test_item(sentinel_walks):
    split = load_split(DataConfig(dataset=str(sentinel_walks)))
    sentinel = int(np.flatnonzero(split.item_ids.astype(str) == str(SENTINEL))[0])
    assert sentinel not in split.train.items and sentinel in split.test.targets.items
    torch.manual_seed(0)
    model = build_model("bicat", split.num_items, hidden_size=16, ffn_size=16, max_len=12)
    score_last = model.score_last
    read: list[torch.Tensor] = []

    def spy(item_seq, **extras):
        """Records what the generator reads; never lets it generate the sentinel itself, so a
        window holding it can only have read it from the context."""
        read.append(item_seq.clone())
        scores = score_last(item_seq, **extras)
        scores[:, sentinel] = float("-inf")
        return scores

    model.score_last = spy
    for mode, leaks in (("no_leak", False), ("faithful", True)):
        read.clear()
        contexts = generation_contexts(split, mode)
        generated = generate_prior_items(model, contexts, items=4, below=20, batch_size=16)
        assert (sentinel in contexts.items) is leaks
        assert any(bool((window == sentinel).any()) for window in read) is leaks
        assert generated.lengths.max() == 4 and len(generated) == len(split.train)
    # a generated item is never one the context holds, and never the padding id
    for r in range(len(contexts)):
        assert not set(generated.row(r)) & set(contexts.row(r)) and 0 not in generated.row(r)


def test_the_source_stream_is_the_row_before_the_transforms(walks):
    split = load_split(DataConfig(dataset=str(walks)))
    rows = split.train
    reversed_rows = reverse_rows(rows)
    examples = make_examples(reversed_rows, "causal")
    streams = TrainingStreams(("source",), rows, reversed_rows, examples, max_len=6)
    index = np.arange(len(examples))
    source = streams.batch(index, step=0)["source"].numpy()
    for i in index[:20]:
        chronological = rows.row(int(examples.rows[i]))[-7:]
        np.testing.assert_array_equal(source[i][source[i] != 0], chronological)
    # without a transform: the example's inputs followed by its target
    plain = make_examples(rows, "last")
    batch = make_batch(rows, plain, np.arange(len(plain)), "last", 6)
    own = TrainingStreams(("source",), rows, rows, plain, 6).batch(np.arange(len(plain)), 0)
    np.testing.assert_array_equal(own["source"][:, :-1].numpy(), batch.inputs.numpy())
    np.testing.assert_array_equal(own["source"][:, -1].numpy(), batch.targets.numpy())


def test_partner_windows_are_neighbouring_examples_drawn_per_step(walks):
    rows = load_split(DataConfig(dataset=str(walks))).train
    examples = make_examples(rows, "last")
    streams = TrainingStreams(
        ("partner",), rows, rows, examples, 6, num_items=NUM_ITEMS, neighbours=3
    )
    index = np.arange(40)
    first, again = streams.batch(index, step=3), streams.batch(index, step=3)
    assert torch.equal(first["partner"], again["partner"])  # a resumed run draws the same
    windows = make_batch(rows, examples, np.arange(len(examples)), "last", 6)
    full = torch.cat([windows.inputs, windows.targets[:, None]], dim=1)
    for i in index:
        candidates = full[streams.partners[i]]
        assert (candidates == first["partner"][i]).all(1).any()


def test_last_targets_and_scale_shape_the_main_loss(walks):
    config = tiny_config(walks, model="sasrec", loss=LossConfig(name="bce", last_targets=2))
    split = load_split(config.data)
    loop = TrainingLoop(config, split, build(config, split.num_items), distributed.Context())
    index = np.arange(len(loop.examples))
    batch = make_batch(loop.train_rows, loop.examples, index, "causal", 12)
    step = loop._prepare(batch, loop.begin_epoch(1))
    targets = (batch.targets != 0).sum(1)
    assert step.total == int(torch.minimum(targets, torch.tensor(2)).sum())
    assert not step.host_mask[:, :-2].any()
    silent = replace(config, loss=LossConfig(name="bce", scale=0.0))
    loop = TrainingLoop(silent, split, build(silent, split.num_items), distributed.Context())
    assert loop.train_step(index[:32], loop.begin_epoch(1)) == 0.0


def test_adt_at_lambda_zero_trains_exactly_as_sasrec(walks, tmp_path):
    bce = LossConfig(name="bce", num_negatives=1)
    sasrec = tiny_config(walks, model="sasrec", loss=bce, epochs=2)
    adt = replace(sasrec, model=ModelChoice("adt", sasrec.model.overrides))
    logs = []
    for name, config in (("sasrec", sasrec), ("adt", adt)):
        train(config, tmp_path / name, show_progress=False)
        log = (tmp_path / name / "log.jsonl").read_text().splitlines()
        logs.append([json.loads(line)["train_loss"] for line in log])
    assert logs[0] == logs[1]
    test = [
        json.loads((tmp_path / n / "metrics.json").read_text())["test"] for n in ("sasrec", "adt")
    ]
    assert test[0] == test[1]


def test_the_bicat_recipe_runs_its_stages_and_keeps_synthetic_items_out_of_evaluation(
    walks, tmp_path, monkeypatch
):
    out = tmp_path / "bicat"
    interrupted = []
    run_epoch = TrainingLoop.run_epoch

    def interrupt_finetune_once(self, progress):
        if self.config.data.synthetic_prefix and self.epoch == 1 and not interrupted:
            interrupted.append(True)
            raise KeyboardInterrupt
        return run_epoch(self, progress)

    monkeypatch.setattr(TrainingLoop, "run_epoch", interrupt_finetune_once)
    overrides = [*TINY, "finetune:eval.sampled_negatives=10"]
    with pytest.raises(KeyboardInterrupt):
        run_recipe("bicat", out, str(walks), None, overrides, show_progress=False)
    pretrained = (out / "1-pretrain" / "model.safetensors").stat().st_mtime_ns
    result = resume_recipe(out, show_progress=False)
    assert (out / "1-pretrain" / "model.safetensors").stat().st_mtime_ns == pretrained
    finetune = out / "3-finetune"
    assert result.last_run == finetune
    lineage = json.loads((finetune / "lineage.json").read_text())
    assert [p["name"] for p in lineage["parents"]] == ["pretrain", "generate"]
    config = json.loads((finetune / "config.json").read_text())
    assert config["train"]["init_from"] == str(out / "1-pretrain")
    assert config["data"]["synthetic_prefix"] == str(out / "2-generate")
    assert config["loss"]["last_targets"] == 12 and config["model"]["kl_weight"] == 1.0
    header = json.loads((out / "2-generate" / "synthetic_prefix.json").read_text())
    assert header["synthetic"] and header["mode"] == "no_leak"
    logs = {
        stage: [json.loads(line) for line in (out / stage / "log.jsonl").read_text().splitlines()]
        for stage in ("1-pretrain", "3-finetune")
    }
    assert "forward" in logs["1-pretrain"][0]["aux"] and "kl" in logs["3-finetune"][0]["aux"]
    assert [r["epoch"] for r in logs["3-finetune"]] == [1, 2]  # resumed after epoch 1
    metrics = json.loads((finetune / "metrics.json").read_text())
    assert "NDCG@10 (sampled: 10 uniform)" in metrics["test_sampled"]
    # training reads the augmented rows; every evaluation stage is the plain split's
    augmented = load_config(finetune / "config.json").data
    plain = load_split(replace(augmented, synthetic_prefix=None))
    split = load_split(augmented)
    assert training_rows(split, augmented).items.size > split.train.items.size
    for stage in ("valid", "test"):
        for part in ("history", "targets", "exclude"):
            got, expected = (
                getattr(getattr(split, stage), part),
                getattr(getattr(plain, stage), part),
            )
            np.testing.assert_array_equal(got.items, expected.items)


def test_the_mrtransformer_recipe_pretrains_on_the_swap_alone(walks, tmp_path):
    overrides = [*TINY, "train.warmup_steps=0", "model.pair_neighbours=4", "train.batch_size=64"]
    out = tmp_path / "mr"
    run_recipe("mrtransformer", out, str(walks), None, overrides, show_progress=False)
    pretrain = [json.loads(r) for r in (out / "1-pretrain" / "log.jsonl").read_text().splitlines()]
    assert all(r["train_loss"] == pytest.approx(r["aux"]["swap"]) for r in pretrain)
    finetune = (out / "2-finetune" / "log.jsonl").read_text().splitlines()
    assert "coverage" in json.loads(finetune[0])["aux"]


def test_recipe_mistakes_are_one_clear_error(walks, tmp_path):
    with pytest.raises(ConfigError, match="no recipe stage"):
        run_recipe("bicat", tmp_path / "a", str(walks), None, ["tune:train.epochs=1"])
    with pytest.raises(ConfigError, match="a generation takes"):
        run_recipe("bicat", tmp_path / "b", str(walks), None, ["generate:epochs=1"])
    with pytest.raises(ConfigError, match="unknown recipe"):
        run_recipe("nothing", tmp_path / "c", str(walks))
    (tmp_path / "d").mkdir()
    with pytest.raises(ConfigError, match="exists already"):
        run_recipe("bicat", tmp_path / "d", str(walks))
    bad = tmp_path / "bad.json"
    stages = [{"name": "g", "kind": "generate", "settings": {}, "start_from": "x"}]
    bad.write_text(json.dumps({"stage": stages}))
    with pytest.raises(ConfigError, match="generates with an earlier train stage"):
        run_recipe(str(bad), tmp_path / "e", str(walks))


def test_the_recipe_command_and_its_resume(walks, tmp_path):
    out = tmp_path / "cli"
    overrides = [*TINY, "train.epochs=1", "finetune:eval.sampled_negatives=10"]
    sets = [arg for o in overrides for arg in ("--set", o)]
    command = ["train", "--recipe", "bicat", "--data", str(walks), "--out", str(out)]
    result = CliRunner().invoke(app, [*command, *sets, "--no-progress"])
    assert result.exit_code == 0, result.output
    # the console wraps long paths at its width, which differs between machines and workers
    printed = result.output.replace("\n", "")
    assert "3-finetune" in printed and "NDCG@10" in printed
    again = CliRunner().invoke(app, ["train", "--resume", str(out), "--no-progress"])
    assert again.exit_code == 0 and "3-finetune" in again.output.replace("\n", "")
    refused = CliRunner().invoke(app, [*command, "--model", "sasrec"])
    assert refused.exit_code == 1 and "no --model or --config" in refused.output
