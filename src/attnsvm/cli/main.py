"""The ``attnsvm`` command: one Typer app per command group, each a few lines over the library.

Every command runs inside one error boundary (``cli/boundary.py``, the root group's class): an
expected failure is one line ``error: …`` and exit status 1, a bug keeps its traceback.
"""

import typer

from attnsvm.cli import data, demo, serve, theory, tune
from attnsvm.cli import lens as lens_commands
from attnsvm.cli import rl as rl_commands
from attnsvm.cli import train as train_commands
from attnsvm.cli.boundary import ErrorBoundary

app = typer.Typer(
    name="attnsvm",
    cls=ErrorBoundary,
    help="Attention as a token-selecting SVM: theory lab, sequential recommenders, and the lens.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.add_typer(theory.app, name="theory")
app.add_typer(data.app, name="data")
app.add_typer(rl_commands.app, name="rl")
train_commands.register(app)
lens_commands.register(app)
demo.register(app)
tune.register(app)
serve.register(app)


@app.callback()
def _root() -> None:
    """attnsvm command-line tool."""


if __name__ == "__main__":
    app()
