"""The command line's one error boundary, around every command the ``attnsvm`` app holds.

``ErrorBoundary`` is the root group's class (``typer.Typer(cls=ErrorBoundary)`` in
``cli/main.py``), so every command and command group added to the app, now or later, runs inside
it without doing anything. An expected failure (``attnsvm.errors.expected_message``: a bad file,
setting, request or run directory, an ``OSError``) prints one line ``error: …`` to stderr, as
plain text (never read as rich markup; control characters escaped; cut to a bounded length), and
exits with status 1. Anything else is a bug: it propagates, and typer shows its traceback.
"""

from __future__ import annotations

from typing import Any

import click
import typer
from typer.core import TyperGroup

from attnsvm.errors import expected_message


class ErrorBoundary(TyperGroup):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as error:
            message = expected_message(error)
            if message is None:
                raise
            click.echo(f"error: {message}", err=True)
            raise typer.Exit(1) from None
