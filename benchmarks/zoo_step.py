"""What the zoo's CPU training steps cost on S3-Beauty, each against its alternative.

Every-prefix ("last") training on S3-Beauty gives 131,413 examples an epoch, most of them a few
items long in a window of 50. Two choices decide what a step costs, and this script times each
against its alternative on the same real batches, in one process:

1. **padding cut**: a ``padding_free`` model (its real positions read the same with or without
   left padding, tested in ``tests/rec/zoo``) lets the trainer split a batch into length groups
   and cut each to its longest row; the alternative runs every row at the full window
   (``padding_free`` switched off for the measurement).
2. **MaTrRec's sequential scan**: per-step slices taken with ``unbind`` (the library) against
   indexing ``[:, t]`` inside the loop, whose backward writes each step's gradient into a zero
   tensor the size of the whole (batch, L, channels, states) sequence.

    .venv/bin/python benchmarks/zoo_step.py --steps 8

Each figure is the median ms of one full trainer step (forward, CE at the last position,
backward, AdamW; AC-TSR's attack step included) over ``--steps`` batches of 256 examples after
two warm-up steps. One thread, as the zoo's runs use.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable

import torch

import conditions
import zoo  # benchmarks/ is on the path of a script run from it
from attnsvm.rec.models import matrrec
from attnsvm.rec.train import distributed
from attnsvm.rec.train.loop import TrainingLoop
from attnsvm.rec.train.scoring import build, load_split

MODELS = ("matrrec", "convformer", "ssept", "actsr")


def indexed_scan(u, delta, A, B, C, D, scan="sequential"):
    """The alternative: the same recurrence with ``[:, t]`` slices of whole-sequence tensors."""
    decay = torch.exp(delta.unsqueeze(-1) * A)
    drive = (delta * u).unsqueeze(-1) * B.unsqueeze(2)
    state = torch.zeros_like(drive[:, 0])
    outputs = []
    for t in range(u.shape[1]):
        state = decay[:, t] * state + drive[:, t]
        outputs.append(torch.einsum("bdn,bn->bd", state, C[:, t]))
    return torch.stack(outputs, dim=1) + u * D


# every variant of every model reads the same Beauty split: load it once
beauty_split = functools.cache(load_split)


def step_ms(name: str, steps: int, padding_free: bool, scan: Callable | None = None) -> float:
    """Median ms of the trainer's step for ``name`` in the zoo's Beauty setting."""
    config = zoo.run_config("beauty", name, "paper", seed=0)
    split = beauty_split(config.data)
    model = build(config, split.num_items, split.num_users)
    model_class = type(model)
    saved_flag, saved_scan = model_class.padding_free, matrrec.selective_scan
    model_class.padding_free = padding_free
    if scan is not None:
        matrrec.selective_scan = scan
    try:
        loop = TrainingLoop(config, split, model, distributed.init_from_env())
        generator = loop.begin_epoch(1)
        order = torch.randperm(len(loop.examples), generator=generator).numpy()
        size = config.train.batch_size
        batches = [order[i * size : (i + 1) * size] for i in range(steps + 2)]
        times = []
        for number, index in enumerate(batches):
            start = time.perf_counter()
            loop.train_step(index, generator)
            if number >= 2:
                times.append(time.perf_counter() - start)
    finally:
        model_class.padding_free, matrrec.selective_scan = saved_flag, saved_scan
    return 1000 * statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    args = parser.parse_args(argv)
    conditions.report()
    torch.set_num_threads(1)
    rows = []
    for name in args.models:
        cut = step_ms(name, args.steps, padding_free=True)
        full = step_ms(name, args.steps, padding_free=False)
        rows.append((name, "padding cut to length groups (the library)", cut, cut))
        rows.append((name, "every row at the full window of 50", full, cut))
        if name == "matrrec":
            indexed = step_ms(name, args.steps, padding_free=True, scan=indexed_scan)
            rows.append((name, "scan with [:, t] indexing, padding cut", indexed, cut))
            before = step_ms(name, args.steps, padding_free=False, scan=indexed_scan)
            rows.append((name, "scan with [:, t] indexing, full window (before)", before, cut))
    print(f"torch {torch.__version__}, 1 thread, median of {args.steps} steps\n")
    print("| model | step | ms | time / the library's |")
    print("|---|---|---|---|")
    for name, variant, ms, library in rows:
        print(f"| {name} | {variant} | {ms:.0f} | {ms / library:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
