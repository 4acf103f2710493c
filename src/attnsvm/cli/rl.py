"""``attnsvm rl …``: the user simulator, cold-start episodes, RLT4Rec on episodes, CRR stage 2.

Thin commands over ``attnsvm.rec.sim`` and ``attnsvm.rec.rl``; every expected failure is one
``error: …`` line (the app's error boundary).
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from attnsvm._atomic import check_output
from attnsvm.extras import require
from attnsvm.rec.config import ConfigError, apply_overrides
from attnsvm.rec.config_base import coerce

app = typer.Typer(help="User simulator, cold-start episodes, RLT4Rec and CRR (offline RL).")
out = Console(markup=False)
Sets = Annotated[list[str] | None, typer.Option("--set", help="key=value, e.g. train.epochs=5")]


@app.command("simulator")
def simulator_command(
    data: Annotated[str, typer.Option(help="a dataset with ratings (ml-100k, ml-latest-small)")],
    out_dir: Annotated[Path, typer.Option("--out", help="the simulator folder to write")],
    root: Annotated[str | None, typer.Option(help="folder of raw datasets")] = None,
    groups: Annotated[int, typer.Option(help="user groups K")] = 8,
    items: Annotated[int, typer.Option(help="most-rated items kept")] = 400,
    shrinkage: Annotated[float, typer.Option(help="pseudo-ratings towards the item")] = 5.0,
    factors: Annotated[int, typer.Option(help="user factors for k-means (0: none)")] = 16,
    seed: Annotated[int, typer.Option(help="k-means seed")] = 0,
) -> None:
    """Fit the group-Gaussian user simulator from a dataset's ratings."""
    from attnsvm.rec.data.catalog import DATASETS
    from attnsvm.rec.data.datasets import load_dataset
    from attnsvm.rec.sim.simulator import FitSettings, fit_simulator

    check_output(out_dir, folder=True)  # before the fit: a folder that can never be written
    if data not in DATASETS and Path(data).exists():
        data = str(Path(data).resolve())
    root = str(Path(root).resolve()) if root is not None else None
    settings = FitSettings(groups, items, shrinkage, factors, seed=seed)
    simulator = fit_simulator(
        load_dataset(data, root=root), settings, {"dataset": data, "root": root}
    )
    simulator.save(out_dir)
    table = Table(title=f"simulator of {data}: {simulator.num_items} items")
    for column in ("group", "real users", "expected rating (mean over items)"):
        table.add_column(column)
    expected = simulator.expected_ratings()
    for group, size in enumerate(simulator.group_sizes.tolist()):
        table.add_row(str(group), str(size), f"{expected[group].mean():.3f}")
    out.print(table)
    out.print(f"global mean rating {simulator.global_mean():.4f}; written to {out_dir}")


@app.command("rlt4rec")
def rlt4rec_command(
    simulator: Annotated[Path, typer.Argument(help="a simulator folder (attnsvm rl simulator)")],
    out_dir: Annotated[Path, typer.Option("--out", help="run directory to create")],
    source: Annotated[str, typer.Option(help="random (the paper's bad data) | logged")] = "random",
    steps: Annotated[int, typer.Option(help="episode length")] = 25,
    valid_users: Annotated[int, typer.Option(help="validation users per group")] = 25,
    test_users: Annotated[int, typer.Option(help="test users per group")] = 200,
    users_seed: Annotated[int, typer.Option(help="seed of the simulated users")] = 0,
    set_: Sets = None,
) -> None:
    """Train RLT4Rec on simulated or logged episodes (official schedule unless --set)."""
    from attnsvm.rec.sim.rlt4rec_training import (
        OFFICIAL_TRAIN,
        EpisodeSettings,
        episode_run_config,
        train_rlt4rec,
    )
    from attnsvm.rec.sim.simulator import GroupSimulator

    config = episode_run_config(GroupSimulator.load(simulator), {}, OFFICIAL_TRAIN)
    config = apply_overrides(config, set_ or [])
    settings = EpisodeSettings(source, steps, valid_users, test_users, users_seed)
    metrics = train_rlt4rec(simulator, out_dir, config, settings, log=out.print)
    out.print(f"test {metrics['test']} (best epoch {metrics['best_epoch']}); run: {out_dir}")


@app.command("episodes")
def episodes_command(
    simulator: Annotated[Path, typer.Argument(help="a simulator folder")],
    policy: Annotated[
        list[str], typer.Option(help="oracle | random | popularity | a finished run directory")
    ],
    out_dir: Annotated[Path | None, typer.Option("--out", help="write episodes.json/.png")] = None,
    users: Annotated[int, typer.Option(help="simulated users per group")] = 200,
    steps: Annotated[int, typer.Option(help="recommendations per user")] = 25,
    users_seed: Annotated[int, typer.Option(help="seed of the simulated users")] = 0,
    seed: Annotated[int, typer.Option(help="seed of the random policy")] = 0,
    feedback: Annotated[str | None, typer.Option(help="all | liked (default: by model)")] = None,
) -> None:
    """Cold-start episodes: mean rating over the recommendations, per policy, paired users."""
    from attnsvm.rec.sim.episodes import run_episodes, save_results
    from attnsvm.rec.sim.policies import (
        GroupOraclePolicy,
        PopularityPolicy,
        RandomPolicy,
        run_policy,
    )
    from attnsvm.rec.sim.simulator import GroupSimulator

    if out_dir is not None:  # before the episodes are played
        check_output(out_dir, folder=True)
        require("plots", "attnsvm rl episodes --out")  # episodes.png
    sim = GroupSimulator.load(simulator)
    people = sim.users(users, users_seed)
    named = {
        "oracle": lambda: GroupOraclePolicy(sim, people),
        "random": lambda: RandomPolicy(sim.num_items, seed),
        "popularity": lambda: PopularityPolicy(sim),
    }
    results = []
    for name in policy:
        chosen = named[name]() if name in named else run_policy(name, sim, feedback=feedback)
        results.append(run_episodes(chosen, people, steps))
    table = Table(title=f"{len(people)} simulated cold-start users, {steps} recommendations")
    for column in ("policy", f"mean rating@{steps}", "± s.e.", "first 5", "last 5"):
        table.add_column(column)
    for result in results:
        curve = result.per_step
        table.add_row(
            result.name,
            f"{result.mean:.4f}",
            f"{result.standard_error:.4f}",
            f"{curve[:5].mean():.3f}",
            f"{curve[-5:].mean():.3f}",
        )
    out.print(table)
    if out_dir is not None:
        save_results(results, out_dir)
        out.print(f"written to {out_dir} (episodes.json, episodes.npz, episodes.png)")


@app.command("crr")
def crr_command(
    stage1: Annotated[Path, typer.Argument(help="the finished stage-1 run (causal model)")],
    out_dir: Annotated[Path, typer.Option("--out", help="run directory to create")],
    set_: Sets = None,
) -> None:
    """CRR stage 2 from a supervised run (--set crr.weight=binary, train.epochs=…)."""
    from attnsvm.rec.rl.crr import CRRConfig
    from attnsvm.rec.rl.crr_trainer import crr_run_config, train_crr

    crr_sets = [s for s in set_ or [] if s.startswith("crr.")]
    config = apply_overrides(crr_run_config(stage1), [s for s in set_ or [] if s not in crr_sets])
    hints = typing.get_type_hints(CRRConfig)
    values = {}
    for assignment in crr_sets:
        key, _, value = assignment.removeprefix("crr.").partition("=")
        if key not in hints:
            raise ConfigError(f"--set crr.{key}: unknown key (known: {', '.join(hints)})")
        values[key] = coerce(value, hints[key], f"crr.{key}", "command line")
    try:
        crr = CRRConfig(**values)
    except ValueError as error:
        raise ConfigError(f"command line: {error}") from None
    metrics = train_crr(config, crr, out_dir, log=out.print)
    out.print(
        f"test NDCG@10 {metrics['test']['NDCG@10']:.4f}; liked HR@10 "
        f"{metrics['test_liked']['HR@10']:.4f}; run: {out_dir}"
    )


@app.command("rated")
def rated_command(
    run_dir: Annotated[Path, typer.Argument(help="a finished leave-one-out run")],
    split: Annotated[str, typer.Option(help="test | valid")] = "test",
    threshold: Annotated[float, typer.Option(help="a target rated ≥ this is liked")] = 4.0,
) -> None:
    """A run's metrics over the users whose held-out item they rated ≥ the threshold."""
    from attnsvm.rec.rl.rated import rated_metrics, target_ratings
    from attnsvm.rec.train.runs import open_run

    loaded = open_run(run_dir, split)
    ratings = target_ratings(loaded.run.config.data, loaded.task, split)
    liked = rated_metrics(loaded.full_ranking(), ratings, threshold)
    table = Table(title=f"{split} users whose target they rated ≥ {threshold}: {liked['users']}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in liked.items():
        if name != "users":
            table.add_row(name, f"{value:.4f}")
    out.print(table)
