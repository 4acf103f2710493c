"""``attnsvm rl``: the simulator, episodes and rated metrics from the command line, and its
one-line errors."""

import json

from rated_helpers import write_planted_csv
from typer.testing import CliRunner

from attnsvm.cli.main import app

runner = CliRunner()


def one_line_error(result, text: str) -> None:
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], result.output


def test_fit_a_simulator_and_play_its_episodes(tmp_path):
    data = write_planted_csv(tmp_path / "ratings.csv")
    fit = ["rl", "simulator", "--data", str(data), "--out", str(tmp_path / "sim")]
    result = runner.invoke(app, [*fit, "--groups", "3", "--items", "30", "--factors", "4"])
    assert result.exit_code == 0, result.output
    assert "global mean rating" in result.output
    result = runner.invoke(
        app,
        ["rl", "episodes", str(tmp_path / "sim"), "--policy", "oracle", "--policy", "random",
         "--users", "5", "--steps", "6", "--out", str(tmp_path / "episodes")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "episodes" / "episodes.json").read_text())
    assert [row["policy"] for row in summary] == ["group oracle", "random"]
    assert summary[0]["mean_rating@6"] > summary[1]["mean_rating@6"]


def test_errors_are_one_line(tmp_path):
    clicks = tmp_path / "clicks.txt"
    clicks.write_text("".join(f"{u} {u % 7 + 1} {u % 5 + 8}\n" for u in range(20)))
    result = runner.invoke(app, ["rl", "simulator", "--data", str(clicks), "--out", "x"])
    one_line_error(result, "no ratings")
    result = runner.invoke(app, ["rl", "episodes", str(tmp_path), "--policy", "oracle"])
    one_line_error(result, "not a simulator folder")
    result = runner.invoke(app, ["rl", "crr", str(tmp_path / "none"), "--out", "y"])
    one_line_error(result, "no such run directory")
