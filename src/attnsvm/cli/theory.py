"""``attnsvm theory``: run the paper's experiments."""

from pathlib import Path

import typer
from rich.console import Console

from attnsvm.theory.experiments import EXPERIMENTS, run_experiment, summary_table

app = typer.Typer(help="The theory lab: the paper's experiments.", no_args_is_help=True)
console = Console()
DEFAULT_OUT = Path("theory-results")


def _report(name: str, result, out_dir: Path) -> None:
    paths = result.save(out_dir)
    console.print(
        f"[bold]{name}[/bold] ({result.seconds:.1f} s): {EXPERIMENTS[name].headline(result)}"
    )
    for check, ok in result.checks.items():
        console.print(f"  {'[green]pass[/green]' if ok else '[red]FAIL[/red]'}  {check}")
    console.print("  [dim]differences from the official notebook:[/dim]")
    for note in result.notes:
        console.print(f"  [dim]- {note}[/dim]")
    console.print(f"  wrote {', '.join(str(p) for p in paths)}", markup=False)  # user's --out


@app.command("list")
def list_experiments() -> None:
    """List the experiments and their default seed counts."""
    for name, exp in EXPERIMENTS.items():
        console.print(f"{name:22s} {exp.default_seeds:4d} seeds  {exp.description}")


@app.command("run")
def run(
    name: str = typer.Argument(..., help=f"one of: {', '.join(EXPERIMENTS)}"),
    seeds: int = typer.Option(
        None,
        "--seeds",
        help="seeds (multi-token: accepted runs per d); default: the notebook's count",
    ),
    out: Path = typer.Option(None, "--out", help="output folder (default theory-results/NAME)"),
    quick: bool = typer.Option(False, "--quick", help="the demo's small settings"),
    progress: bool = typer.Option(False, "--progress/--no-progress", help="GD progress bars"),
) -> None:
    """Run one experiment; write results.json and its PNG figures."""
    if name not in EXPERIMENTS:
        raise typer.BadParameter(
            f"unknown experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}",
            param_hint="NAME",
        )
    result = run_experiment(name, seeds, quick=quick, progress=progress)
    _report(name, result, out or DEFAULT_OUT / name)


@app.command("all")
def run_all(
    out: Path = typer.Option(DEFAULT_OUT, "--out", help="output folder (one subfolder each)"),
    quick: bool = typer.Option(False, "--quick", help="the demo's small settings"),
) -> None:
    """Run every experiment and print a summary table."""
    results = {}
    for name in EXPERIMENTS:
        results[name] = run_experiment(name, quick=quick)
        _report(name, results[name], out / name)
    title = "attnsvm theory lab" + (" (quick)" if quick else "")
    console.print(summary_table(results, title, quick=quick))
