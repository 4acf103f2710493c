"""``attnsvm data``: help documents every command; prepare then stats prints the table."""

import pytest
from typer.testing import CliRunner

from attnsvm.cli.main import app

runner = CliRunner()


def test_help_documents_every_command():
    result = runner.invoke(app, ["data", "--help"])
    assert result.exit_code == 0
    for command in ("download", "prepare", "stats", "list"):
        assert command in result.output
    for command in ("download", "prepare", "stats", "list"):
        sub = runner.invoke(app, ["data", command, "--help"])
        assert sub.exit_code == 0 and "Usage" in sub.output


@pytest.mark.data
def test_prepare_then_stats_ml1m(shared_data, tmp_path):
    cache = str(tmp_path)
    result = runner.invoke(
        app,
        ["data", "prepare", "ml-1m", "--from", str(shared_data / "ml-1m"), "--cache-dir", cache],
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["data", "stats", "ml-1m", "--cache-dir", cache])
    assert result.exit_code == 0
    for value in ("6,040", "3,416", "999,611", "0.04845"):
        assert value in result.output
    listing = runner.invoke(
        app,
        [
            "data",
            "list",
        ],
        env={"ATTNSVM_DATA": cache},
    )
    assert "ml-1m (prepared)" in listing.output and "beauty (not prepared)" in listing.output


def test_errors_are_one_clear_line(tmp_path):
    bad = tmp_path / "u.data"
    bad.write_text("1,2,3,4\n")
    result = runner.invoke(app, ["data", "stats", str(bad)])
    assert result.exit_code == 1
    assert "error:" in result.output and "u.data:1: expected 4 fields" in result.output
    assert "Traceback" not in result.output
    result = runner.invoke(app, ["data", "prepare", "nope", "--from", str(tmp_path)])
    assert result.exit_code == 1 and "unknown dataset 'nope'" in result.output
    result = runner.invoke(app, ["data", "stats", "beauty", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 1 and "attnsvm data prepare beauty" in result.output
