"""``attnsvm tune``: a 4-trial Optuna study of real runs, its outputs, resuming after a kill,
search spaces that name the bad key, and the summary: trials ranked by validation alone, and
no importance plot below the trials an estimate needs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from train_helpers import tiny_config

from attnsvm.rec.config import ConfigError, save_config
from attnsvm.rec.tune import (
    IMPORTANCE_MIN_TRIALS,
    best_trial,
    importance_note,
    load_space,
    tune,
    write_summary,
)

pytest.importorskip("optuna")

SPACE = """
[train.lr]
low = 1e-3
high = 3e-2
log = true

[model.num_blocks]
low = 1
high = 2

[loss.name]
choices = ["ce", "bce"]
"""

SHARED = Path(__file__).resolve().parents[4] / "shared" / "data"


def _space(tmp_path: Path, text: str = SPACE) -> Path:
    path = tmp_path / "space.toml"
    path.write_text(text)
    return path


def _rows(out: Path) -> list[str]:
    return [line for line in (out / "summary.md").read_text().splitlines()[2:] if line]


def _check_study(study, out: Path, trials: int) -> None:
    states = [t.state.name for t in study.trials]
    assert sum(s in ("COMPLETE", "PRUNED") for s in states) == trials
    # four trials are too few for an importance estimate: the summary says so, nothing is drawn
    assert not (out / "importance.png").exists()
    complete = states.count("COMPLETE")
    assert importance_note(complete) in (out / "summary.md").read_text()
    for trial in study.trials:
        if trial.state.name == "COMPLETE":
            run = Path(trial.user_attrs["run_dir"])
            metrics = json.loads((run / "metrics.json").read_text())
            assert metrics["valid"]["NDCG@10"] == pytest.approx(trial.value)
    assert sum(line.startswith("| ") for line in _rows(out)) == len(study.trials)


def test_a_four_trial_study_writes_runs_a_table_and_a_plot(walks, tmp_path):
    torch.set_num_threads(1)
    config = tiny_config(walks, epochs=2)
    study = tune(config, load_space(_space(tmp_path), config), tmp_path / "study", 4)
    _check_study(study, tmp_path / "study", 4)
    assert {key for t in study.trials for key in t.params} == {
        "train.lr",
        "model.num_blocks",
        "loss.name",
    }


@pytest.mark.skipif(not (SHARED / "ml-100k").is_dir(), reason=f"needs {SHARED / 'ml-100k'}")
def test_a_ci_size_study_on_ml_100k(tmp_path):
    torch.set_num_threads(1)
    config = tiny_config(SHARED / "ml-100k", epochs=2)
    config = replace(
        config,
        data=replace(config.data, dataset="ml-100k", root=str(SHARED)),
        train=replace(config.train, steps_per_epoch=4, batch_size=64),
    )
    study = tune(config, load_space(_space(tmp_path), config), tmp_path / "study", 4)
    _check_study(study, tmp_path / "study", 4)


def test_a_killed_study_resumes_and_retries_the_interrupted_trial(walks, tmp_path):
    config = tiny_config(walks, epochs=3)
    save_config(config, tmp_path / "run.toml")
    out = tmp_path / "study"
    command = [
        sys.executable,
        "-m",
        "attnsvm.cli.main",
        "tune",
        "--config",
        str(tmp_path / "run.toml"),
        "--space",
        str(_space(tmp_path)),
        "--trials",
        "4",
        "--out",
        str(out),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (out / "trials" / "trial-0001.incomplete").exists():
        assert process.poll() is None, process.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, "the second trial never started"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    time.sleep(3.5)  # past the heartbeat's grace period: the killed trial is now stale
    study = tune(config, load_space(_space(tmp_path), config), out, 4)
    _check_study(study, out, 4)
    failed = [t for t in study.trials if t.state.name == "FAIL"]
    assert [t.number for t in failed] == [1]
    retried = [t for t in study.trials if t.system_attrs.get("failed_trial") == 1]
    assert len(retried) == 1 and retried[0].params == failed[0].params


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[train.nothing]\nlow = 1\nhigh = 2\n", "not a field of \\[train\\]"),
        ("[bogus.lr]\nlow = 1\nhigh = 2\n", "not a 'section.field' key"),
        ("[train.lr]\nlow = 2.0\nhigh = 1.0\n", "need low < high"),
        ("[train.lr]\nlow = 0.0\nhigh = 1.0\nlog = true\n", "low > 0 with log"),
        ("[loss.name]\nchoices = []\n", "non-empty list"),
        ("[train.epochs]\nchoices = ['many']\n", "train.epochs must be int"),
        ("[train.lr]\nlow = 1e-3\n", "both 'low' and 'high'"),
        ("[train.lr]\nlow = 1e-3\nhigh = 1e-2\nscale = 2\n", "unknown setting 'scale'"),
        ("[train.keep]\nlow = 1\nhigh = 2\n", "needs a numeric field"),
        ("", "names no key"),
        ("[train.lr\n", "not valid TOML"),
    ],
)
def test_a_bad_search_space_names_the_key(walks, tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_space(_space(tmp_path, text), tiny_config(walks))


def _study_of(trials: list[tuple[str, float, float, float]]):
    """An in-memory study of finished trials: (state, lr, validation value, test value)."""
    import optuna

    study = optuna.create_study(direction="maximize")
    lr = optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)
    blocks = optuna.distributions.IntDistribution(1, 3)
    for state, rate, valid, test in trials:
        params = {"train.lr": rate, "model.num_blocks": 1 + len(study.trials) % 3}
        study.add_trial(
            optuna.trial.create_trial(
                state=optuna.trial.TrialState[state],
                params=params,
                distributions={"train.lr": lr, "model.num_blocks": blocks},
                value=valid if state == "COMPLETE" else None,
                intermediate_values={1: valid},
                user_attrs={"test": test, "run_dir": f"trials/trial-{len(study.trials):04d}"},
            )
        )
    return study


def _table(out: Path) -> list[list[str]]:
    rows = [row for row in _rows(out) if row.startswith("| ")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def test_the_summary_ranks_complete_trials_by_validation_alone(tmp_path):
    # trial 1 has the best test metric, trial 3 (pruned) the best validation seen at its epoch
    study = _study_of(
        [
            ("COMPLETE", 1e-3, 0.20, 0.10),
            ("COMPLETE", 2e-3, 0.10, 0.90),
            ("COMPLETE", 3e-3, 0.30, 0.05),
            ("PRUNED", 4e-3, 0.95, 0.00),
        ]
    )
    write_summary(study, tmp_path, "NDCG@10")
    table = _table(tmp_path)
    assert [(row[0], row[1], row[2]) for row in table] == [
        ("1", "2", "complete"),
        ("2", "0", "complete"),
        ("3", "1", "complete"),
        ("", "3", "pruned"),
    ]
    assert best_trial(study).number == 2
    text = (tmp_path / "summary.md").read_text()
    assert "best: trial 2" in text and "never ranked" in text


def test_no_importance_plot_below_the_trials_an_estimate_needs(tmp_path):
    few = [("COMPLETE", 10 ** (-1 - k / 4), 0.1 * k, 0.0) for k in range(3)]
    (tmp_path / "importance.png").write_bytes(b"a plot of an earlier version, from 3 trials")
    write_summary(_study_of(few), tmp_path, "NDCG@10")
    assert not (tmp_path / "importance.png").exists()
    note = importance_note(3)
    assert note in (tmp_path / "summary.md").read_text()
    assert f"needs {IMPORTANCE_MIN_TRIALS} complete trials" in note and "3 so far" in note

    enough = [("COMPLETE", 10 ** (-1 - k / 4), 0.05 * k, 0.0) for k in range(IMPORTANCE_MIN_TRIALS)]
    write_summary(_study_of(enough), tmp_path, "NDCG@10")
    assert (tmp_path / "importance.png").read_bytes().startswith(b"\x89PNG")
    assert "importance: not estimated" not in (tmp_path / "summary.md").read_text()
