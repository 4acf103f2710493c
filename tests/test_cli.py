"""The root command: its help answers without the heavy libraries, and its table of commands
says what each command itself says."""

from __future__ import annotations

import subprocess
import sys

import pytest

from attnsvm.cli.main import COMMANDS, help_line, load_command


def test_the_root_help_loads_no_heavy_library():
    code = (
        "import sys\n"
        "from attnsvm.cli.main import app\n"
        "try:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'cvxpy', 'polars', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
    assert all(name in out.stdout for name in COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_listed_line_is_the_commands_own_help(name):
    command = load_command(name)
    own = " ".join((command.help or "").split("\n\n")[0].split())
    assert help_line(name) == own and own
