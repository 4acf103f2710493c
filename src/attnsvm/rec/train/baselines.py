"""The non-neural baselines (``pop``, ``sknn``, ``vsknn``, ``vstan``) as runs like any model.

A baseline's training is a fit on the training sequences: deterministic and seconds long. Its
run directory has the usual layout without weights (``model.json`` marks it ``baseline``), and
``fit_baseline`` refits it from the run's data whenever it is evaluated or asked to recommend,
which gives the same model. Valid and test are ranked by the shared evaluator, seen filter and
tie rule included, so the metrics compare with every neural run (and ``attnsvm compare`` reads
its ``test_eval.json``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from attnsvm.rec.config import ConfigError, RunConfig
from attnsvm.rec.data.splits import Split
from attnsvm.rec.eval.ranking import EvalResult
from attnsvm.rec.models.knn import build_baseline
from attnsvm.rec.train.checkpoint import RunDirectory, RunResult, default_run_dir
from attnsvm.rec.train.preflight import check_cutoffs
from attnsvm.rec.train.scoring import evaluate_scores, load_split


def fit_baseline(config: RunConfig, split: Split):
    """The run's baseline, fitted on ``split.train``."""
    model = build_baseline(config.model.name, **config.model.overrides)
    return model.fit(split.train, split.num_items)


def evaluate_baseline(model, split: Split, config: RunConfig, stage: str = "test") -> EvalResult:
    """Full-ranking metrics of a fitted baseline on ``stage`` (``test`` or ``valid``)."""
    popularity = np.bincount(split.train.items, minlength=split.num_items + 1)
    task = getattr(split, stage)
    return evaluate_scores(
        model.score_function, task, split.num_items, config.eval, popularity=popularity
    )


def train_baseline(
    config: RunConfig, run_dir: str | Path | None = None, *, run: RunDirectory | None = None
) -> RunResult:
    """Fit, rank validation and test users, and publish the run directory (or ``run``, an
    interrupted one being resumed: it is fitted again)."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError(f"baseline {config.model.name!r} fits in one process; drop torchrun")
    split = load_split(config.data)
    check_cutoffs(config, split.num_items)
    start = time.perf_counter()
    model = fit_baseline(config, split)
    fit_seconds = time.perf_counter() - start
    valid = evaluate_baseline(model, split, config, "valid")
    start = time.perf_counter()
    test = evaluate_baseline(model, split, config, "test")
    test_seconds = time.perf_counter() - start
    if run is None:
        run = RunDirectory.create(Path(run_dir) if run_dir is not None else default_run_dir(config))
    settings = {"name": config.model.name, **config.model.overrides}
    info = {"model": config.model.name, "baseline": True, "model_config": settings}
    run.write_header(config, info, split)
    run.write_log([{"epoch": 0, "fit_seconds": fit_seconds, "valid": valid.metrics}])
    metrics = {
        "protocol": f"{split.protocol}, {test.protocol}",
        "test": test.metrics,
        "valid": valid.metrics,
        "best_epoch": 0,
        "epochs": 0,
        "stopped_early": False,
        "train_seconds": fit_seconds,
        "test_seconds": test_seconds,  # ranking every test user: most of a baseline's cost
        "devices": ["cpu (numpy)"],
        "steps": 0,
    }
    final = run.publish(metrics, test)
    return RunResult(final, test.metrics, valid.metrics, 0, 0, False, fit_seconds)
