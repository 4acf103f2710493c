"""``attnsvm train | evaluate | recommend | similar | compare | models``: thin over attnsvm.rec.

Every expected failure (unknown model or config key, bad data, diverged loss, missing run
directory) prints one line ``error: …`` to stderr and exits with status 1: the app's error
boundary (``cli/boundary.py``) does it for every command. Output never reads rich markup, since
ids and paths come from the user's files.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from attnsvm._atomic import check_output
from attnsvm.errors import InvalidRequest
from attnsvm.rec.config import ConfigError, ModelChoice, RunConfig, apply_overrides, load_config
from attnsvm.rec.data.catalog import DATASETS

out = Console(markup=False)


def _metrics_table(title: str, metrics: dict[str, float]) -> Table:
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in metrics.items():
        table.add_row(name, f"{value:.4f}")
    return table


def train_command(
    model: Annotated[str | None, typer.Option(help="model or preset (`attnsvm models`)")] = None,
    data: Annotated[str | None, typer.Option(help="dataset name or interactions file")] = None,
    config: Annotated[Path | None, typer.Option(help="run config, .toml or .json")] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="key=value, e.g. train.lr=3e-4")
    ] = None,
    root: Annotated[str | None, typer.Option(help="folder of raw datasets")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="run directory to create")] = None,
    resume: Annotated[Path | None, typer.Option(help="continue this interrupted run")] = None,
    progress: Annotated[bool, typer.Option(help="show the progress bar")] = True,
    recipe: Annotated[
        str | None, typer.Option(help="staged runs: bicat, mrtransformer or a recipe file")
    ] = None,
) -> None:
    """Train a model; the run directory holds config, best checkpoint, log and metrics."""
    from attnsvm.rec.train.checkpoint import default_run_dir
    from attnsvm.rec.train.pointwise import is_pointwise, train_pointwise
    from attnsvm.rec.train.trainer import train

    if recipe is not None or (resume is not None and (resume / "recipe.json").is_file()):
        from attnsvm.cli.recipe import train_recipe

        options = (model, config)
        staged = train_recipe(recipe, resume, options, data, root, set_, out_dir, progress)
        out.print(_metrics_table(f"test metrics (best epoch {staged.best_epoch})", staged.test))
        out.print(f"run directory: {staged.last_run} (recipe: {staged.folder})")
        return
    if resume is not None:
        if any(v is not None for v in (model, data, config, set_, root, out_dir)):
            raise ConfigError("--resume continues a run with its saved config; give no options")
        result = train(RunConfig(), resume, resume=True, show_progress=progress)
    else:
        run_config = load_config(config) if config is not None else RunConfig()
        if model is not None:
            run_config = dataclasses.replace(
                run_config, model=ModelChoice(model, run_config.model.overrides)
            )
        # file paths are stored absolute, so the run can be evaluated from any folder
        if data is not None and data not in DATASETS and Path(data).exists():
            data = str(Path(data).resolve())
        root = str(Path(root).resolve()) if root is not None else None
        if data is not None or root is not None:
            run_config = dataclasses.replace(
                run_config,
                data=dataclasses.replace(
                    run_config.data,
                    dataset=data if data is not None else run_config.data.dataset,
                    root=root if root is not None else run_config.data.root,
                ),
            )
        run_config = apply_overrides(run_config, set_ or [])
        if out_dir is not None:  # before the data is read: a path that can never be published
            check_output(out_dir, folder=True)
        if is_pointwise(run_config.model.name):  # judged by LogLoss / F1 / AUC, not ranking
            folder = out_dir or default_run_dir(run_config)
            judged = train_pointwise(run_config, folder, verbose=progress)
            out.print(_metrics_table(f"test metrics (best epoch {judged.best_epoch})", judged.test))
            out.print(f"results: {folder / 'pointwise.json'} ({judged.protocol})")
            return
        result = train(run_config, out_dir, show_progress=progress)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, only the main process reports
        out.print(_metrics_table(f"test metrics (best epoch {result.best_epoch})", result.test))
        out.print(f"run directory: {result.run_dir}")


def evaluate_command(
    run_dir: Annotated[Path, typer.Argument(help="a finished run directory")],
    split: Annotated[str, typer.Option(help="test | valid")] = "test",
    sampled: Annotated[
        int | None,
        typer.Option(help="also rank each target among N sampled negatives (labelled)"),
    ] = None,
    sampler: Annotated[str, typer.Option(help="uniform | popularity")] = "uniform",
) -> None:
    """Full-ranking metrics of a run's best checkpoint (and sampled ones, only on request)."""
    from attnsvm.rec.train.runs import open_run

    loaded = open_run(run_dir, split)  # the run and its data, read once for both protocols
    # the sampled request is checked (and run) first, so bad input prints nothing but its error
    legacy = None if sampled is None else loaded.sampled(sampled, sampler)
    result = loaded.full_ranking()
    out.print(f"{split}: {result.protocol}")
    out.print(_metrics_table(f"{split} metrics", result.metrics))
    if legacy is not None:
        out.print(f"{split}: {legacy.protocol}")
        out.print(_metrics_table(f"{split} metrics, sampled", legacy.metrics))


ItemIds = Annotated[str | None, typer.Option(help='external item ids, "i1 i2 i3"')]
Exclude = Annotated[str | None, typer.Option(help='never recommend these items, "i1 i2"')]
Restrict = Annotated[str | None, typer.Option(help='recommend only among these, "i1 i2"')]
K = Annotated[int, typer.Option("-k", help="how many items")]
AsTable = Annotated[
    bool,
    typer.Option(
        "--table", help="print rank, item, score, title and category (where known), not ids alone"
    ),
]


def _ids(text: str | None) -> list[str] | None:
    return text.split() if text else None


def recommend_command(
    run_dir: Annotated[Path, typer.Argument(help="a finished run directory")],
    user: Annotated[str | None, typer.Option(help="external user id")] = None,
    history: ItemIds = None,
    k: K = 10,
    exclude: Exclude = None,
    restrict: Restrict = None,
    all_users: Annotated[bool, typer.Option("--all", help="every user, into --out")] = False,
    out_file: Annotated[Path | None, typer.Option("--out", help="--all: a .parquet file")] = None,
    histories: Annotated[str, typer.Option(help="--all after: full | test | valid")] = "full",
    as_table: AsTable = False,
) -> None:
    """Top-k next items (external ids) for a user or a given history, or for every user."""
    from attnsvm.rec.recommender import Recommender

    filters = {"exclude": _ids(exclude), "restrict": _ids(restrict)}
    if all_users:
        from attnsvm.cli.serve import recommend_everyone

        return recommend_everyone(run_dir, out_file, k, histories, user, history, **filters)
    if (user is None) == (not history):
        raise InvalidRequest("give exactly one of user or history")
    model = Recommender.load(run_dir)
    query = {"users": [user]} if user is not None else {"histories": [_ids(history)]}
    ranked = model.recommend(**query, k=k, **filters)
    if as_table:
        return _print_ranked(ranked, f"top {k} for {user or 'the history'}")
    out.print(" ".join(ranked["item"]))


def similar_command(
    run_dir: Annotated[Path, typer.Argument(help="a finished run directory")],
    items: Annotated[list[str], typer.Argument(help="external item ids")],
    k: K = 10,
    method: Annotated[str, typer.Option(help="next (next-item scores) | cosine")] = "next",
    exclude: Exclude = None,
    restrict: Restrict = None,
    as_table: AsTable = False,
) -> None:
    """Items like each given item (item-to-item), a line for each: ITEM: i1 i2 …"""
    from attnsvm.rec.recommender import Recommender

    table = Recommender.load(run_dir).similar_items(
        items, k, method=method, exclude=_ids(exclude), restrict=_ids(restrict)
    )
    if as_table:
        return _print_ranked(table, f"items like {' '.join(dict.fromkeys(items))} ({method})")
    for item in dict.fromkeys(items):
        out.print(f"{item}: {' '.join(table.filter(table['query'] == item)['item'])}")


def _print_ranked(ranked, title: str) -> None:
    """``Recommender.recommend``'s or ``similar_items``' polars table as a table; the title and
    category columns only where the run's data has them."""
    columns = [c for c in ranked.columns if ranked[c].null_count() < len(ranked) or not len(ranked)]
    table = Table(*columns, title=title)
    for row in ranked.select(columns).iter_rows():
        table.add_row(*(f"{v:.4f}" if isinstance(v, float) else str(v) for v in row))
    out.print(table)


def compare_command(
    run_a: Annotated[Path, typer.Argument(help="first finished run")],
    run_b: Annotated[Path, typer.Argument(help="second finished run")],
    metric: Annotated[str, typer.Option(help="per-user metric")] = "NDCG@10",
) -> None:
    """Paired t-test, Wilcoxon test and effect size between two runs' test metrics."""
    from attnsvm.rec.eval import EvalResult, compare_results
    from attnsvm.rec.train.checkpoint import finished_run

    results = [EvalResult.load(finished_run(path) / "test_eval.json") for path in (run_a, run_b)]
    report = compare_results(*results, metric)
    table = Table(title=f"{metric}: {run_a} (a) vs {run_b} (b)")
    table.add_column("statistic")
    table.add_column("value", justify="right")
    for name, value in report.items():
        table.add_row(name, f"{value:.4g}" if isinstance(value, float) else str(value))
    out.print(table)


def models_command() -> None:
    """List every model, preset, baseline and other trained system, with the command that
    trains it."""
    from attnsvm.rec.models.systems import systems

    for system in systems():
        # plain lines, never wrapped: each command stays one line to copy
        out.print(f"{system.name}: {system.description}", highlight=False, soft_wrap=True)
        for command in system.commands:
            out.print(f"  {command}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add the commands at the root of ``app``."""
    app.command("train")(train_command)
    app.command("evaluate")(evaluate_command)
    app.command("recommend")(recommend_command)
    app.command("similar")(similar_command)
    app.command("compare")(compare_command)
    app.command("models")(models_command)
