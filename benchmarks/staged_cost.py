"""What each stage of ADT, BiCAT and MrTransformer costs: training seconds per epoch beside
SASRec+ on the same data, all measured in one process one after another.

Per dataset: SASRec+ (K&V settings, full CE, batch 128); ADT with its official settings and λ
(the dataset's preset; batch 256, one length group); BiCAT's reverse pre-training (the forward
term is a second forward pass), its generation (seconds, not epochs) and its fine-tuning
(prefixed rows, the KL's second pass); MrTransformer's pre-training (the swap: a partner
forward; the nearest-neighbour search at the start is timed apart) and fine-tuning (coverage).
Every stage runs ``--steps`` optimiser steps per epoch for ``--epochs`` epochs; the table gives
seconds per step and the seconds a whole epoch would take (steps per epoch × seconds per step).

    python benchmarks/staged_cost.py --datasets beauty beauty-bert4rec --out /tmp/staged-cost
    python benchmarks/staged_cost.py --datasets beauty --users 300 --steps 2 --epochs 1 --out /tmp/c
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import conditions
from attnsvm.rec.config import RunConfig, apply_overrides
from attnsvm.rec.train.recipe import resolve_recipe
from staged_common import ROOT, dataset, read_run, table

BASE = ["train.keep=last", "train.grad_clip=none", "eval.valid_users=1000"]
ADT = {"beauty": "adt-beauty", "beauty-bert4rec": "adt-beauty", "ml-1m": "adt-ml-1m"}


def stage_configs(name: str, data, work: Path) -> dict[str, list | dict]:
    """Stage name → a run config's settings (or, for a recipe stage, the resolved plan entry)."""
    bicat = resolve_recipe("bicat", work / "bicat", *data, [])["stages"]
    mr = resolve_recipe("mrtransformer", work / "mr", *data, [])["stages"]
    source = [f"data.dataset={data[0]}"] + ([f"data.root={data[1]}"] if data[1] else [])
    sasrec = ["model=sasrec+", "train.batch_size=128", "train.grad_clip=none", *source]
    adt = [f"model={ADT.get(name, 'adt-beauty')}", "train.batch_size=256", "train.grad_clip=5"]
    return {
        "sasrec+": sasrec,
        "adt": [*adt, "train.length_groups=1", *source],
        "bicat pre-train": bicat[0]["settings"],
        "bicat fine-tune": bicat[2]["settings"],
        "mrtransformer pre-train": mr[0]["settings"],
        "mrtransformer fine-tune": mr[1]["settings"],
    }


def measure(name: str, data, out: Path, epochs: int, steps: int) -> list[list[str]]:
    from attnsvm.rec.train.generate import write_generation
    from attnsvm.rec.train.runs import load_run
    from attnsvm.rec.train.scoring import load_split
    from attnsvm.rec.train.trainer import train

    rows, runs = [], {}
    budget = [f"train.epochs={epochs}", f"train.steps_per_epoch={steps}", *BASE]
    for stage, settings in stage_configs(name, data, out / name).items():
        folder = out / name / stage.replace(" ", "-")
        if isinstance(settings, list):
            config = apply_overrides(RunConfig(), [*settings, *budget])
        else:
            config = apply_overrides(RunConfig.from_dict(settings), budget)
        if stage == "bicat fine-tune":  # its parents: the pre-training run and a generation
            start = time.perf_counter()
            loaded = load_run(runs["bicat pre-train"])
            generated = write_generation(
                loaded.model, load_split(loaded.config.data), out / name / "bicat-generate"
            )
            rows.append(
                [name, "bicat generation", "—", "—", f"{time.perf_counter() - start:.1f} s"]
            )
            config = apply_overrides(
                config,
                [
                    f"train.init_from={runs['bicat pre-train']}",
                    f"data.synthetic_prefix={generated}",
                ],
            )
        if stage == "mrtransformer fine-tune":
            config = apply_overrides(config, [f"train.init_from={runs['mrtransformer pre-train']}"])
        start = time.perf_counter()
        result = train(config, folder, show_progress=False)
        runs[stage] = result.run_dir
        metrics = read_run(result.run_dir)
        examples = _examples(config)
        per_epoch = metrics["seconds_per_step"] * math.ceil(examples / config.train.batch_size)
        wall = time.perf_counter() - start - result.train_seconds
        rows.append(
            [name, stage, f"{metrics['seconds_per_step']:.3f}", f"{per_epoch:.0f}", f"{wall:.0f} s"]
        )
    return rows


def _examples(config: RunConfig) -> int:
    """Training examples an epoch of this run goes through."""
    from attnsvm.rec.data.batches import make_examples
    from attnsvm.rec.data.transforms import training_rows
    from attnsvm.rec.models.registry import MODELS, resolve
    from attnsvm.rec.train.scoring import load_split

    split = load_split(config.data)
    model_name, model_config, _ = resolve(config.model.name, **config.model.overrides)
    objective = getattr(model_config, "objective", MODELS[model_name].model_class.objective)
    return len(make_examples(training_rows(split, config.data), objective))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["beauty", "beauty-bert4rec"])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=50, help="optimiser steps per epoch")
    parser.add_argument("--users", type=int, help="the first N users only (a check run)")
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--out", type=Path, default=Path("/tmp/staged-cost"))
    args = parser.parse_args(argv)
    conditions.report()
    rows = []
    for name in args.datasets:
        data = dataset(name, args.root, args.out, args.users)
        rows += measure(name, data, args.out, args.epochs, args.steps)
    header = ["data", "stage", "s/step", "s/epoch (extrapolated)", "set-up and evaluation"]
    print(table(header, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
