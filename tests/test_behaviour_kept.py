"""``benchmarks/behaviour_kept.py`` runs every model at the short fixed-seed budget its docstring
states (2 epochs of 8 steps, window 50, seed 0), the every-prefix models without dropout."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from attnsvm.rec.train import trainer

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


class Captured(Exception):
    pass


@pytest.fixture(scope="module")
def behaviour_kept():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import behaviour_kept

        yield behaviour_kept
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.parametrize("name", ["sasrec+", "bert4rec", "bsarec", "srt", "vstan"])
def test_every_model_runs_at_the_stated_budget(behaviour_kept, monkeypatch, name):
    configs = []

    def capture(config, run_dir, show_progress):
        configs.append(config)
        raise Captured

    monkeypatch.setattr(trainer, "train", capture)
    code = behaviour_kept.SNIPPET.format(
        name=name, root="/data", no_dropout=name in behaviour_kept.NO_DROPOUT
    )
    with pytest.raises(Captured):
        exec(code, {})
    (config,) = configs
    train = config.train
    assert (train.epochs, train.steps_per_epoch, train.batch_size, train.seed) == (2, 8, 64, 0)
    assert config.data.max_len == 50
    options = config.model.overrides
    if name in behaviour_kept.NO_DROPOUT:
        assert options["dropout"] == options["attention_dropout"] == 0.0
    if name == "srt":
        assert options["features_dataset"] == "ml-100k"
