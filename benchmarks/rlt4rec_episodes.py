"""RLT4Rec trained on random ("bad") episodes against the group oracle, popularity, random and
SASRec+ trained on the logs, in cold-start episodes on a simulator fitted from ML-100K.

    python benchmarks/rlt4rec_episodes.py --out runs/rlt4rec-bench            # the full run
    python benchmarks/rlt4rec_episodes.py --out /tmp/b --epochs 1 --steps-per-epoch 20 \
        --sasrec-epochs 2 --users 20 --seeds 0                                  # a smoke run

1. fits the group-Gaussian simulator of ML-100K (8 groups, 400 items, seed 0) into
   ``OUT/simulator`` (``attnsvm rl simulator``);
2. trains RLT4Rec on random episodes for each seed (``attnsvm rl rlt4rec``: the official
   schedule, 30 epochs × 1,000 steps of 128 episodes) into ``OUT/rlt4rec-random-s{seed}``;
3. trains SASRec+ on the ML-100K logs (leave-one-out, the zoo's setting) for each seed into
   ``OUT/sasrec-logs-s{seed}``; as a policy it reads back the items its users liked (rated
   ≥ 4), popularity until there is one (``attnsvm.rec.sim.policies``);
4. plays every policy on the same 200 test users per group (25 recommendations each) and
   writes ``OUT/summary.md`` / ``summary.json`` (mean rating@25 ± s.e., its ratio to the
   oracle, paired t-tests of RLT4Rec against each other policy on the per-user means, the
   seeds of a model averaged per user) and ``OUT/episodes.png`` (the per-step curves).

Finished runs are reused, so an interrupted benchmark continues where it stopped (an
interrupted run folder ``*.incomplete`` is deleted and trained again). The target of the
issue: RLT4Rec ≥ 0.9 × the oracle and above the other policies. The numbers are on our
simulator: not comparable to the paper's Netflix/Goodreads figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from pathlib import Path

import numpy as np
from scipy import stats

from attnsvm.rec.sim.episodes import EpisodeResult, plot_curves, run_episodes
from attnsvm.rec.sim.policies import GroupOraclePolicy, PopularityPolicy, RandomPolicy, run_policy
from attnsvm.rec.sim.rlt4rec_training import (
    OFFICIAL_TRAIN,
    EpisodeSettings,
    episode_run_config,
    train_rlt4rec,
)
from attnsvm.rec.sim.simulator import FitSettings, GroupSimulator, fit_simulator
from zoo import ROOT, run_config  # a sibling script: the zoo's SASRec+ setting


def fresh(folder: Path) -> bool:
    """Whether ``folder`` must be made; a leftover interrupted work folder is removed."""
    shutil.rmtree(folder.with_name(folder.name + ".incomplete"), ignore_errors=True)
    return not folder.is_dir()


def simulator_for(out: Path, root: Path) -> Path:
    from attnsvm.rec.data.datasets import load_dataset

    folder = out / "simulator"
    if not (folder / "simulator.json").is_file():
        source = {"dataset": "ml-100k", "root": str(root.resolve())}
        fit_simulator(load_dataset("ml-100k", root=root), FitSettings(), source).save(folder)
    return folder


def train_policies(args, simulator: Path) -> tuple[list[Path], list[Path]]:
    from attnsvm.rec.train.trainer import train

    rlt4rec, sasrec = [], []
    for seed in args.seeds:
        run = args.out / f"rlt4rec-random-s{seed}"
        if fresh(run):
            schedule = dataclasses.replace(
                OFFICIAL_TRAIN, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, seed=seed
            )
            config = episode_run_config(GroupSimulator.load(simulator), {}, schedule)
            train_rlt4rec(simulator, run, config, EpisodeSettings(source="random"))
        rlt4rec.append(run)
        run = args.out / f"sasrec-logs-s{seed}"
        if fresh(run):
            config = run_config("ml-100k", "sasrec+", "paper", seed, args.root)
            schedule = dataclasses.replace(
                config.train, epochs=args.sasrec_epochs, num_threads=None
            )
            train(dataclasses.replace(config, train=schedule), run, show_progress=False)
        sasrec.append(run)
    return rlt4rec, sasrec


def averaged(name: str, results: list[EpisodeResult]) -> EpisodeResult:
    """The seeds of one model as one policy: each user's ratings averaged over the seeds (the
    items kept are the first seed's; only the ratings enter the summary and the curves)."""
    ratings = np.mean([r.ratings for r in results], axis=0)
    return EpisodeResult(name, results[0].items, ratings, results[0].groups)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="benchmark folder")
    parser.add_argument("--root", type=Path, default=ROOT, help="folder of the raw datasets")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=OFFICIAL_TRAIN.epochs)
    parser.add_argument("--steps-per-epoch", type=int, default=OFFICIAL_TRAIN.steps_per_epoch)
    parser.add_argument("--sasrec-epochs", type=int, default=200)
    parser.add_argument("--users", type=int, default=200, help="test users per group")
    args = parser.parse_args(argv)
    simulator_dir = simulator_for(args.out, args.root)
    simulator = GroupSimulator.load(simulator_dir)
    rlt4rec, sasrec = train_policies(args, simulator_dir)
    users = simulator.users(args.users, seed=0)  # the runs' own test users: users_seed 0
    fixed = [
        GroupOraclePolicy(simulator, users),
        PopularityPolicy(simulator),
        RandomPolicy(simulator.num_items, seed=0),
    ]
    results = [run_episodes(policy, users) for policy in fixed]
    seeds: dict[str, list[float]] = {}
    for name, runs in (("RLT4Rec (random episodes)", rlt4rec), ("SASRec+ (logs)", sasrec)):
        per_seed = [run_episodes(run_policy(run, simulator), users) for run in runs]
        results.append(averaged(name, per_seed))
        seeds[name] = [r.mean for r in per_seed]
    write_summary(args.out, results, seeds, simulator.global_mean())
    plot_curves(results, args.out / "episodes.png")
    print((args.out / "summary.md").read_text())
    return 0


def write_summary(
    out: Path, results: list[EpisodeResult], seeds: dict[str, list[float]], global_mean: float
) -> None:
    """``results``: oracle, popularity, random, RLT4Rec, SASRec+ (in that order)."""
    oracle, rlt4rec = results[0], results[3]
    rows = []
    header = "| policy | mean rating@25 | ± s.e. | / oracle | per seed | RLT4Rec − it (t-test p) |"
    table = [header, "|---|---|---|---|---|---|"]
    for result in results:
        per_seed = seeds.get(result.name, [])
        test = None if result is rlt4rec else stats.ttest_rel(rlt4rec.per_user, result.per_user)
        row = {
            **result.summary(),
            "ratio_to_oracle": result.mean / oracle.mean,
            "per_seed": per_seed,
            "rlt4rec_minus_it": None if test is None else float(rlt4rec.mean - result.mean),
            "paired_t_pvalue": None if test is None else float(test.pvalue),
        }
        rows.append(row)
        versus = "—" if test is None else f"{rlt4rec.mean - result.mean:+.4f} (p {test.pvalue:.2g})"
        table.append(
            f"| {result.name} | {result.mean:.4f} | {result.standard_error:.4f} | "
            f"{row['ratio_to_oracle']:.3f} | {', '.join(f'{m:.4f}' for m in per_seed) or '—'} | "
            f"{versus} |"
        )
    others = [results[1], results[2], results[4]]
    met = rlt4rec.mean >= 0.9 * oracle.mean and all(rlt4rec.mean > r.mean for r in others)
    notes = [
        "",
        f"Simulator global mean (random's expectation): {global_mean:.4f}.",
        "Target (≥ 0.9 × oracle and above popularity, random, SASRec+): "
        f"{'met' if met else 'not met'}.",
        "On our ML-100K simulator: not comparable to the paper's Netflix/Goodreads figures.",
    ]
    (out / "summary.md").write_text("\n".join(table + notes) + "\n")
    (out / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
