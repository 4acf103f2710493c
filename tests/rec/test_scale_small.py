"""``benchmarks/scale.py`` at CI size: a log of 20 k events over 5 k items generated, prepared,
trained for one epoch and tested on every user over every item, every stage reported."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def scale():
    sys.path.insert(0, str(BENCHMARKS))  # its sibling conditions.py
    spec = importlib.util.spec_from_file_location("scale", BENCHMARKS / "scale.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["scale"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_log_is_power_law_sequential_and_fixed_by_its_seed(scale):
    log = scale.generate_log(20_000, 5_000, 400, seed=1)
    assert log.columns == ["user", "item", "time"] and log.height == 20_000
    assert log.equals(scale.generate_log(20_000, 5_000, 400, seed=1))
    assert np.all(np.diff(log["time"].to_numpy()) >= 0)  # exported in time order
    per_user = log.group_by("user", maintain_order=True).agg("item", "time")
    assert per_user.height == 400 and per_user["item"].list.len().min() >= 3
    counts = np.sort(np.bincount(log["item"].to_numpy()))[::-1]
    assert counts[:50].sum() > 0.2 * log.height  # the top 1 % of items: a fifth of the events
    # about FOLLOW of the events repeat a transition their predecessor's item has made before
    pairs = per_user.explode("item", "time").with_columns(
        pl.col("item").shift(1).over("user").alias("previous")
    )
    pairs = pairs.drop_nulls("previous").select("previous", "item")
    repeated = pairs.is_duplicated().mean()
    assert repeated > scale.FOLLOW / 2


def test_the_benchmark_runs_every_stage_at_ci_size(scale, tmp_path, capsys):
    out = tmp_path / "scale.json"
    size = ["--events", "20000", "--items", "5000", "--num-negatives", "256"]
    stages = scale.main(
        [
            "--work",
            str(tmp_path / "work"),
            *size,
            "--no-progress",
            "--threads",
            "1",
            "--json",
            str(out),
        ]
    )
    assert [stage.name for stage in stages] == [
        "prepare",
        "train, one epoch",
        "validation, in the epoch",
        "test, every user × every item",
    ]
    printed = capsys.readouterr().out
    for stage in stages:
        assert stage.line() in printed and stage.seconds > 0
    written = json.loads(out.read_text())
    assert [row["name"] for row in written["stages"]] == [stage.name for stage in stages]
    assert all(row["peak_bytes"] is None or row["peak_bytes"] > 0 for row in written["stages"])
    train = stages[1].details
    assert train["users"] == 400 and 0 < train["catalogue"] <= 5000
    assert train["loss"]["negatives"] == "mixed" and train["loss"]["logq_correction"]
    assert "(400 users)" in stages[-1].throughput  # every user tested
    assert 0 <= stages[-1].details["test"]["NDCG@10"] <= 1


def test_the_work_folder_must_lie_outside_the_repository(scale):
    with pytest.raises(SystemExit, match="inside the repository"):
        scale.main(["--work", str(BENCHMARKS / "scale-work"), "--events", "300"])
