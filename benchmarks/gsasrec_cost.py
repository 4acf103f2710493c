"""What gSASRec's published ML-1M run costs on this machine, beside SASRec+'s step (issue 32).

gSASRec-pytorch's ML-1M config (``train_published.py``'s ``gsasrec``: d = 128, 256 uniform
negatives at every position, gBCE t = 0.75, batch 128, 256 steps an epoch, validation on 512
users, early stopping with a patience of 200 epochs) against SASRec+'s zoo setting on ML-1M
(CE over the catalogue, d = 64, batch 128, 48 steps an epoch), both one thread, in one process:
each step is one full trainer step (``TrainingLoop.train_step``) of epoch 1's batches, the
runs' steps taken in turns, the median of ``--steps`` after two warm-ups. One validation pass of
each (its ``eval`` settings) is timed once. gSASRec runs twice: as the library trains it (on
ML-1M's small table its per-position negatives are read off all items' logits) and with them
gathered row by row from the table, the path before that. The table gives each run's step,
epoch (steps an epoch × step + validation) and ratio to SASRec+'s, and for gSASRec what a run
costs: at least 201 epochs (patience 200 after the best one), and, as the official run went
(its published checkpoint's name records step 86,064: 1,793 epochs of 48 steps), about 2,000.

    .venv/bin/python benchmarks/gsasrec_cost.py --steps 5
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import sys
import time
from dataclasses import replace

import torch

import conditions
import train_published  # a sibling script: the published runs' configs
import zoo
from attnsvm.rec.nn import losses
from attnsvm.rec.train import distributed
from attnsvm.rec.train.loop import TrainingLoop
from attnsvm.rec.train.scoring import evaluate_model
from attnsvm.rec.train.trainer import training_loop
from epoch_cases import first_batches

#: gSASRec-pytorch's published ML-1M checkpoint (t = 0.75, 256 negatives) was saved at this step
#: (pre_trained/gsasrec-ml1m-step:86064-t:0.75-negs:256-emb:128-dropout:0.5-metric:0.197….pt)
OFFICIAL_BEST_STEP = 86_064


#: gSASRec again with its per-position negatives gathered row by row from the table (the path
#: before all items' logits were read off one product: ``losses.DENSE_ROWS_PER_NEGATIVE``)
GATHERED = "gsasrec (negatives gathered)"


@contextlib.contextmanager
def negatives_path(name: str):
    dense = losses.DENSE_ROWS_PER_NEGATIVE
    losses.DENSE_ROWS_PER_NEGATIVE = 0 if name == GATHERED else dense
    try:
        yield
    finally:
        losses.DENSE_ROWS_PER_NEGATIVE = dense


def loops() -> dict[str, TrainingLoop]:
    published = train_published.RUNS["gsasrec"][0]
    gsasrec = replace(
        published,
        data=replace(published.data, root=str(zoo.ROOT)),
        train=replace(published.train, num_threads=1),
    )
    configs = {
        "sasrec+": zoo.run_config("ml-1m", "sasrec+", "paper", 0, zoo.ROOT),
        "gsasrec": gsasrec,
        GATHERED: gsasrec,
    }
    return {
        name: training_loop(config, context=distributed.Context())
        for name, config in configs.items()
    }


def validation_seconds(loop: TrainingLoop) -> float:
    start = time.perf_counter()
    evaluate_model(loop.model, loop.valid_task, loop.split.num_items, loop.config.eval)
    loop.model.train()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="timed steps of each run")
    args = parser.parse_args(argv)
    conditions.report()
    torch.set_num_threads(1)
    runs = loops()
    plans = {name: first_batches(loop, args.steps + 2) for name, loop in runs.items()}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for number in range(args.steps + 2):
        for name, loop in runs.items():
            batches, generator = plans[name]
            start = time.perf_counter()
            with negatives_path(name):
                loop.train_step(batches[number], generator)
            if number >= 2:
                times[name].append(time.perf_counter() - start)
    rows = {}
    for name, loop in runs.items():
        train = loop.config.train
        steps = math.ceil(len(loop.examples) / train.batch_size)
        steps = min(steps, train.steps_per_epoch or steps)
        step = statistics.median(times[name])
        valid = validation_seconds(loop)
        rows[name] = {"step": step, "steps": steps, "valid": valid, "epoch": step * steps + valid}
    reference = rows["sasrec+"]["epoch"]
    print(f"\nload average at the end: {conditions.load():.2f}\n")
    print("| run | ms / step | steps / epoch | validation s | s / epoch | × SASRec+'s epoch |")
    print("|---|---|---|---|---|---|")
    for name, row in rows.items():
        print(
            f"| {name} | {1000 * row['step']:.0f} | {row['steps']} | {row['valid']:.1f} "
            f"| {row['epoch']:.0f} | {row['epoch'] / reference:.1f}× |"
        )
    gsasrec = rows["gsasrec"]
    patience = runs["gsasrec"].config.train.patience
    official = math.ceil(OFFICIAL_BEST_STEP / gsasrec["steps"]) + patience
    print(
        f"\ngSASRec's published run, one thread: at least {patience + 1} epochs (patience "
        f"{patience}), ≥ {(patience + 1) * gsasrec['epoch'] / 3600:.0f} CPU-hours; as the "
        f"official run went (its best checkpoint at step {OFFICIAL_BEST_STEP:,}, then "
        f"{patience} epochs of patience) {official:,} epochs, "
        f"≈ {official * gsasrec['epoch'] / 3600:.0f} CPU-hours. A campaign cell holds 90 "
        "CPU-minutes."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
