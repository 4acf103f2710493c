"""BiCAT on S3-Beauty (``beauty`` = the repository's ``amazon-beauty``): the whole recipe
(reverse pre-training → generation → self-distillation fine-tuning) per seed, in ``no_leak``
and ``faithful`` generation, beside SASRec (BiCAT's network and BCE, one plain run).

Protocol: leave-one-out; the official sampled protocol (each test target among 100 uniform
negatives never seen by the user, labelled ``(sampled: 100 uniform)``) and full ranking; the
model of the last epoch (epoch 200, no early stopping, as the official log). Target (faithful,
the official ``fine_tune_beauty_20.log``, epoch 200 "testall"): NDCG@10 0.4326 and HR@10 0.6455,
within ±5 %.

    python benchmarks/bicat.py --out /tmp/bicat                      # 3 seeds, both modes
    python benchmarks/bicat.py --out /tmp/bicat-tiny --users 300 --epochs 1 --seeds 0
    python benchmarks/bicat.py --out /tmp/bicat --table

Every recipe and run is resumable: run the same command again and finished stages are kept.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from attnsvm._atomic import write_json
from attnsvm.rec.config import RunConfig
from attnsvm.rec.train.checkpoint import RESUME, RunDirectory
from attnsvm.rec.train.recipe import RECIPE_FILE, resolve_recipe, resume_recipe
from staged_common import ROOT, dataset, mean_std, read_run, table

PUBLISHED = {"HR@10": 0.6455, "NDCG@10": 0.4326}
SAMPLED = " (sampled: 100 uniform)"


def recipe_run(out: Path, mode: str, seed: int, data, overrides: list[str]) -> None:
    """One recipe; a finished pre-training of the same seed in another mode is reused (the two
    modes differ from the generation on: the pre-training runs are the same run)."""
    folder = out / f"{mode}-seed{seed}"
    if not (folder / RECIPE_FILE).exists():
        own = [f"train.seed={seed}", f"generate:mode={mode}", *overrides]
        plan = resolve_recipe("bicat", folder, *data, own)
        folder.mkdir(parents=True)
        write_json(folder / RECIPE_FILE, plan)
        for other in out.glob(f"*-seed{seed}/1-pretrain/metrics.json"):
            # the saved config has the loss resolved; the plan names it by the preset
            shared = json.loads((other.parent / "config.json").read_text())
            shared.pop("loss", None)
            if shared == {k: v for k, v in plan["stages"][0]["settings"].items() if k != "loss"}:
                shutil.copytree(other.parent, folder / "1-pretrain")
                break
    resume_recipe(folder, show_progress=False)


def sasrec_run(out: Path, seed: int, data, overrides: list[str]) -> None:
    """BiCAT's network trained plainly: its fine-tuning stage's settings without the parents,
    the KL term and the clip_k target mask."""
    from attnsvm.rec.train.trainer import train

    folder = out / f"sasrec-seed{seed}"
    run = RunDirectory(folder)
    if run.final.is_dir():
        return
    plan = resolve_recipe("bicat", out / "plan", *data, [f"train.seed={seed}", *overrides])
    settings = plan["stages"][-1]["settings"]
    settings["model"] = {"name": "bicat"}
    settings["train"]["init_from"] = None
    settings["data"]["synthetic_prefix"] = None
    settings["loss"]["last_targets"] = None
    resume = (run.partial / RESUME).exists()
    config = RunConfig() if resume else RunConfig.from_dict(settings)
    train(config, folder, resume=resume, show_progress=False)


def report(out: Path) -> str:
    rows = []
    for name in ("faithful", "no_leak", "sasrec"):
        runs = sorted(out.glob(f"{name}-seed*/3-finetune")) or sorted(out.glob(f"{name}-seed*"))
        runs = [r for r in runs if (r / "metrics.json").exists()]
        if not runs:
            continue
        metrics = [read_run(r) for r in runs]
        cells = [name, str(len(runs))]
        for key in ("HR@10", "NDCG@10"):
            values = [m["test_sampled"][key + SAMPLED] for m in metrics]
            band = abs(sum(values) / len(values) / PUBLISHED[key] - 1) <= 0.05
            verdict = f" ({'within' if band else 'outside'} ±5 %)" if name == "faithful" else ""
            cells.append(mean_std(values) + verdict)
        cells += [mean_std([m["test"][k] for m in metrics]) for k in ("HR@10", "NDCG@10")]
        stages = ["1-pretrain", "3-finetune"] if name != "sasrec" else []
        seconds = [read_run(r.parent / s)["seconds_per_epoch"] for r in runs for s in stages]
        cells.append(f"{sum(seconds) / len(seconds):.1f}" if seconds else "—")
        cells.append(f"{metrics[0]['seconds_per_epoch']:.1f}")
        rows.append(cells)
    header = ["run", "seeds", "HR@10 sampled", "NDCG@10 sampled", "HR@10 full", "NDCG@10 full"]
    header += ["pre-train s/epoch", "fine-tune (or run) s/epoch"]
    published = f"published (faithful): HR@10 {PUBLISHED['HR@10']}, NDCG@10 {PUBLISHED['NDCG@10']}"
    return table(header, rows) + "\n\n" + published


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", default=["no_leak", "faithful"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, help="every stage's epochs (default: the recipe's)")
    parser.add_argument("--users", type=int, help="the first N users only (a check run)")
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--out", type=Path, default=Path("/tmp/bicat"))
    parser.add_argument("--table", action="store_true", help="print the table of finished runs")
    args = parser.parse_args(argv)
    if not args.table:
        data = dataset("beauty", args.root, args.out, args.users)
        overrides = [f"train.epochs={args.epochs}"] if args.epochs else []
        for seed in args.seeds:
            sasrec_run(args.out, seed, data, overrides)
            for mode in args.modes:
                recipe_run(args.out, mode, seed, data, overrides)
    print(report(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
