"""Non-Stationary transformer against the same encoder without stationarisation, pointwise.

Protocol: global temporal split (cuts at the 0.8 and 0.9 time quantiles, unseen targets and
users without history dropped), label = rating ≥ 4, each validation / test event scored from
the row's history before the stage's cut with the candidate appended; LogLoss, F1 (p ≥ 0.5)
and AUC (``attnsvm.rec.train.pointwise``). Both variants: d = 64, 2 blocks, 1 head, FFN 64,
dropout 0.2, window ``--max-len``, batch 64, AdamW lr 1e-3, BCE on the like-labels alone, up
to ``--epochs`` epochs with ``--patience`` (5) epochs of patience on validation LogLoss;
``ns`` stationarises (prefix statistics under the all-position objective), ``plain`` does
not; ``ns-no-denormalise`` and ``ns-no-detach`` ablate two switches of our reading. The
paper's claim (abstract only, against "other attention-related models"): about −8 % LogLoss,
up to +2 % F1. Results go to ``--out`` (a finished run is not repeated); ``--table`` prints them.

    python benchmarks/nonstationary.py --datasets ml-100k ml-latest-small --seeds 0 1 2
    python benchmarks/nonstationary.py --table
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from attnsvm._atomic import write_json
from attnsvm.rec.config import DataConfig, EvalConfig, ModelChoice, RunConfig, TrainConfig
from attnsvm.rec.train.pointwise import train_pointwise

ROOT = Path(__file__).resolve().parents[2] / "shared" / "data"
SIZE = {"hidden_size": 64, "ffn_size": 64, "num_blocks": 2, "num_heads": 1}
VARIANTS = {
    "ns": {"stationarise": True},
    "plain": {"stationarise": False},
    # ablations of our reading: no de-normalisation; statistics with gradients
    "ns-no-denormalise": {"stationarise": True, "denormalise": False},
    "ns-no-detach": {"stationarise": True, "detach_statistics": False},
}
DATASETS = ("ml-100k", "ml-latest-small")
METRICS = ("LogLoss", "F1", "AUC")
CLAIM = {"LogLoss": "≈ −8 %", "F1": "up to +2 %", "AUC": "—"}


def run_config(dataset: str, variant: str, seed: int, args: argparse.Namespace) -> RunConfig:
    overrides = {**SIZE, **VARIANTS[variant], "objective": args.objective}
    return RunConfig(
        model=ModelChoice("nstransformer", overrides),
        data=DataConfig(dataset, root=str(args.root), split="temporal", max_len=args.max_len),
        train=TrainConfig(
            epochs=args.epochs,
            batch_size=64,
            lr=1e-3,
            patience=args.patience,
            seed=seed,
            num_threads=1,
        ),
        eval=EvalConfig(batch_size=256),
    )


def run_dir(out: Path, dataset: str, variant: str, seed: int) -> Path:
    return out / dataset / f"{variant}-seed{seed}"


def load(out: Path, dataset: str, variant: str) -> list[dict]:
    paths = sorted((out / dataset).glob(f"{variant}-seed*/pointwise.json"))
    return [json.loads(path.read_text()) for path in paths]


def table(out: Path, datasets: list[str]) -> str:
    """One row per dataset, variant and metric against ``plain``: each side's mean ± sd over the
    seeds both finished, the relative difference of the means, on how many of those seeds the
    variant was better, and the paper's claim; then each variant's cost."""
    lines = [
        "| dataset | variant | metric | seeds | variant | plain | vs plain | better | paper |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for dataset in datasets:
        runs = {variant: load(out, dataset, variant) for variant in VARIANTS}
        by_seed = {
            variant: {r["seed"]: r["result"]["test"] for r in rows}
            for variant, rows in runs.items()
        }
        for variant in VARIANTS:
            shared = sorted(set(by_seed[variant]) & set(by_seed["plain"]))
            if variant == "plain" or not shared:
                continue
            for metric in METRICS:
                ours = np.array([by_seed[variant][s][metric] for s in shared])
                plain = np.array([by_seed["plain"][s][metric] for s in shared])
                better = ours < plain if metric == "LogLoss" else ours > plain
                relative = 100 * (ours.mean() / plain.mean() - 1)
                cells = [
                    f"{v.mean():.4f} ± {v.std(ddof=1) if v.size > 1 else 0:.4f}"
                    for v in (ours, plain)
                ]
                lines.append(
                    f"| {dataset} | {variant} | {metric} | {len(shared)} | {cells[0]} | "
                    f"{cells[1]} | {relative:+.1f} % | {int(better.sum())}/{len(shared)} | "
                    f"{CLAIM[metric]} |"
                )
        cost = []
        for variant, rows in runs.items():
            if rows:
                seconds = [
                    np.mean([e["train_seconds"] for e in r["result"]["history"]]) for r in rows
                ]
                epochs = [r["result"]["best_epoch"] for r in rows]
                cost.append(f"{variant} {np.mean(seconds):.1f} s/epoch, best epochs {epochs}")
        if runs["plain"]:
            prior = runs["plain"][0]["result"]["test"]["prior_LogLoss"]
            lines.append(f"\n{dataset}: {'; '.join(cost)}; test prior LogLoss {prior:.4f}\n")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--variants", nargs="+", default=["ns", "plain"], choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--patience", type=int, default=5)
    parser.add_argument("--max-len", type=int, default=200)
    parser.add_argument("--objective", choices=("causal", "last"), default="causal")
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--out", type=Path, default=Path("/tmp/nonstationary"))
    parser.add_argument("--table", action="store_true", help="print the finished runs' table")
    args = parser.parse_args(argv)
    if args.table:
        print(table(args.out, args.datasets))
        return 0
    for dataset in args.datasets:
        for seed in args.seeds:
            for variant in args.variants:
                folder = run_dir(args.out, dataset, variant, seed)
                if (folder / "pointwise.json").is_file():
                    continue  # resumable: a finished run is not repeated
                start = time.perf_counter()
                result = train_pointwise(run_config(dataset, variant, seed, args))
                record = {"seed": seed, "variant": variant, "result": result.to_json()}
                folder.mkdir(parents=True, exist_ok=True)
                write_json(folder / "pointwise.json", record)
                test = result.test
                print(
                    f"{dataset} {variant} seed {seed}: LogLoss {test['LogLoss']:.4f} F1 "
                    f"{test['F1']:.4f} AUC {test['AUC']:.4f} (best epoch {result.best_epoch}, "
                    f"{time.perf_counter() - start:.0f} s)",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
