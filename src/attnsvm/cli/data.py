"""``attnsvm data``: list, download, prepare and describe interaction datasets."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from attnsvm.rec.data import catalog, datasets

app = typer.Typer(
    help="Interaction datasets: list the registry, download or prepare one into the cache "
    "($ATTNSVM_DATA or ~/.cache/attnsvm), print statistics.",
    no_args_is_help=True,
)
console = Console(markup=False)  # names and paths come from the user: never read as markup
CACHE = typer.Option(
    None, "--cache-dir", help="Cache directory (default: $ATTNSVM_DATA or ~/.cache/attnsvm)."
)


@app.command("list")
def list_datasets() -> None:
    """List the registered datasets with their preprocessing, source and cache state."""
    for spec in catalog.DATASETS.values():
        prepared = "prepared" if datasets.prepared_path(spec.name).exists() else "not prepared"
        source = (
            "built in"
            if spec.generate
            else (spec.url or "no public URL: prepare from a local copy")
        )
        accepted = ", ".join(f.name for f in spec.files) or "-"
        console.print(
            Text.assemble(
                (spec.name, "bold"),
                f" ({prepared}): {spec.description}\n"
                f"  preprocessing: {spec.preprocessing}\n  files: {accepted}\n"
                f"  download: {source}",
            ),
            highlight=False,
            soft_wrap=True,
        )


@app.command()
def download(
    name: str = typer.Argument(..., help="A registered dataset name (see `attnsvm data list`)."),
    cache_dir: Path | None = CACHE,
) -> None:
    """Download NAME (progress bar, checksum verified) and prepare it."""
    path = datasets.download(name, cache_dir)
    console.print(f"prepared {name} → {path}", highlight=False)


@app.command()
def prepare(
    name: str = typer.Argument(..., help="A registered dataset name (see `attnsvm data list`)."),
    source: Path = typer.Option(
        ..., "--from", help="Local copy: the raw file, a folder holding it, or the official .zip."
    ),
    cache_dir: Path | None = CACHE,
    verify: bool = typer.Option(
        True,
        help="Check the file's sha256 against the registry "
        "(--no-verify accepts another version of the file).",
    ),
) -> None:
    """Prepare NAME from a local copy: verify, preprocess, store in the cache."""
    path = datasets.prepare(name, source, cache_dir, verify=verify)
    console.print(f"prepared {name} → {path}", highlight=False)


@app.command()
def stats(
    name_or_path: str = typer.Argument(
        ..., help="A prepared dataset name, `synthetic`, or an interaction file (read as is)."
    ),
    cache_dir: Path | None = CACHE,
) -> None:
    """Print the statistics table of a prepared dataset or of a file."""
    data = datasets.load_dataset(name_or_path, cache_dir=cache_dir)
    summary = data.stats(name_or_path)
    table = Table("statistic", "value", title=name_or_path)
    for label, value in summary.rows():
        table.add_row(label, value)
    console.print(table)
