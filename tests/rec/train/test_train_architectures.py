"""ETRec, SDAT and SRT through the trainer: timestamps where SDAT needs them, the lens reading
them, and SRT fine-tuned on another catalogue from a run on a first one, with no id mapping."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from test_train_extra_inputs import write_timed_walks
from train_helpers import NUM_ITEMS, tiny_config

from attnsvm.lens.report import write_report
from attnsvm.rec.config import ModelChoice
from attnsvm.rec.train import train
from attnsvm.rec.train.checkpoint import read_weights
from attnsvm.rec.train.runs import recommend


def _config(data: Path, model: str, epochs: int = 2, **overrides):
    config = tiny_config(data, model=model, epochs=epochs)
    return replace(config, model=ModelChoice(model, {**config.model.overrides, **overrides}))


@pytest.mark.parametrize(
    ("model", "overrides"),
    [("etrec", {"local_window": 3, "block_size": 4}), ("sdat", {"interval_bias": "bucket"})],
)
def test_trains_recommends_and_is_read_by_the_lens(model, overrides, tmp_path) -> None:
    torch.set_num_threads(1)
    data = write_timed_walks(tmp_path)
    result = train(_config(data, model, **overrides), tmp_path / model, show_progress=False)
    assert 0.0 <= result.test["HR@10"] <= 1.0
    assert len(recommend(result.run_dir, user=1, k=3)) == 3
    # the lens re-runs the whole model for its counterfactual scores: no linear shortcut
    report = write_report(result.run_dir, tmp_path / "lens", sequences=4, progress=False)
    lens = json.loads((report.parent / "lens.json").read_text())
    assert lens["score_kinds"] == ["counterfactual"]


def test_sdat_on_data_without_timestamps_is_refused_before_training(walks, tmp_path) -> None:
    with pytest.raises(ValueError, match=r"needs event timestamps and dataset .*walks\.txt"):
        train(_config(walks, "sdat"), tmp_path / "sdat", show_progress=False)
    assert not any(tmp_path.iterdir())


def write_catalogue(folder: Path, first_id: int, shift: int, items: int) -> Path:
    """Walks over ``items`` movies with external ids ``first_id …``, titled by their walk
    position (``shift`` moves the titles, so two catalogues share words, not ids)."""
    folder.mkdir()
    lines = []
    for user in range(60):
        start = (user * 7) % items
        walk = [first_id + (start + 3 * step) % items for step in range(4 + user % 6)]
        lines.append(" ".join(map(str, [user + 1, *walk])))
    (folder / "walks.txt").write_text("\n".join(lines) + "\n")
    words = ("red", "blue", "night", "day", "war", "love", "city")
    movies = [
        f"{first_id + i}::{words[(i + shift) % 7]} {words[(i + shift) // 7 % 7]} (199{i % 10})::"
        f"{'Drama' if i % 2 else 'Comedy'}"
        for i in range(items)
    ]
    (folder / "movies.dat").write_text("\n".join(movies) + "\n")
    return folder / "walks.txt"


def test_srt_fine_tunes_on_another_catalogue_from_a_run_on_a_first(tmp_path) -> None:
    torch.set_num_threads(1)
    first = write_catalogue(tmp_path / "first", 1, 0, NUM_ITEMS)
    second = write_catalogue(tmp_path / "second", 500, 3, NUM_ITEMS - 8)
    options = {"num_buckets": 512, "token_size": 16, "dropout": 0.1, "attention_dropout": 0.1}
    source = train(
        _config(first, "srt", features_dataset=str(first), **options),
        tmp_path / "pre",
        show_progress=False,
    ).run_dir
    config = _config(second, "srt", epochs=1, features_dataset=str(second), **options)
    config = replace(config, train=replace(config.train, init_from=str(source)))
    result = train(config, tmp_path / "tuned", show_progress=False)  # strict: everything fits
    record = json.loads((result.run_dir / "init_from.json").read_text())
    weights = read_weights(source / "model.safetensors")
    assert sorted(record["loaded"]) == sorted(weights)
    assert not record["remapped"] and not record["initialised"] and not record["skipped"]
    top = recommend(result.run_dir, history=["500", "503"], k=5)
    assert len(top) == 5
