"""The root command: its help answers without the heavy libraries, and its table of commands
says what each command itself says."""

from __future__ import annotations

import subprocess
import sys

import pytest

import attnsvm.cli.main as main_module
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


class _Left(Exception):
    """Raised in place of ``os._exit`` so the test sees the process leave."""


@pytest.mark.parametrize(
    ("world_size", "argv", "left_with"),
    [("2", ["--help"], 0), ("2", ["nosuch"], 2), ("1", ["--help"], None)],
)
def test_a_torchrun_process_leaves_without_the_interpreters_teardown(
    monkeypatch, world_size, argv, left_with
):
    def leave(code):
        raise _Left(code)

    monkeypatch.setenv("WORLD_SIZE", world_size)
    monkeypatch.setattr(sys, "argv", ["attnsvm", *argv])
    monkeypatch.setattr(main_module.os, "_exit", leave)
    if left_with is None:  # one process: the interpreter's own exit, as any command
        with pytest.raises(SystemExit):
            main_module.main()
        return
    with pytest.raises(_Left) as left:
        main_module.main()
    assert left.value.args == (left_with,)
