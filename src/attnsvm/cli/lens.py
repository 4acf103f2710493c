"""``attnsvm lens RUN_DIR``: the trained model's attention read as an Att-SVM (attnsvm.lens)."""

from __future__ import annotations

from pathlib import Path

import typer


def lens(
    run_dir: Path = typer.Argument(..., help="a finished run directory"),
    sequences: int = typer.Option(200, help="test sequences to read"),
    layer: int | None = typer.Option(None, help="only this layer (0-based)"),
    head: int | None = typer.Option(None, help="only this head (0-based)"),
    out: Path | None = typer.Option(None, "--out", help="output folder (default RUN_DIR/lens)"),
    titles: Path | None = typer.Option(
        None, help="item titles (movies.dat or 'id<TAB>title'); default: movies.dat by the data"
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bars"),
) -> None:
    """Write lens.json, PNG plots and a self-contained report.html for a run; print the
    plain verdict (what each head attends to) and the report's path."""
    import json

    from attnsvm.lens.report import write_report

    report = write_report(run_dir, out, sequences, layer, head, titles=titles, progress=not quiet)
    for row in json.loads((report.parent / "lens.json").read_text()).get("verdict", []):
        typer.echo(row["sentence"])
    typer.echo(str(report))


def register(app: typer.Typer) -> None:
    app.command("lens")(lens)
