"""The train/evaluate/recommend/compare/models commands: results, and one-line errors."""

from __future__ import annotations

import numpy as np
import pytest
from train_helpers import tiny_config
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.rec.config import save_config
from attnsvm.rec.models import LossConfig

runner = CliRunner()


def one_line_error(result, pattern: str) -> None:
    import re

    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert re.search(pattern, lines[0]), lines[0]
    assert "Traceback" not in result.output


def test_models_lists_the_registry():
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0
    assert "sasrec+" in result.output and "bert4rec" in result.output


def test_train_from_a_config_file_with_overrides(walks, tmp_path):
    save_config(tiny_config(walks, epochs=1), tmp_path / "run.toml")
    result = runner.invoke(
        app,
        [
            "train",
            "--config",
            str(tmp_path / "run.toml"),
            "--set",
            "train.seed=4",
            "--out",
            str(tmp_path / "run"),
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "NDCG@10" in result.output and (tmp_path / "run" / "model.safetensors").is_file()
    assert '"seed": 4' in (tmp_path / "run" / "config.json").read_text()


@pytest.mark.parametrize(
    ("arguments", "pattern"),
    [
        (["--model", "sasrecc"], r"unknown model 'sasrecc'; did you mean 'sasrec'\?"),
        (["--set", "train.lrr=1"], r"unknown key 'train.lrr'; did you mean 'train.lr'\?"),
        (["--set", "train.epochs=many"], r"train.epochs must be int"),
        (["--resume", "nowhere", "--model", "sasrec"], r"--resume continues a run"),
        (["--resume", "nowhere"], r"nowhere.incomplete: no resumable run state"),
    ],
)
def test_train_rejects_bad_input_in_one_line(walks, tmp_path, arguments, pattern):
    result = runner.invoke(
        app,
        ["train", "--data", str(walks), *arguments, "--out", str(tmp_path / "run")]
        if "--resume" not in arguments
        else ["train", *arguments],
    )
    one_line_error(result, pattern)
    assert not (tmp_path / "run").exists()


def test_train_on_single_event_users_fails_cleanly(tmp_path):
    (tmp_path / "ones.txt").write_text("1 5\n")
    result = runner.invoke(
        app, ["train", "--data", str(tmp_path / "ones.txt"), "--out", str(tmp_path / "run")]
    )
    one_line_error(result, r"ones.txt: no user has the 3 events leave-one-out needs")


def test_train_stops_on_nan_loss(walks, tmp_path, monkeypatch):
    monkeypatch.setattr(LossConfig, "compute", lambda self, hidden, *args: hidden.sum() * np.nan)
    save_config(tiny_config(walks, epochs=1), tmp_path / "run.json")
    result = runner.invoke(
        app,
        [
            "train",
            "--config",
            str(tmp_path / "run.json"),
            "--out",
            str(tmp_path / "run"),
            "--no-progress",
        ],
    )
    one_line_error(result, r"training loss became nan at epoch 1, step 1")
    assert not (tmp_path / "run").exists()


def test_evaluate_recommend_compare(trained_run):
    result = runner.invoke(app, ["evaluate", str(trained_run), "--split", "valid"])
    assert result.exit_code == 0 and "valid: full ranking, seen items excluded" in result.output
    result = runner.invoke(app, ["evaluate", str(trained_run), "--sampled", "10"])
    assert result.exit_code == 0, result.output
    assert "test: full ranking" in result.output and "(sampled: 10 uniform)" in result.output
    result = runner.invoke(app, ["evaluate", str(trained_run), "--sampled", "10", "--sampler", "x"])
    one_line_error(result, "sampler")
    result = runner.invoke(app, ["recommend", str(trained_run), "--history", "1 4 7", "-k", "3"])
    assert result.exit_code == 0 and result.output.split()[0] == "10"
    result = runner.invoke(app, ["recommend", str(trained_run), "--user", "101", "-k", "2"])
    assert result.exit_code == 0 and len(result.output.split()) == 2
    result = runner.invoke(app, ["compare", str(trained_run), str(trained_run)])
    assert result.exit_code == 0 and "wilcoxon_pvalue" in result.output


@pytest.mark.parametrize(
    "command",
    [
        ["evaluate", "missing-run"],
        ["compare", "missing-run", "x"],
        ["recommend", "missing-run", "--user", "1"],
    ],
)
def test_missing_run_dir_is_one_line(command, tmp_path):
    one_line_error(
        runner.invoke(app, [command[0], str(tmp_path / command[1]), *command[2:]]),
        r"missing-run: no such run directory",
    )


def test_recommend_needs_exactly_one_of_user_or_history(trained_run):
    one_line_error(
        runner.invoke(app, ["recommend", str(trained_run)]), r"give exactly one of user or history"
    )
