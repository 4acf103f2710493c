"""ETRec against SASRec(+): cost as the window grows, and accuracy on ML-1M and S3-Beauty.

**scaling**: time and peak memory of one training step (forward, full-softmax CE over ML-1M's
3,416 items at every position, backward, AdamW) at windows of 50, 200, 500, 1,000 and 2,000 items,
SASRec against ETRec (both d = 64, 2 blocks, 1 head, dropout 0.1; ETRec's defaults: local
window 16, blocks of 8, shared FFN), ETRec with blocks of ⌈√window⌉ items and ETRec without its
block branch. Inputs are random full
windows (a step's cost depends on the shapes, not the values). Each (model, window) runs in a
fresh process: the step's median time over ``--repeats`` after two warm-up steps, and its peak
memory above what the process held before the first step (peak RSS on CPU, peak allocated on
CUDA). The table ends with each model's growth exponent between successive windows
(``log(cost ratio) / log(window ratio)``: 2 is quadratic, 1 linear); each row also reads as a
ratio to SASRec's step at the same window.

    python benchmarks/etrec.py scaling --windows 50 200 500 1000 2000 --batch-size 32 --threads 2

**accuracy**: the zoo's protocol and SASRec+ setting (``zoo.py``: leave-one-out, full ranking,
seen items excluded, CE, d = 64, batch 128, windows 200 on ML-1M and 50 on Beauty) for SASRec+
and ETRec, 3 seeds: HR@10, NDCG@10, seconds per training epoch, NDCG@10 paired against SASRec+.

    python benchmarks/etrec.py accuracy --datasets ml-1m beauty --seeds 0 1 2
    python benchmarks/etrec.py accuracy --table

Run either on an otherwise idle machine; ``--epochs``/``--steps-per-epoch`` shrink a check run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

import conditions
import study  # a sibling script: resumable runs and paired tables
import zoo
from attnsvm.rec.models import LossConfig, build_model

ITEMS = 3416  # ML-1M's catalogue
SIZE = {"hidden_size": 64, "ffn_size": 64, "num_blocks": 2, "num_heads": 1}
SCALING_MODELS = {
    "sasrec": ("sasrec", {}),
    "etrec": ("etrec", {}),
    "etrec-sqrt": ("etrec", {"block_size": 0}),  # blocks of ⌈√window⌉ items (max_len = window)
    "etrec-local": ("etrec", {"block_branch": False}),
}


def step_cost(name: str, window: int, batch_size: int, repeats: int, device: str) -> dict:
    """Median seconds and peak bytes of one training step (this process: run it fresh)."""
    model_name, overrides = SCALING_MODELS[name]
    torch.manual_seed(0)
    model = build_model(model_name, ITEMS, **SIZE, **overrides, max_len=window).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss = LossConfig(name="ce")
    items = torch.randint(1, ITEMS + 1, (batch_size, window + 1), device=device)
    inputs, targets = items[:, :-1], items[:, 1:].reshape(-1)

    def step() -> None:
        optimizer.zero_grad()
        hidden = model(inputs).reshape(-1, SIZE["hidden_size"])
        loss.compute(hidden, targets, model.output_embedding()).backward()
        optimizer.step()
        if device == "cuda":
            torch.cuda.synchronize()

    model.train()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    times = []
    for index in range(repeats + 2):
        start = time.perf_counter()
        step()
        if index >= 2:
            times.append(time.perf_counter() - start)
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() - before
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    return {"seconds": statistics.median(times), "peak_bytes": peak}


def scaling_table(rows: dict[str, list[dict]], peer: str = "sasrec") -> str:
    """Each model's step time and peak memory per window, and their ratios to ``peer``'s at the
    same window (measured in the same run)."""
    reference = {cost["window"]: cost for cost in rows.get(peer, [])}
    lines = [
        f"| model | window | ms / step | × {peer}'s time | peak MiB | × {peer}'s memory |",
        "|---|---|---|---|---|---|",
    ]
    for name, costs in rows.items():
        for cost in costs:
            base = reference.get(cost["window"])
            time_ratio = f"{cost['seconds'] / base['seconds']:.2f}×" if base else "—"
            memory = max(cost["peak_bytes"], 1)
            memory_ratio = f"{memory / max(base['peak_bytes'], 1):.2f}×" if base else "—"
            lines.append(
                f"| {name} | {cost['window']:,} | {1000 * cost['seconds']:.0f} | {time_ratio} "
                f"| {cost['peak_bytes'] / 2**20:.0f} | {memory_ratio} |"
            )
    return "\n".join(lines)


def scaling(args: argparse.Namespace) -> None:
    rows: dict[str, list[dict]] = {name: [] for name in args.models}
    for window in args.windows:
        for name in args.models:
            command = [
                sys.executable, __file__, "one", name, str(window), str(args.batch_size),
                str(args.repeats), args.device, str(args.threads),
            ]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            cost = json.loads(done.stdout.strip().splitlines()[-1])
            rows[name].append({"window": window, **cost})
            print(
                f"{name} window {window}: {1000 * cost['seconds']:.0f} ms, "
                f"{cost['peak_bytes'] / 2**20:.0f} MiB",
                flush=True,
            )
    print(f"\nbatch {args.batch_size}, {args.device}, {args.threads} thread(s)\n")
    print(scaling_table(rows))
    print("\n| model | windows | time growth exponent | memory growth exponent |")
    print("|---|---|---|---|")
    for name, costs in rows.items():
        for a, b in itertools.pairwise(costs):
            ratio = math.log(b["window"] / a["window"])
            time_exp = math.log(b["seconds"] / a["seconds"]) / ratio
            memory = [max(c["peak_bytes"], 1) for c in (a, b)]
            memory_exp = math.log(memory[1] / memory[0]) / ratio
            print(
                f"| {name} | {a['window']:,} → {b['window']:,} | {time_exp:.2f} "
                f"| {memory_exp:.2f} |"
            )


ACCURACY_MODELS = ("sasrec+", "etrec")
ACCURACY_DATASETS = ("ml-1m", "beauty")


def accuracy(args: argparse.Namespace) -> None:
    if args.table:
        print(study.table(args.out, args.datasets, list(ACCURACY_MODELS), "sasrec+"))
        return
    for dataset in args.datasets:
        for name in ACCURACY_MODELS:
            for seed in args.seeds:
                config = zoo.run_config(dataset, name, "paper", seed, args.root)
                config = study.budget(config, args.epochs, args.steps_per_epoch, args.threads)
                study.run(config, study.run_path(args.out, dataset, name, seed))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    scale = commands.add_parser("scaling", help="step time and memory against the window")
    scale.add_argument("--windows", type=int, nargs="+", default=[50, 200, 500, 1000, 2000])
    scale.add_argument("--models", nargs="+", default=list(SCALING_MODELS))
    scale.add_argument("--batch-size", type=int, default=32)
    scale.add_argument("--repeats", type=int, default=5)
    scale.add_argument("--threads", type=int, default=2)
    scale.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    accurate = commands.add_parser("accuracy", help="ML-1M and Beauty against SASRec+")
    accurate.add_argument("--datasets", nargs="+", default=list(ACCURACY_DATASETS))
    accurate.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    accurate.add_argument("--epochs", type=int, default=200)
    accurate.add_argument("--steps-per-epoch", type=int, default=None)
    accurate.add_argument("--threads", type=int, default=1)
    accurate.add_argument("--root", type=Path, default=study.ROOT)
    accurate.add_argument("--out", type=Path, default=Path("/tmp/etrec"))
    accurate.add_argument("--table", action="store_true", help="print the finished runs' table")
    one = commands.add_parser("one", help="(internal) one scaling measurement, as JSON")
    for name in ("model", "window", "batch_size", "repeats", "device", "threads"):
        one.add_argument(name)
    args = parser.parse_args(argv)
    conditions.report()
    if args.command == "one":
        torch.set_num_threads(int(args.threads))
        cost = step_cost(
            args.model, int(args.window), int(args.batch_size), int(args.repeats), args.device
        )
        print(json.dumps(cost))
    elif args.command == "scaling":
        scaling(args)
    else:
        accuracy(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
