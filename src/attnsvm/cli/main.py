"""The ``attnsvm`` command: one Typer app per command group, each a few lines over the library.

Every command runs inside one error boundary (``cli/boundary.py``, the root group's class): an
expected failure is one line ``error: …`` and exit status 1, a bug keeps its traceback.

Commands load on demand: ``COMMANDS`` names each command's module, and ``attnsvm --help`` reads
each one-line help from the module's source, so it lists them without importing torch, cvxpy or
polars (it answers in a fraction of a second); a command's module is imported only when that
command runs or shows its own help. ``tests/test_cli.py`` checks the lines against the commands.
"""

from __future__ import annotations

import ast
import functools
import importlib
import os
import sys
from pathlib import Path

import click
import typer

from attnsvm.cli.boundary import ErrorBoundary
from attnsvm.cli.options import check_ranges
from attnsvm.process import configure_process, exit_without_teardown

#: command → the module in ``attnsvm.cli`` that defines it, in help order
COMMANDS: dict[str, str] = {
    "train": "train",
    "evaluate": "train",
    "recommend": "train",
    "similar": "train",
    "compare": "train",
    "models": "train",
    "lens": "lens",
    "demo": "demo",
    "tune": "tune",
    "serve": "serve",
    "explore": "serve",
    "export": "serve",
    "theory": "theory",
    "data": "data",
    "rl": "rl",
    "stream": "stream",
}


@functools.cache
def _source_tree(module: str) -> ast.Module:
    return ast.parse(Path(__file__).with_name(f"{module}.py").read_text())


def help_line(name: str) -> str:
    """The first paragraph of command ``name``'s own help, read from its module's source without
    importing it: the docstring of its function (``name`` or ``name_command``), or the ``help``
    of a command group's ``typer.Typer(...)``."""
    tree = _source_tree(COMMANDS[name])
    text = ""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in (name, f"{name}_command"):
            text = ast.get_docstring(node) or ""
            break
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "Typer":
            helps = [k.value for k in node.keywords if k.arg == "help"]
            text = ast.literal_eval(helps[0]) if helps else text
    return " ".join(text.split("\n\n")[0].split())


def load_command(name: str) -> click.Command:
    """The real click command ``name``, built from its module (imported now), its numeric
    options checked against their ranges (``cli/options.py``)."""
    module = importlib.import_module(f"attnsvm.cli.{COMMANDS[name]}")
    holder = typer.Typer()
    holder.callback()(lambda: None)  # a group even when the module defines one command
    if hasattr(module, "register"):
        module.register(holder)
    else:
        holder.add_typer(module.app, name=name)
    return check_ranges(typer.main.get_command(holder).commands[name], name)


class LazyCommands(ErrorBoundary):
    """The root group: lists ``COMMANDS`` from the table, imports a command to run it."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        # the root help and completion ask every command for its line: answer from the table
        if name not in COMMANDS:
            return None
        line = help_line(name)
        return click.Command(name, help=line, short_help=line)

    def resolve_command(self, ctx: click.Context, args: list[str]):
        if args and args[0] in COMMANDS:
            if not {"--help", "-h"} & set(args[1:]):
                # OpenMP waiting and threads, before the command's module imports torch
                configure_process()
            return args[0], load_command(args[0]), args[1:]
        return super().resolve_command(ctx, args)


app = typer.Typer(
    name="attnsvm",
    cls=LazyCommands,
    help="Attention as a token-selecting SVM: theory lab, sequential recommenders, and the lens.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def _root() -> None:
    """attnsvm command-line tool."""


def main() -> None:
    """The console entry point (``attnsvm``, ``python -m attnsvm.cli.main``)."""
    if int(os.environ.get("WORLD_SIZE", "1")) == 1:
        app()
        return
    try:  # a process of a torchrun job
        app()
        code = 0
    except SystemExit as done:
        code = done.code or 0
        if not isinstance(code, int):
            print(code, file=sys.stderr)  # as the interpreter prints ``sys.exit(message)``
            code = 1
    exit_without_teardown(code)


if __name__ == "__main__":
    main()
