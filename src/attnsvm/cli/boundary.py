"""The command line's one error boundary, around every command the ``attnsvm`` app holds.

``ErrorBoundary`` is the root group's class (``typer.Typer(cls=ErrorBoundary)`` in
``cli/main.py``), so every command and command group added to the app, now or later, runs inside
it without doing anything. An expected failure (``attnsvm.errors.expected_message``: a bad file,
setting, request or run directory, an ``OSError``) prints one line ``error: …`` to stderr, as
plain text (never read as rich markup; control characters escaped; cut to a bounded length), and
exits with status 1. A module that only an extra installs, missing, is expected too: the line
names the command and the extra to install (``attnsvm.extras``). Anything else is a bug: it
propagates, and typer shows its traceback.
"""

from __future__ import annotations

from typing import Any

import click
import typer
from typer.core import TyperGroup

from attnsvm.errors import expected_message
from attnsvm.extras import missing_extra


class ErrorBoundary(TyperGroup):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # the first word that is not an option names the command (the root takes no values),
        # kept for the line of a missing extra, which may come while the command loads
        ctx.meta["attnsvm.command"] = next((a for a in args if not a.startswith("-")), None)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as error:
            command = " ".join(filter(None, ("attnsvm", ctx.meta.get("attnsvm.command"))))
            message = expected_message(missing_extra(error, command) or error)
            if message is None:
                raise
            click.echo(f"error: {message}", err=True)
            raise typer.Exit(1) from None
