"""ADT with its official λ against the same model at λ = 0 (the SASRec backbone), paired.

Datasets: ML-1M (preset ``adt-ml-1m``) and the BERT4Rec version of Beauty (``beauty-bert4rec``,
preset ``adt-beauty``), each with its official λ1 (reconstruction), λ2 (independence) and
``‖E‖`` weight; the λ = 0 arm is the same preset with both λ set to 0 (the ``‖E‖`` term kept,
so the arms differ in the disentangling terms only). Training as the official templates: Adam
lr 1e-3, β = (0.9, 0.98), batch 256, gradient clipping at 5, one length group by default (the
terms' window means are then exactly the official ones; ``--length-groups 4`` trains Beauty's
short rows about 4× faster and weights the groups' means by their target shares instead).
The official runs train 1,000 epochs and select the epoch by validation AUC every 50; here
early stopping on validation NDCG@10 (patience 20).

Protocols: the official one (each test target among 100 negatives drawn by popularity, never
seen by the user, labelled ``(sampled: 100 popularity)``; popularity counted on the training
items, where the official sampler counts train + valid + test) and full ranking. Each pair of
runs (same seed) is compared per user with ``attnsvm compare``'s paired t-test and Wilcoxon.

    python benchmarks/adt.py --out /tmp/adt                             # both datasets, 3 seeds
    python benchmarks/adt.py --out /tmp/adt-tiny --datasets ml-1m --users 200 --epochs 1 --seeds 0
    python benchmarks/adt.py --out /tmp/adt --table
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attnsvm.rec.config import DataConfig, EvalConfig, ModelChoice, RunConfig, TrainConfig
from attnsvm.rec.eval import EvalResult, compare_results
from attnsvm.rec.train.checkpoint import RESUME, RunDirectory
from staged_common import ROOT, dataset, mean_std, read_run, table

PRESETS = {"ml-1m": "adt-ml-1m", "beauty-bert4rec": "adt-beauty"}
ARMS = {"official": {}, "lambda0": {"reconstruction_weights": "0", "independence_weights": "0"}}
SAMPLED = " (sampled: 100 popularity)"


def run_config(name: str, arm: str, seed: int, data, epochs: int, groups: int) -> RunConfig:
    return RunConfig(
        model=ModelChoice(PRESETS[name], dict(ARMS[arm])),
        data=DataConfig(data[0], root=data[1]),
        train=TrainConfig(
            epochs=epochs,
            batch_size=256,
            lr=1e-3,
            betas=(0.9, 0.98),
            grad_clip=5.0,
            patience=20,
            seed=seed,
            length_groups=groups,
        ),
        eval=EvalConfig(ks=(5, 10, 20), sampled_negatives=100, sampled_sampler="popularity"),
    )


def train_arm(out: Path, name: str, arm: str, seed: int, data, epochs: int, groups: int) -> None:
    from attnsvm.rec.train.trainer import train

    run = RunDirectory(out / name / f"{arm}-seed{seed}")
    if run.final.is_dir():
        return
    resume = (run.partial / RESUME).exists()
    config = RunConfig() if resume else run_config(name, arm, seed, data, epochs, groups)
    train(config, run.final, resume=resume, show_progress=False)


def paired(official: Path, backbone: Path) -> tuple[str, str]:
    """Δ NDCG@10 (official − λ0) with the paired t-test's p, full ranking and sampled."""
    from attnsvm.rec.train.runs import sampled_evaluate_run

    out = []
    full = [EvalResult.load(p / "test_eval.json") for p in (official, backbone)]
    sampled = [sampled_evaluate_run(p, 100, "popularity") for p in (official, backbone)]
    for results, metric in ((full, "NDCG@10"), (sampled, "NDCG@10" + SAMPLED)):
        test = compare_results(*results, metric)
        out.append(f"{test['mean_difference']:+.4f} (p={test['t_pvalue']:.2g})")
    return out[0], out[1]


def report(out: Path) -> str:
    rows = []
    for name in PRESETS:
        for arm in ARMS:
            runs = sorted(r for r in (out / name).glob(f"{arm}-seed*") if r.is_dir())
            runs = [r for r in runs if (r / "metrics.json").exists()]
            if not runs:
                continue
            metrics = [read_run(r) for r in runs]
            cells = [name, arm, str(len(runs))]
            cells += [
                mean_std([m["test_sampled"][k + SAMPLED] for m in metrics])
                for k in ("HR@10", "NDCG@10")
            ]
            cells += [mean_std([m["test"][k] for m in metrics]) for k in ("HR@10", "NDCG@10")]
            cells.append(f"{sum(m['seconds_per_epoch'] for m in metrics) / len(metrics):.1f}")
            pairs = [(r, out / name / r.name.replace(arm, "lambda0")) for r in runs]
            pairs = [
                (a, b) for a, b in pairs if arm == "official" and (b / "metrics.json").exists()
            ]
            tests = [(a.name.rsplit("-", 1)[1], *paired(a, b)) for a, b in pairs]
            full = "; ".join(f"{seed}: {d}" for seed, d, _ in tests) or "—"
            sampled = "; ".join(f"{seed}: {d}" for seed, _, d in tests) or "—"
            rows.append([*cells, full, sampled])
    header = ["data", "arm", "seeds", "HR@10 sampled", "NDCG@10 sampled", "HR@10 full"]
    header += ["NDCG@10 full", "s/epoch", "Δ NDCG@10 full vs λ0", "Δ NDCG@10 sampled vs λ0"]
    return table(header, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--length-groups", type=int, default=1)
    parser.add_argument("--users", type=int, help="the first N users only (a check run)")
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--out", type=Path, default=Path("/tmp/adt"))
    parser.add_argument("--table", action="store_true", help="print the table of finished runs")
    args = parser.parse_args(argv)
    if not args.table:
        for name in args.datasets:
            data = dataset(name, args.root, args.out, args.users)
            for seed in args.seeds:
                for arm in ARMS:
                    train_arm(args.out, name, arm, seed, data, args.epochs, args.length_groups)
    print(report(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
