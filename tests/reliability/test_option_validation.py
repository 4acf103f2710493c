"""Every numeric option of every command is checked as the config fields are checked: the test
walks the app's real command tree (``cli/main.load_command``, the click commands the app runs),
reads each command's ``--help`` (every numeric option shows its range there) and gives each int
or float option what its range refuses (below and above it, NaN, ±∞, an integer of 31 digits):
one line ``error: …`` naming the option, exit status 1, no traceback; a value that is no number
at all is click's own usage error. A numeric option without a range in
``cli/options.OPTION_RANGES`` fails here, so a new command is checked by construction."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from attnsvm.cli.main import COMMANDS, app, load_command
from attnsvm.cli.options import OPTION_RANGES, option_name, walk
from attnsvm.rec.config_base import Range


def numeric_options() -> list[tuple[str, str, type]]:
    """(command path, option, int or float) of every numeric option the app has."""
    found = []
    for name in COMMANDS:
        for path, command in walk(load_command(name), name):
            for param in command.params:
                annotation = param.type_descriptor.annotation
                if annotation in (int, float):
                    found.append((path, option_name(param), annotation))
    return found


NUMERIC = numeric_options()


def refused_values(kind: type, allowed: Range) -> list[str]:
    """What ``allowed`` refuses, as typed on a command line."""
    values = ["1" + "0" * 30] if allowed.high < 10**30 else []
    if kind is float:
        values += ["nan", "inf", "-inf", "1e400"]
    if math.isfinite(allowed.low):
        below = allowed.low if allowed.low_open else allowed.low - 1
        values.append(str(int(below) if kind is int else float(below)))
    if math.isfinite(allowed.high):
        above = allowed.high if allowed.high_open else allowed.high + 1
        values.append(str(int(above) if kind is int else float(above)))
    return values


def test_the_walk_finds_the_numeric_options_of_every_command():
    keys = {f"{path} {option}" for path, option, _ in NUMERIC}
    assert {"rl episodes --steps", "rl simulator --shrinkage", "rl rated --threshold"} <= keys
    assert {"tune --trials", "serve --port", "lens --sequences", "data prepare --min-per-user"} <= (
        keys
    )


def test_every_numeric_option_has_a_range_and_every_range_an_option():
    keys = {f"{path} {option}" for path, option, _ in NUMERIC}
    missing = sorted(keys - set(OPTION_RANGES))
    assert not missing, f"numeric options without a range in cli/options.OPTION_RANGES: {missing}"
    assert not set(OPTION_RANGES) - keys, "ranges of options that no longer exist"


COMMAND_PATHS = sorted(
    {path for name in COMMANDS for path, command in walk(load_command(name), name)}
)


@pytest.mark.parametrize("path", COMMAND_PATHS)
def test_each_commands_help_shows_the_range_of_each_numeric_option(path):
    result = CliRunner().invoke(app, [*path.split(), "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    shown = " ".join(result.output.split())
    for where, option, _ in NUMERIC:
        if where == path:
            assert f"(range {OPTION_RANGES[f'{path} {option}']})" in shown, (option, shown)


def test_every_default_lies_in_its_range():
    for name in COMMANDS:
        for path, command in walk(load_command(name), name):
            for param in command.params:
                allowed = OPTION_RANGES.get(f"{path} {option_name(param)}")
                if allowed is not None and param.default is not None:
                    assert param.default in allowed, (path, option_name(param), param.default)


def one_error_line(result) -> str:
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1, result.output
    return lines[0]


@pytest.mark.parametrize(
    ("path", "option", "kind"), NUMERIC, ids=[f"{p} {o}" for p, o, _ in NUMERIC]
)
def test_each_numeric_option_refuses_what_its_range_refuses(path, option, kind):
    allowed = OPTION_RANGES[f"{path} {option}"]
    for value in refused_values(kind, allowed):
        result = CliRunner().invoke(app, [*path.split(), option, value])
        line = one_error_line(result)
        assert line.startswith(f"error: {option} must "), (value, line)
    result = CliRunner().invoke(app, [*path.split(), option, "[/bogus]"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"Invalid value for '{option}'" in result.output, result.output


def test_the_messages_say_the_range_and_the_value():
    runner = CliRunner()
    line = one_error_line(runner.invoke(app, ["rl", "episodes", "--steps", "0"]))
    assert line == "error: --steps must lie in [1, 2,147,483,647], got 0"
    line = one_error_line(runner.invoke(app, ["rl", "simulator", "--shrinkage", "nan"]))
    assert line == "error: --shrinkage must be a finite number, got nan"
    line = one_error_line(runner.invoke(app, ["rl", "rated", "--threshold", "-inf"]))
    assert line == "error: --threshold must be a finite number, got -inf"
