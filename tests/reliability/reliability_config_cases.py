"""Hostile settings and config files: ``attnsvm train --config one-epoch.toml --set KEY=VALUE``
(a one-epoch run of a tiny model on the tiny walks file) and config files of every malformed
kind. A refused setting leaves no run directory behind."""

from __future__ import annotations

import os

from reliability_harness import Case, accepted, refused

from attnsvm.rec.train.checkpoint import read_metrics

SETTING, CONFIG_FILE = "config value", "config file"


def train_arguments(workspace, *settings: str) -> list[str]:
    arguments = ["train", "--config", str(workspace.shared.config), "--no-progress"]
    for setting in settings:
        arguments += ["--set", setting]
    return [*arguments, "--out", str(workspace.root / "run")]


def _nothing_left(workspace, output: str) -> None:
    left = sorted(p.name for p in workspace.root.iterdir())
    assert not any(name.startswith("run") for name in left), left


def _trained(workspace, output: str) -> None:
    metrics = read_metrics(workspace.root / "run")
    assert metrics["epochs"] == 1 and 0 <= metrics["test"]["NDCG@10"] <= 1, metrics


def _setting_cases() -> list[Case]:
    memory = r"the run needs at least [\d,.]+ GiB of memory and the cpu has"
    bad = {  # setting → what the message must say
        "train.steps_per_epoch=0": r"train.steps_per_epoch must lie in \[1, ",
        "train.steps_per_epoch=-1": r"train.steps_per_epoch must lie in \[1, ",
        "train.num_threads=0": r"train.num_threads must lie in \[1, 4,096\], got 0",
        "train.num_threads=100000": r"train.num_threads must lie in",
        "data.max_len=1000000000": memory + r".*data.max_len = 64 × 1000000000",
        "data.max_len=0": r"data.max_len must lie in \[1, ",
        "model.hidden_size=1000000": memory,
        "model.ffn_size=100000000000": memory,
        "train.lr=nan": r"train.lr must be a finite number, got 'nan'",
        "train.lr=inf": r"train.lr must be a finite number",
        "train.lr=-inf": r"train.lr must be a finite number",
        "train.lr=1e400": r"train.lr must be a finite number",
        "train.lr=-1": r"train.lr must lie in \(0, ∞\]",
        "train.lr=0": r"train.lr must lie in \(0, ∞\]",
        "train.lr=[bold]fast[/bold]": r"train.lr must be float, got '\[bold\]fast\[/bold\]'",
        "train.betas=1.5,0.9": r"train.betas must lie in \[0, 1\)",
        "train.betas=0.9": r"train.betas needs 2 values",
        "train.epochs=0": r"train.epochs must lie in \[1, 1,000,000\]",
        "train.epochs=1000000000000000000000000000000": r"train.epochs must lie in",
        "train.epochs=1.5": r"train.epochs must be int, got '1.5'",
        "train.epochs=" + "7" * 100_000: r"train.epochs must be int, got '7+…7+' \(100,000 char",
        "train.batch_size=0": r"train.batch_size must lie in \[1, ",
        "train.seed=-1": r"train.seed must lie in \[0, ",
        "train.seed=1180591620717411303424": r"train.seed must lie in \[0, ",
        "train.patience=0": r"train.patience must lie in",
        "train.warmup_steps=-1": r"train.warmup_steps must lie in",
        "train.grad_clip=0": r"train.grad_clip must lie in \(0, ∞\]",
        "train.grad_clip=nan": r"train.grad_clip must be a finite number",
        "train.weight_decay=-0.1": r"train.weight_decay must lie in \[0, ∞\]",
        "train.length_groups=0": r"train.length_groups must lie in",
        "train.sam_rho=-1": r"train.sam_rho must lie in",
        "train.keep=sometimes": r"train.keep must be 'best' or 'last'",
        "train.optimizer=sgd": r"train.optimizer must be one of",
        "data.valid_fraction=1.5": r"data.valid_fraction must lie in \[0, 1\)",
        "data.test_fraction=0": r"data.test_fraction must lie in \(0, 1\)",
        "data.split=random": r"data.split must be one of",
        "eval.ks=10,50": r"eval.ks cut-off 50 exceeds the catalogue of 30 items",
        "eval.ks=0,10": r"eval.ks must lie in \[1, ",
        "eval.ks=": r"eval.ks must name at least one cut-off",
        "eval.valid_users=0": r"eval.valid_users must lie in \[1, ",
        "eval.sampled_negatives=30": r"eval.sampled_negatives = 30 leaves no item out",
        "eval.batch_size=0": r"eval.batch_size must lie in",
        "eval.valid_metric=NDCG@7": r"eval.valid_metric cut-off 7 is not in eval.ks",
        "eval.valid_metric=[/bogus]": r"eval.valid_metric must look like 'NDCG@10'",
        "loss.name=bce;loss.num_negatives=1000000000000": memory + r".*loss.num_negatives",
        "loss.num_negatives=0": r"LossConfig.num_negatives must be ≥ 1",
        "loss.gbce_t=nan": r"loss.gbce_t must be a finite number",
        "model.num_heads=0": r"num_heads must be ≥ 1",
        "model.num_heads=3": r"hidden_size 16 is not divisible by num_heads 3",
        "model.dropout=1": r"dropout must lie in \[0.0, 1.0\)",
        "model.dropout=nan": r"model.dropout must be a finite number",
        "model.num_blocks=-1": r"num_blocks must be ≥ 1",
        "model.init_std=inf": r"model.init_std must be a finite number",
        "model.max_len=5": r"set the window length as data.max_len",
        "model.norm=[red]x": r"norm must be one of",
        "train.lrr=1": r"unknown key 'train.lrr'; did you mean 'train.lr'\?",
        "[/bogus]=1": r"unknown key '\[/bogus\]'",
        "train.lr": r"--set 'train.lr': expected key=value",
    }
    cases = [
        refused(
            f"--set {setting[:60]}",
            SETTING,
            lambda w, s=setting: train_arguments(w, *s.split(";")),
            pattern,
            _nothing_left,
        )
        for setting, pattern in bad.items()
    ]
    good = ("train.steps_per_epoch=1", "train.batch_size=2147483647",
            "eval.batch_size=2147483647", "data.max_len=1", "eval.valid_users=1000000",
            "train.num_threads=1", "eval.ks=1,5,10,30")  # fmt: skip
    cases += [
        accepted(f"--set {s}", SETTING, lambda w, s=s: train_arguments(w, s), _trained)
        for s in good
    ]
    return cases


def _config_file(workspace, name: str, text: str | bytes) -> list[str]:
    path = workspace.file(name, text)
    return ["train", "--config", str(path), "--out", str(workspace.root / "run"), "--no-progress"]


def deep_json(depth: int = 100_000) -> str:
    return '{"train": ' + "[" * depth + "]" * depth + "}"


def _config_file_cases() -> list[Case]:
    files = {
        ("nan.toml", "[train]\nlr = nan\n"): r"nan.toml: train.lr must be a finite number",
        ("inf.toml", "[train]\nlr = inf\n"): r"inf.toml: train.lr must be a finite number",
        ("nan.json", '{"train": {"lr": NaN}}'): r"nan.json: train.lr must be a finite number",
        ("inf.json", '{"train": {"lr": -Infinity}}'): r"inf.json: train.lr must be a finite",
        ("deep.json", deep_json()): r"deep.json: not valid json here \(nested",
        ("deep.toml", "a = " + "[" * 100_000 + "]" * 100_000): r"deep.toml: not valid toml",
        (
            "huge.json",
            '{"train": {"epochs": ' + "9" * 5000 + "}}",
        ): r"huge.json: not valid json here \(Exceeds",
        ("model5.json", '{"model": 5}'): r"model5.json: 'model' must be a table",
        ("train-list.json", '{"train": []}'): r"train-list.json: 'train' must be a table",
        ("list.json", '["a"]'): r"list.json: the top level must be a table",
        ("name5.toml", "[model]\nname = 5\n"): r"name5.toml: unknown model 5",
        ("latin1.toml", "# caf\xe9\n".encode("latin-1")): r"latin1.toml: cannot read config",
        ("dup.toml", "[train]\nlr = 1\nlr = 2\n"): r"dup.toml: not valid toml",
        ("trailing.json", '{"train": {}} x'): r"trailing.json: not valid json: Extra data",
        ("bool.toml", "[train]\nepochs = true\n"): r"bool.toml: train.epochs must be int",
        ("section.toml", "[trian]\nlr = 1\n"): r"section.toml: unknown key 'trian'",
        ("markup.toml", '[model]\nname = "[/bogus]"\n'): r"markup.toml: unknown model '\[/bogus\]'",
        ("ctrl.toml", '[model]\nname = "\\u001b[31mred"\n'): r"ctrl.toml: unknown model '\\x1b",
    }
    cases = [
        refused(
            f"config {name}",
            CONFIG_FILE,
            lambda w, n=name, t=text: _config_file(w, n, t),
            pattern,
            _nothing_left,
        )
        for (name, text), pattern in files.items()
    ]
    cases += [
        refused("config: a directory", CONFIG_FILE,
                lambda w: ["train", "--config", str(w.root)],
                r"cannot read config \(is a directory"),
        refused("config: missing", CONFIG_FILE,
                lambda w: ["train", "--config", str(w.root / "no.toml")],
                r"no.toml: cannot read config \(no such file\)"),
        refused("config naming a named pipe as its data", CONFIG_FILE, _config_on_a_pipe,
                r"data.pipe: is a named pipe"),
    ]  # fmt: skip
    return cases


def _config_on_a_pipe(workspace) -> list[str]:
    os.mkfifo(workspace.root / "data.pipe")
    return train_arguments(workspace, f"data.dataset={workspace.root / 'data.pipe'}")


def config_cases() -> list[Case]:
    return _setting_cases() + _config_file_cases()
