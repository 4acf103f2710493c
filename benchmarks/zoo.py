"""The model zoo compared fairly: one data version, split, evaluator and budget for every model.

Protocol: leave-one-out, full ranking over the catalogue, seen items excluded (the validation
item too, at test time), all users, HR@10 and NDCG@10 as mean ± std over seeds, training
seconds. Every neural model runs twice — under its paper's own loss ("paper") and under full
softmax cross-entropy ("ce") — beside SASRec+ and the non-neural kNN baselines, and every row is
tested against SASRec+ of the same seed with ``attnsvm compare``'s paired tests.

Runs are independent and resumable: each (dataset, model, setting, seed) trains into its own run
directory under ``--out``; a finished run is skipped, an interrupted one is resumed::

    python benchmarks/zoo.py --datasets beauty --models bsarec --settings paper --seeds 0
    python benchmarks/zoo.py --table            # mean ± std table of everything finished

Runs are CPU jobs of tens of minutes to hours each; run them one at a time, in pieces.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnsvm.rec.config import DataConfig, EvalConfig, ModelChoice, RunConfig, TrainConfig
from attnsvm.rec.models import LossConfig

ROOT = Path(__file__).resolve().parents[1].parent / "shared" / "data"
CE = LossConfig(name="ce")
BCE1 = LossConfig(name="bce", num_negatives=1)


@dataclass(frozen=True)
class Setting:
    """One model under one loss: registry name, config overrides, loss, optimiser settings."""

    model: str
    loss: LossConfig
    overrides: dict[str, Any] = field(default_factory=dict)
    lr: float = 1e-3
    batch_size: int = 256
    published: dict[str, tuple[float, float]] = field(default_factory=dict)  # dataset → HR, NDCG


# Paper settings (models.md §2); "published" holds the full-ranking LOO numbers on the same
# data version only (S3-Beauty, SASRec-version ML-1M), never sampled-metric numbers.
PAPER: dict[str, Setting] = {
    "sasrec+": Setting("sasrec+", CE, published={"ml-1m": (0.3152, 0.1821)}),
    "bsarec": Setting(
        "bsarec", CE, lr=5e-4, batch_size=256, published={"beauty": (0.1008, 0.0611)}
    ),
}

DATASETS = {"beauty": 50, "ml-1m": 200}  # name → max_len (the papers' windows)


def run_config(dataset: str, name: str, setting_name: str, seed: int) -> RunConfig:
    setting = PAPER[name]
    loss = setting.loss if setting_name == "paper" else CE
    return RunConfig(
        model=ModelChoice(setting.model, dict(setting.overrides)),
        data=DataConfig(dataset, root=str(ROOT), max_len=DATASETS[dataset]),
        loss=loss,
        train=TrainConfig(
            epochs=200, batch_size=setting.batch_size, lr=setting.lr, betas=(0.9, 0.999),
            grad_clip=None, patience=10, seed=seed, num_threads=1,
        ),
        eval=EvalConfig(ks=(5, 10, 20)),
    )


def run_dir(out: Path, dataset: str, name: str, setting_name: str, seed: int) -> Path:
    return out / dataset / f"{name}-{setting_name}-seed{seed}"


def run_one(out: Path, dataset: str, name: str, setting_name: str, seed: int) -> None:
    from attnsvm.rec.train.checkpoint import RunDirectory
    from attnsvm.rec.train.trainer import train

    path = run_dir(out, dataset, name, setting_name, seed)
    if path.is_dir():
        print(f"done already: {path}")
        return
    resume = (RunDirectory(path).partial / "resume.pt").exists()
    config = run_config(dataset, name, setting_name, seed)
    start = time.perf_counter()
    result = train(config, path, resume=resume, show_progress=False)
    print(
        f"{dataset} {name} {setting_name} seed {seed}: HR@10 {result.test['HR@10']:.4f} "
        f"NDCG@10 {result.test['NDCG@10']:.4f} ({result.epochs} epochs, best "
        f"{result.best_epoch}, {result.train_seconds:.0f}s training, "
        f"{time.perf_counter() - start:.0f}s wall)", flush=True,
    )


def finished(out: Path) -> dict[tuple[str, str, str], list[Path]]:
    runs: dict[tuple[str, str, str], list[Path]] = {}
    for metrics in sorted(out.glob("*/*-seed*/metrics.json")):
        dataset = metrics.parent.parent.name
        name, setting_name, _ = metrics.parent.name.rsplit("-", 2)
        runs.setdefault((dataset, name, setting_name), []).append(metrics.parent)
    return runs


def table(out: Path) -> str:
    from attnsvm.rec.eval import compare_results
    from attnsvm.rec.eval.ranking import EvalResult

    runs = finished(out)
    lines = [
        "| dataset | model | loss | seeds | HR@10 | NDCG@10 | train s | published HR / NDCG "
        "| Δ NDCG@10 vs SASRec+ (p, paired t) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (dataset, name, setting_name), paths in sorted(runs.items()):
        metrics = [json.loads((p / "metrics.json").read_text()) for p in paths]
        hr = np.array([m["test"]["HR@10"] for m in metrics])
        ndcg = np.array([m["test"]["NDCG@10"] for m in metrics])
        seconds = np.array([m["train_seconds"] for m in metrics])
        published = PAPER[name].published.get(dataset) if name in PAPER else None
        reference = runs.get((dataset, "sasrec+", "paper"), [])
        versus = "—"
        if reference and name != "sasrec+":
            pairs = {p.name.rsplit("-", 1)[1]: p for p in reference}
            own = paths[0]
            other = pairs.get(own.name.rsplit("-", 1)[1])
            if other is not None:
                test = compare_results(
                    EvalResult.load(own / "test_eval.json"),
                    EvalResult.load(other / "test_eval.json"), "NDCG@10",
                )
                versus = f"{test['mean_difference']:+.4f} (p={test['t_pvalue']:.2g})"
        lines.append(
            f"| {dataset} | {name} | {setting_name} | {len(paths)} | {_pm(hr)} | {_pm(ndcg)} "
            f"| {seconds.mean():.0f} | "
            f"{'—' if published is None else f'{published[0]:.4f} / {published[1]:.4f}'} "
            f"| {versus} |"
        )
    return "\n".join(lines)


def _pm(values: np.ndarray) -> str:
    if values.size == 1:
        return f"{values[0]:.4f}"
    return f"{values.mean():.4f} ± {values.std(ddof=1):.4f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--models", nargs="+", default=list(PAPER), choices=list(PAPER))
    parser.add_argument("--settings", nargs="+", default=["paper", "ce"], choices=["paper", "ce"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path("/tmp/zoo"))
    parser.add_argument("--table", action="store_true", help="print the table of finished runs")
    args = parser.parse_args(argv)
    if args.table:
        print(table(args.out))
        return 0
    for dataset in args.datasets:
        for name in args.models:
            for setting_name in args.settings:
                if setting_name == "ce" and PAPER[name].loss == CE:
                    continue  # the paper's loss is full CE already: one run covers both
                for seed in args.seeds:
                    run_one(args.out, dataset, name, setting_name, seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
