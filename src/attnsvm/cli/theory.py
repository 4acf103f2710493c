"""``attnsvm theory``: run the paper's experiments."""

import typer

app = typer.Typer(help="The theory lab: the paper's experiments.", no_args_is_help=True)
