"""CRR stage 2 against its own stage-1 SASRec+ on ML-100K (leave-one-out, full ranking): HR@10
of the test targets the users rated ≥ 4, and overall NDCG@10, over seeds, with paired tests.

    python benchmarks/crr_ml100k.py --out runs/crr-bench                        # the full run
    python benchmarks/crr_ml100k.py --out /tmp/c --stage1-epochs 2 --crr-epochs 1 --seeds 0

For each seed: stage 1 is SASRec+ in the zoo's ML-100K setting (``OUT/stage1-s{seed}``, up to
200 epochs, patience 10); stage 2 is ``attnsvm rl crr`` from it (``OUT/crr-{weight}-s{seed}``,
up to 30 epochs, patience 5, CRR's defaults: centred rating reward, γ 0.9, separate twin
critics, τ 0.005) for each advantage weight of ``--weights`` (exp, and binary on request).
Both are ranked on the same test users, so every comparison is paired per user:

- per seed: paired t-test and Wilcoxon (``attnsvm compare``'s tests) of stage 2 − stage 1 on
  NDCG@10 over all test users and on HR@10 over the users whose test item they rated ≥ 4;
- over the seeds: each user's metric averaged over the seeds, then the same paired tests.

``OUT/summary.md`` and ``summary.json`` hold the table. The issue's reading of success: stage 2
raises the liked-target HR@10 while overall NDCG@10 drops by at most 5 %. Finished runs are
reused, so an interrupted benchmark continues (an ``*.incomplete`` run is trained again).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from pathlib import Path

import numpy as np

from attnsvm.rec.eval import EvalResult
from attnsvm.rec.eval.significance import compare
from attnsvm.rec.rl.crr import CRRConfig
from attnsvm.rec.rl.crr_trainer import crr_run_config, train_crr
from attnsvm.rec.rl.rated import target_ratings
from attnsvm.rec.train.runs import open_run
from zoo import ROOT, run_config  # a sibling script: the zoo's SASRec+ setting

THRESHOLD = 4.0


def fresh(folder: Path) -> bool:
    """Whether ``folder`` must be made; a leftover interrupted work folder is removed."""
    shutil.rmtree(folder.with_name(folder.name + ".incomplete"), ignore_errors=True)
    return not folder.is_dir()


def stage1(args, seed: int) -> Path:
    from attnsvm.rec.train.trainer import train

    run = args.out / f"stage1-s{seed}"
    if fresh(run):
        config = run_config("ml-100k", "sasrec+", "paper", seed, args.root)
        schedule = dataclasses.replace(config.train, epochs=args.stage1_epochs, num_threads=None)
        train(dataclasses.replace(config, train=schedule), run, show_progress=False)
    return run


def stage2(args, first: Path, weight: str, seed: int) -> Path:
    run = args.out / f"crr-{weight}-s{seed}"
    if fresh(run):
        config = crr_run_config(first, {"epochs": args.crr_epochs})
        train_crr(config, CRRConfig(weight=weight), run)
    return run


def arrays(run: Path, liked: np.ndarray) -> dict[str, np.ndarray]:
    result = EvalResult.load(run / "test_eval.json")
    return {"NDCG@10": result.per_user["NDCG@10"], "liked HR@10": result.per_user["HR@10"][liked]}


def tests(two: dict[str, np.ndarray], one: dict[str, np.ndarray]) -> dict[str, dict]:
    return {name: compare({name: two[name]}, {name: one[name]}, name) for name in two}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="benchmark folder")
    parser.add_argument("--root", type=Path, default=ROOT, help="folder of the raw datasets")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--weights", nargs="+", default=["exp"], choices=["exp", "binary"])
    parser.add_argument("--stage1-epochs", type=int, default=200)
    parser.add_argument("--crr-epochs", type=int, default=30)
    args = parser.parse_args(argv)
    firsts = [stage1(args, seed) for seed in args.seeds]
    loaded = open_run(firsts[0])
    liked = target_ratings(loaded.run.config.data, loaded.task, "test") >= THRESHOLD
    report: dict = {"liked_users": int(liked.sum()), "users": int(liked.size), "weights": {}}
    lines = [
        f"ML-100K leave-one-out, full ranking; {liked.sum()} of {liked.size} test users rated "
        f"their test item ≥ {THRESHOLD:g}.",
        "",
        "| weight | seed | stage-1 NDCG@10 | stage-2 NDCG@10 | Δ (p) | stage-1 liked HR@10 | "
        "stage-2 liked HR@10 | Δ (p) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for weight in args.weights:
        ones, twos, seeds = [], [], []
        for seed, first in zip(args.seeds, firsts, strict=True):
            one, two = arrays(first, liked), arrays(stage2(args, first, weight, seed), liked)
            ones.append(one)
            twos.append(two)
            seeds.append({"seed": seed, **tests(two, one)})
            lines.append(row(weight, str(seed), seeds[-1]))
        mean_one = {k: np.mean([o[k] for o in ones], axis=0) for k in ones[0]}
        mean_two = {k: np.mean([t[k] for t in twos], axis=0) for k in twos[0]}
        pooled = tests(mean_two, mean_one)
        lines.append(row(weight, "mean", pooled))
        ndcg = pooled["NDCG@10"]
        drop = 1 - ndcg["mean_a"] / ndcg["mean_b"]
        report["weights"][weight] = {"per_seed": seeds, "seeds_averaged": pooled, "ndcg_drop": drop}
        met = pooled["liked HR@10"]["mean_difference"] > 0 and drop <= 0.05
        notes.append(
            f"{weight}: over the seeds overall NDCG@10 {'drops' if drop > 0 else 'rises'} by "
            f"{abs(drop):.1%}; success as the issue reads it: {'yes' if met else 'no'}."
        )
    (args.out / "summary.md").write_text("\n".join([*lines, "", *notes]) + "\n")
    (args.out / "summary.json").write_text(json.dumps(report, indent=2) + "\n")
    print((args.out / "summary.md").read_text())
    return 0


def row(weight: str, seed: str, result: dict[str, dict]) -> str:
    cells = [weight, seed]
    for name in ("NDCG@10", "liked HR@10"):
        test = result[name]
        cells += [
            f"{test['mean_b']:.4f}",
            f"{test['mean_a']:.4f}",
            f"{test['mean_difference']:+.4f} ({test['t_pvalue']:.2g})",
        ]
    return "| " + " | ".join(cells) + " |"


if __name__ == "__main__":
    sys.exit(main())
