"""Command-line interface: thin Typer apps over the public library functions."""
