"""``attnsvm data``: list, download, prepare and describe interaction datasets."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from attnsvm.errors import InvalidRequest
from attnsvm.rec.data import catalog, datasets
from attnsvm.rec.data.cleaning import Cleaning
from attnsvm.rec.data.tables import TableLayout, read_with_report
from attnsvm.rec.data.titles import read_item_titles

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


COLUMNS = typer.Option(
    None,
    "--columns",
    help="Your own table's columns: 'user=uid,item=sku,time=ts,rating=stars' "
    "(header names, or 0-based indices for a file without a header); time and rating optional. "
    "Times: ISO-8601 (UTC where no zone is given), datetimes, or numbers in Unix seconds "
    "(time_ms=ts for milliseconds; time_us, time_ns).",
)
FORMAT = typer.Option(
    None, "--format", help="csv, tsv or parquet (default: from the file name; .gz is read too)."
)
SEPARATOR = typer.Option(
    None, "--separator", help="One character, or 'tab' (default: ',' for csv, a tab for tsv)."
)
HEADER = typer.Option(
    None,
    "--header/--no-header",
    help="Whether line 1 names the columns (default: yes when --columns names them).",
)


def _layout(
    columns: str | None, format: str | None, separator: str | None, header: bool | None
) -> TableLayout | None:
    if columns is None:
        if (format, separator, header) != (None, None, None):
            raise InvalidRequest("--format, --separator and --header go with --columns")
        return None
    return TableLayout.parse(columns, format, separator, header)


@app.command()
def prepare(
    name: str | None = typer.Argument(
        None, help="A registered dataset name (see `attnsvm data list`); or use --name."
    ),
    source: Path = typer.Option(
        ...,
        "--from",
        help="Local copy: the raw file, a folder holding it, or the official .zip; "
        "with --columns, your own CSV/TSV/Parquet file.",
    ),
    columns: str | None = COLUMNS,
    format: str | None = FORMAT,
    separator: str | None = SEPARATOR,
    header: bool | None = HEADER,
    own_name: str | None = typer.Option(
        None, "--name", help="The name your own table is stored under (with --columns)."
    ),
    drop_where: list[str] = typer.Option(
        [],
        "--drop-where",
        help="Drop the rows where COLUMN OP VALUE holds, e.g. 'quantity<=0' or "
        "\"status=='cancelled'\" (OP: <= >= == != < >; repeatable; a row with COLUMN empty is "
        "kept).",
    ),
    drop_duplicates: str | None = typer.Option(
        None,
        "--drop-duplicates",
        help="'exact': rows identical in every column to an earlier one; 'consecutive': the "
        "same user and item again, next in time.",
    ),
    min_per_user: int = typer.Option(
        0, "--min-per-user", help="Keep users with at least this many interactions (k-core)."
    ),
    min_per_item: int = typer.Option(
        0,
        "--min-per-item",
        help="Keep items with at least this many interactions; with --min-per-user, repeated "
        "until both hold (k-core).",
    ),
    force: bool = typer.Option(False, "--force", help="Replace a table prepared as --name."),
    titles: Path | None = typer.Option(
        None,
        "--titles",
        help="Your items' titles (and categories), kept with the table and shown by recommend, "
        "serve and the lens: a CSV/TSV/Parquet file read as --title-columns says, or "
        "'id<TAB>title' lines.",
    ),
    title_columns: str | None = typer.Option(
        None,
        "--title-columns",
        help="The titles file's columns: 'item=sku,title=name,category=cat' (category optional).",
    ),
    cache_dir: Path | None = CACHE,
    verify: bool = typer.Option(
        True,
        help="Check the file's sha256 against the registry "
        "(--no-verify accepts another version of the file).",
    ),
) -> None:
    """Prepare NAME from a local copy (verify, preprocess, store in the cache), or your own
    table: --from FILE --columns user=...,item=... --name NAME, cleaned as the --drop-*,
    --min-* flags say, with its items' --titles."""
    layout = _layout(columns, format, separator, header)
    if title_columns is not None and titles is None:
        raise InvalidRequest("--title-columns goes with --titles FILE")
    cleaning = Cleaning(
        drop_where=tuple(drop_where),
        drop_duplicates=drop_duplicates,
        min_per_user=min_per_user,
        min_per_item=min_per_item,
    )
    if layout is None:
        if name is None or own_name is not None:
            raise InvalidRequest(
                "give a registered dataset NAME, or your own file with --columns and --name"
            )
        if cleaning != Cleaning() or force or titles is not None:
            raise InvalidRequest(
                f"--drop-*, --min-*, --titles and --force go with your own table (--columns): "
                f"{name} is prepared as registered"
            )
        path = datasets.prepare(name, source, cache_dir, verify=verify)
    else:
        if (name is None) == (own_name is None):
            raise InvalidRequest("name your own table once: --name NAME")
        name = own_name or name
        item_titles = None if titles is None else read_item_titles(titles, title_columns)
        path = datasets.prepare_table(
            name, source, layout, cache_dir, cleaning=cleaning, titles=item_titles, force=force
        )
        _print_report(datasets.read_report(name, cache_dir))
    console.print(f"prepared {name} → {path}", highlight=False)


def _print_report(report: dict | None) -> None:
    """What was read from the user's own table, what was dropped and cleaned and why, and how
    its times were read."""
    if report is None:
        return
    mapping = ", ".join(f"{role}={column}" for role, column in report["columns"].items())
    how = [report["format"]] + (["gzip"] if report.get("compressed") else [])
    if "separator" in report:
        how += [f"separator {report['separator']!r}", "header" if report["header"] else "no header"]
    dropped = ", ".join(f"{count:,} {why}" for why, count in report["dropped"].items())
    lines = [
        f"read {report['rows']:,} rows ({', '.join(how)}; {mapping}); kept {report['kept']:,}; "
        f"dropped {dropped or 'none'}"
    ]
    if report.get("cleaned"):
        steps = ", ".join(f"{count:,} {step}" for step, count in report["cleaned"].items())
        lines.append(f"cleaning removed {steps}")
    if "times" in report:
        times = report["times"]
        lines.append(f"times read as {times['read as']}: {times['first']} to {times['last']}")
        if "hint" in times:
            lines.append(f"hint: {times['hint']}")
    if "titles" in report:
        titles = report["titles"]
        lines.append(
            f"titles: {titles['items with a title']:,} of {titles['items']:,} items "
            f"({titles['categories']:,} with a category) from {titles['source']}; "
            f"{titles['titles of no item']:,} titles for items not in the table"
        )
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True)


@app.command()
def stats(
    name_or_path: str = typer.Argument(
        ...,
        help="A prepared dataset name (yours or registered), `synthetic`, or an interaction "
        "file (read as is, or as --columns says).",
    ),
    columns: str | None = COLUMNS,
    format: str | None = FORMAT,
    separator: str | None = SEPARATOR,
    header: bool | None = HEADER,
    cache_dir: Path | None = CACHE,
) -> None:
    """Print the statistics table of a prepared dataset or of a file, and for your own table
    what was read and what was dropped and why."""
    layout = _layout(columns, format, separator, header)
    if layout is not None:
        data, report = read_with_report(name_or_path, layout)
    else:
        data = datasets.load_dataset(name_or_path, cache_dir=cache_dir)
        report = (
            None if Path(name_or_path).exists() else datasets.read_report(name_or_path, cache_dir)
        )
    summary = data.stats(name_or_path)
    table = Table("statistic", "value", title=name_or_path)
    for label, value in summary.rows():
        table.add_row(label, value)
    console.print(table)
    _print_report(report)
