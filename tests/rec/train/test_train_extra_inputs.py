"""The trainer feeds every model the inputs it declares: users (SSE-PT), timestamps (STRec),
and runs AC-TSR's adversarial step; evaluation and recommendation pass the same inputs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from train_helpers import NUM_ITEMS, tiny_config

from attnsvm.lens.report import write_report
from attnsvm.rec.config import ModelChoice
from attnsvm.rec.train import train
from attnsvm.rec.train.runs import load_run, recommend
from attnsvm.rec.train.scoring import build, load_split


def write_timed_walks(folder: Path, num_users: int = 60, seed: int = 0) -> Path:
    """ML-100K ``u.data`` (tab-separated user, item, rating, timestamp): walks of step 3 with
    irregular gaps between events, so time-aware models see real timestamps."""
    rng = np.random.default_rng(seed)
    lines = []
    for user in range(num_users):
        length, start = rng.integers(5, 12), rng.integers(NUM_ITEMS)
        time = 1_000_000 + int(rng.integers(0, 10_000))
        for step in range(length):
            time += int(rng.integers(60, 86_400))
            lines.append(f"{user + 1}\t{(start + 3 * step) % NUM_ITEMS + 1}\t5\t{time}")
    path = folder / "u.data"
    path.write_text("\n".join(lines) + "\n")
    return path


def _config(data: Path, model: str, **overrides):
    config = tiny_config(data, model=model, epochs=2)
    fields = {**config.model.overrides, **overrides}
    return replace(config, model=ModelChoice(model, fields))


def test_ssept_trains_one_user_row_per_training_user(walks, tmp_path) -> None:
    torch.set_num_threads(1)
    config = _config(walks, "ssept", user_size=4, user_sse=0.0)  # no user replacement
    initial = build(config, load_split(config.data).num_items, load_split(config.data).num_users)
    result = train(config, tmp_path / "ssept", show_progress=False)
    run = load_run(result.run_dir)
    split = load_split(config.data)
    assert run.model.config.num_users == split.num_users == 120
    moved = (run.model.users.weight[1:] - initial.users.weight[1:]).abs().sum(1) > 0
    assert bool(moved.all())  # every user trained its own row
    # the user's own row changes the recommendation; a bare history uses the unknown user
    by_user = recommend(result.run_dir, user=100, k=5)
    assert len(by_user) == 5 and len(recommend(result.run_dir, history=["1", "4"], k=5)) == 5


def test_strec_trains_and_recommends_with_timestamps(tmp_path) -> None:
    torch.set_num_threads(1)
    data = write_timed_walks(tmp_path)
    config = _config(data, "strec", num_blocks=2)  # layer 1 reads the 3 tokens layer 0 kept
    split = load_split(config.data)
    assert split.train.times is not None and split.test.history.times is not None
    result = train(config, tmp_path / "strec", show_progress=False)
    assert 0.0 <= result.test["HR@10"] <= 1.0
    assert len(recommend(result.run_dir, user=1, k=3)) == 3
    with pytest.raises(ValueError, match="needs event times"):
        recommend(result.run_dir, history=["1", "4"], k=3)
    # the lens reads it with the histories' event times, counterfactual scores only; its last
    # layer's keys are the tokens the earlier layers kept
    report = write_report(result.run_dir, tmp_path / "lens", sequences=4, progress=False)
    lens = json.loads((report.parent / "lens.json").read_text())
    assert lens["score_kinds"] == ["counterfactual"]
    tokens = [head["tokens_per_sequence"] for head in lens["heads"]]
    assert tokens[-1] <= 3 < tokens[0]


def test_strec_on_data_without_timestamps_is_refused_before_training(walks, tmp_path) -> None:
    with pytest.raises(ValueError, match=r"needs event timestamps and dataset .*walks\.txt"):
        train(_config(walks, "strec"), tmp_path / "strec", show_progress=False)
    assert not any(tmp_path.iterdir())  # no run directory was started


def test_actsr_trains_its_attack_projections_only_in_the_adversarial_step(walks, tmp_path):
    torch.set_num_threads(1)
    config = _config(walks, "actsr", num_heads=1)
    split = load_split(config.data)
    initial = build(config, split.num_items, split.num_users)
    result = train(config, tmp_path / "actsr", show_progress=False)
    trained = load_run(result.run_dir).model
    attack = [p.detach() for p in trained.attack_parameters()]
    before = [p.detach() for p in initial.attack_parameters()]
    assert attack and all(not torch.equal(a, b) for a, b in zip(attack, before, strict=True))
