"""``attnsvm serve | explore | export`` and ``attnsvm recommend --all``: thin over attnsvm.serve
and attnsvm.rec.train (errors are the app's boundary's, as for every command)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attnsvm.errors import InvalidRequest

RunDir = Annotated[Path, typer.Argument(help="a finished run directory")]
Host = Annotated[
    str, typer.Option(help="address to listen on; anything but loopback is reachable from outside")
]
Port = Annotated[int, typer.Option(help="TCP port")]
Titles = Annotated[
    Path | None,
    typer.Option(
        help="item titles (and categories) to show instead of those kept with the data: a "
        "CSV/TSV/Parquet file read as --title-columns says, a MovieLens movie file or "
        "'id<TAB>title' lines"
    ),
]
TitleColumns = Annotated[
    str | None, typer.Option(help="the titles file's columns: 'item=sku,title=name,category=cat'")
]


def serve_command(
    run_dir: RunDir,
    host: Host = "127.0.0.1",
    port: Port = 8000,
    workers: Annotated[int, typer.Option(help="worker processes, each with the model")] = 1,
    micro_batching: Annotated[
        bool, typer.Option(help="share forward passes between concurrent requests")
    ] = True,
    max_batch: Annotated[int, typer.Option(help="most queries in one forward pass")] = 64,
    batch_wait_ms: Annotated[
        float, typer.Option(help="longest wait for more queries after the first")
    ] = 2.0,
    threads: Annotated[int | None, typer.Option(help="torch threads per worker")] = None,
    access_log: Annotated[bool, typer.Option(help="log every request")] = False,
    titles: Titles = None,
    title_columns: TitleColumns = None,
) -> None:
    """Serve a run's recommendations as a JSON HTTP API, with the attention explorer at /."""
    from attnsvm.serve.server import ServeOptions, serve

    options = ServeOptions(
        host=host,
        port=port,
        workers=workers,
        micro_batching=micro_batching,
        max_batch=max_batch,
        max_wait_ms=batch_wait_ms,
        threads=threads,
        access_log=access_log,
        titles=titles,
        title_columns=title_columns,
    )
    serve(run_dir, options, announce=typer.echo)


def explore_command(
    run_dir: RunDir,
    host: Host = "127.0.0.1",
    port: Port = 8000,
    titles: Titles = None,
    title_columns: TitleColumns = None,
) -> None:
    """Open the attention explorer of a run: attnsvm serve with its defaults."""
    from attnsvm.serve.server import ServeOptions, serve

    options = ServeOptions(host=host, port=port, titles=titles, title_columns=title_columns)
    serve(run_dir, options, announce=typer.echo)


def export_command(
    run_dir: RunDir,
    format_: Annotated[str, typer.Option("--format", help="onnx | torchscript")] = "onnx",
    out: Annotated[
        Path | None, typer.Option(help="file to write (default RUN_DIR/export/model.EXT)")
    ] = None,
) -> None:
    """Export the run's scoring path (item windows in, next-item scores out)."""
    from attnsvm.rec.train.export import export_run

    exported = export_run(run_dir, format_, out)
    typer.echo(f"{exported.path} ({exported.describe()})")


def recommend_everyone(
    run_dir: Path, out: Path | None, k: int, histories: str, user, history, exclude, restrict
) -> None:
    """``attnsvm recommend RUN_DIR --all --out recs.parquet``: every user's top-k, with a bar."""
    from rich.progress import Progress

    from attnsvm.rec.train.bulk import recommend_all

    if user is not None or history is not None:
        raise InvalidRequest("--all recommends for every user: give no --user or --history")
    if out is None:
        raise InvalidRequest("--all needs --out FILE.parquet")
    with Progress(transient=True) as bar:
        task = bar.add_task("ranking users", total=None)
        result = recommend_all(
            run_dir,
            out,
            k,
            histories=histories,
            exclude=exclude,
            restrict=restrict,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    typer.echo(
        f"{result.path}: top {result.k} for {result.users} users "
        f"(ranked in {result.rank_seconds:.2f} s, written in {result.write_seconds:.2f} s)"
    )


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_command)
    app.command("explore")(explore_command)
    app.command("export")(export_command)
