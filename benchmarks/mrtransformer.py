"""MrTransformer: pre-training (the preference swap) → fine-tuning, against fine-tuning alone for
the same number of steps; and the overlap of the preference tokens' attention with and without
the coverage loss.

Datasets: the BERT4Rec version of Beauty (``beauty-bert4rec``) and ML-100K reduced to the items
rated at least 5 times (``ml-100k-items5``: 943 / 1,349 / 99,287, the counts of the official
file). Arms, per seed, every run keeping its last epoch (a fixed budget):

- ``pretrained``: the ``mrtransformer`` recipe, ``--pretrain`` epochs on the swap loss alone,
  then ``--finetune`` epochs of CE + coverage;
- ``finetuned``: CE + coverage from scratch for ``--pretrain + --finetune`` epochs (the same
  number of optimiser steps: both stages see every training prefix once an epoch, in batches of
  512);
- ``no-coverage``: as ``finetuned`` without the coverage term.

Reported: full ranking and the official sampled protocol (100 negatives drawn by popularity,
labelled), and the mean over test users of ``Σ_{k<k'} Σ_i min(a_k,i, a_k',i)``, how much the
preference tokens attend the same items (``attention_overlap``). The official budgets are 1.5M
pre-training and 1M fine-tuning steps of batch 512 after 6,000 warm-up steps; the defaults
here are a CPU-sized fraction (1,000 warm-up steps).

    python benchmarks/mrtransformer.py --out /tmp/mrtransformer
    python benchmarks/mrtransformer.py --out /tmp/mr-tiny --users 200 --pretrain 1 --finetune 1 \
        --seeds 0 --datasets ml-100k-items5
    python benchmarks/mrtransformer.py --out /tmp/mrtransformer --table
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from attnsvm.rec.config import RunConfig
from attnsvm.rec.train.checkpoint import RESUME, RunDirectory
from attnsvm.rec.train.recipe import RECIPE_FILE, resolve_recipe, resume_recipe, run_recipe
from staged_common import ROOT, dataset, mean_std, read_run, table

DATASETS = ("beauty-bert4rec", "ml-100k-items5")
ARMS = ("pretrained", "finetuned", "no-coverage")
SAMPLED = " (sampled: 100 popularity)"


def _overrides(seed: int, pretrain: int, finetune: int, warmup: int) -> list[str]:
    return [
        f"train.seed={seed}",
        f"train.warmup_steps={warmup}",
        f"pretrain:train.epochs={pretrain}",
        f"finetune:train.epochs={finetune}",
        "finetune:train.keep=last",
    ]


def run_arm(out: Path, name: str, arm: str, seed: int, data, epochs: tuple[int, int, int]):
    """The arm's finished run directory (its last stage for ``pretrained``); ``epochs``:
    pre-training, fine-tuning and warm-up steps."""
    from attnsvm.rec.train.trainer import train

    folder = out / name / f"{arm}-seed{seed}"
    pretrain, finetune, _ = epochs
    overrides = _overrides(seed, *epochs)
    if arm == "pretrained":
        if (folder / RECIPE_FILE).exists():
            return resume_recipe(folder, show_progress=False).last_run
        return run_recipe("mrtransformer", folder, *data, overrides, False).last_run
    run = RunDirectory(folder)
    if not run.final.is_dir():
        plan = resolve_recipe("mrtransformer", folder / "plan", *data, overrides)
        settings = plan["stages"][-1]["settings"]
        settings["train"].update(init_from=None, epochs=pretrain + finetune)
        if arm == "no-coverage":
            settings["model"]["coverage_weight"] = 0.0
        resume = (run.partial / RESUME).exists()
        config = RunConfig() if resume else RunConfig.from_dict(settings)
        train(config, folder, resume=resume, show_progress=False)
    return folder


def overlap(run: Path) -> float:
    """Mean attention overlap of the preference tokens over the run's test users."""
    from attnsvm.rec.models.mrtransformer import attention_overlap
    from attnsvm.rec.train.runs import load_run
    from attnsvm.rec.train.scoring import load_split

    loaded = load_run(run)
    history = load_split(loaded.config.data).test.history
    windows = torch.from_numpy(history.padded(loaded.model.config.max_len))
    with torch.inference_mode():
        values = [
            attention_overlap(loaded.model.preference_attention(windows[i : i + 512]))
            for i in range(0, len(windows), 512)
        ]
    return float(torch.cat(values).mean())


def measure(run: Path) -> dict:
    """Full-ranking and sampled test metrics, overlap and seconds, cached in the run folder."""
    from attnsvm.rec.train.runs import sampled_evaluate_run

    cached = run / "benchmark.json"
    if cached.exists():
        return json.loads(cached.read_text())
    metrics = read_run(run)
    sampled = sampled_evaluate_run(run, 100, "popularity").metrics
    result = {
        "full": metrics["test"],
        "sampled": sampled,
        "overlap": overlap(run),
        "seconds_per_epoch": metrics["seconds_per_epoch"],
    }
    cached.write_text(json.dumps(result))
    return result


def report(out: Path) -> str:
    rows = []
    for name in DATASETS:
        for arm in ARMS:
            runs = sorted((out / name).glob(f"{arm}-seed*"))
            runs = [r / "2-finetune" if arm == "pretrained" else r for r in runs]
            runs = [r for r in runs if (r / "metrics.json").exists()]
            if not runs:
                continue
            results = [measure(r) for r in runs]
            cells = [name, arm, str(len(runs))]
            cells += [mean_std([r["full"][k] for r in results]) for k in ("HR@10", "NDCG@10")]
            cells += [mean_std([r["sampled"]["NDCG@10" + SAMPLED] for r in results])]
            cells += [mean_std([r["overlap"] for r in results])]
            cells.append(f"{np.mean([r['seconds_per_epoch'] for r in results]):.1f}")
            rows.append(cells)
    header = ["data", "arm", "seeds", "HR@10 full", "NDCG@10 full", "NDCG@10 sampled"]
    header += ["attention overlap", "s/epoch (last stage)"]
    return table(header, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--pretrain", type=int, default=10, help="pre-training epochs")
    parser.add_argument("--finetune", type=int, default=20, help="fine-tuning epochs")
    parser.add_argument(
        "--warmup", type=int, default=1000, help="warm-up steps of each stage (official: 6,000)"
    )
    parser.add_argument("--users", type=int, help="the first N users only (a check run)")
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--out", type=Path, default=Path("/tmp/mrtransformer"))
    parser.add_argument("--table", action="store_true", help="print the table of finished runs")
    args = parser.parse_args(argv)
    if not args.table:
        for name in args.datasets:
            data = dataset(name, args.root, args.out, args.users)
            for seed in args.seeds:
                for arm in ARMS:
                    epochs = (args.pretrain, args.finetune, args.warmup)
                    run_arm(args.out, name, arm, seed, data, epochs)
    print(report(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
