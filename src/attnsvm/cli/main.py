"""The ``attnsvm`` command: one Typer app per command group, each a few lines over the library.

Every command runs inside one error boundary (``cli/boundary.py``, the root group's class): an
expected failure is one line ``error: …`` and exit status 1, a bug keeps its traceback.

Commands load on demand: ``COMMANDS`` names each command's module and its one-line help, so
``attnsvm --help`` lists them without importing torch, cvxpy or polars (it answers in a fraction
of a second), and a command's module is imported only when that command runs or shows its own
help. ``tests/test_cli.py`` holds every line here to the command's own help.
"""

from __future__ import annotations

import importlib

import click
import typer

from attnsvm.cli.boundary import ErrorBoundary

#: command → (module in ``attnsvm.cli`` that defines it, its one-line help), in help order
COMMANDS: dict[str, tuple[str, str]] = {
    "train": (
        "train",
        "Train a model; the run directory holds config, best checkpoint, log and metrics.",
    ),
    "evaluate": (
        "train",
        "Full-ranking metrics of a run's best checkpoint (and sampled ones, only on request).",
    ),
    "recommend": (
        "train",
        "Top-k next items (external ids) for a user or a given history, or for every user.",
    ),
    "compare": (
        "train",
        "Paired t-test, Wilcoxon test and effect size between two runs' test metrics.",
    ),
    "models": ("train", "List the registered models and presets."),
    "lens": ("lens", "Write lens.json, PNG plots and a self-contained report.html for a run."),
    "demo": ("demo", "Theory lab (quick), a small SASRec on synthetic data, and its lens report."),
    "tune": (
        "tune",
        "Search hyper-parameters; run it again on the same --out to continue the study.",
    ),
    "serve": (
        "serve",
        "Serve a run's recommendations as a JSON HTTP API, with the attention explorer at /.",
    ),
    "explore": ("serve", "Open the attention explorer of a run: attnsvm serve with its defaults."),
    "export": ("serve", "Export the run's scoring path (item windows in, next-item scores out)."),
    "theory": ("theory", "The theory lab: the paper's experiments."),
    "data": (
        "data",
        "Interaction datasets: list the registry, download or prepare one into the cache "
        "($ATTNSVM_DATA or ~/.cache/attnsvm), print statistics.",
    ),
    "rl": ("rl", "User simulator, cold-start episodes, RLT4Rec and CRR (offline RL)."),
}


def load_command(name: str) -> click.Command:
    """The real click command ``name``, built from its module (imported now)."""
    module = importlib.import_module(f"attnsvm.cli.{COMMANDS[name][0]}")
    holder = typer.Typer()
    holder.callback()(lambda: None)  # a group even when the module defines one command
    if hasattr(module, "register"):
        module.register(holder)
    else:
        holder.add_typer(module.app, name=name)
    return typer.main.get_command(holder).commands[name]


class LazyCommands(ErrorBoundary):
    """The root group: lists ``COMMANDS`` from the table, imports a command to run it."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        # the root help and completion ask every command for its line: answer from the table
        if name not in COMMANDS:
            return None
        return click.Command(name, help=COMMANDS[name][1], short_help=COMMANDS[name][1])

    def resolve_command(self, ctx: click.Context, args: list[str]):
        if args and args[0] in COMMANDS:
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


if __name__ == "__main__":
    app()
