"""The non-neural baselines train, evaluate and recommend through the same run directory."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from train_helpers import tiny_config
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.rec.config import ConfigError, ModelChoice, RunConfig
from attnsvm.rec.eval.metrics import metrics_from_topk
from attnsvm.rec.eval.ranking import rank_topk
from attnsvm.rec.models.knn import build_baseline
from attnsvm.rec.train import train
from attnsvm.rec.train.runs import evaluate_run, recommend
from attnsvm.rec.train.scoring import load_split


def _baseline(walks, name: str, **settings) -> RunConfig:
    config = tiny_config(walks)
    return replace(config, model=ModelChoice(name, settings), loss=None)


@pytest.mark.parametrize("name", ["pop", "sknn", "vsknn", "vstan"])
def test_a_baseline_run_equals_the_evaluator_on_the_fitted_baseline(walks, tmp_path, name):
    config = _baseline(walks, name, **({"neighbours": 20} if name != "pop" else {}))
    result = train(config, tmp_path / name)
    assert result.run_dir.is_dir() and not (result.run_dir / "model.safetensors").exists()
    split = load_split(config.data)
    model = build_baseline(name, **config.model.overrides).fit(split.train, split.num_items)
    topk = rank_topk(model.score_function(split.test), split.test, split.num_items, 10)
    reference, _ = metrics_from_topk(topk, split.test.targets, (1, 10), num_items=split.num_items)
    for key in ("HR@10", "NDCG@10", "HR@1"):
        assert result.test[key] == pytest.approx(reference[key], abs=1e-12)
    assert evaluate_run(result.run_dir).metrics == pytest.approx(result.test)
    items = recommend(result.run_dir, user=100, k=5)
    assert len(items) == 5 and len(set(items)) == 5
    assert len(recommend(result.run_dir, history=["1", "4", "7"], k=3)) == 3


def test_baseline_settings_and_losses_are_checked(walks):
    with pytest.raises(ConfigError, match=r"unknown key 'model\.hidden_size'.*model\.neighbours"):
        RunConfig.from_dict({"model": {"name": "vstan", "hidden_size": 8}})
    with pytest.raises(ConfigError, match="is a baseline: no \\[loss\\]"):
        RunConfig.from_dict({"model": {"name": "pop"}, "loss": {"name": "ce"}})
    config = RunConfig.from_dict({"model": {"name": "vstan", "neighbours": 5}})
    assert config.model.overrides == {"neighbours": 5}


def test_cli_trains_compares_and_recommends_with_a_baseline(walks, tmp_path):
    runner = CliRunner()
    out = tmp_path / "vsknn"
    result = runner.invoke(
        app,
        [
            "train",
            "--model",
            "vsknn",
            "--data",
            str(walks),
            "--out",
            str(out),
            "--set",
            "model.neighbours=10",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "run directory" in result.output
    evaluated = runner.invoke(app, ["evaluate", str(out)])
    assert evaluated.exit_code == 0 and "NDCG@10" in evaluated.output
    refused = runner.invoke(app, ["lens", str(out)])
    assert refused.exit_code == 1 and "non-neural baseline" in refused.output
    assert np.isfinite(evaluate_run(out).metrics["NDCG@10"])
