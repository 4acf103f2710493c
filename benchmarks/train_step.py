"""What the trainer's CPU choices buy, measured on SASRec+'s ML-1M shapes.

One SASRec+ step on ML-1M (K&V config: batch 128, window 200, d = 64, 2 blocks, 1 head,
3,416 items, full cross-entropy) spends its time in three places this script times against
the alternative, each in the same run and process setting:

1. **dropout masks**: ``attnsvm.rec.nn.dropout.dropout`` (numpy SFC64 integers compared with
   p · 2³²) against ``torch.nn.functional.dropout`` (torch's ``bernoulli_``), forward and
   backward on the 128 × 200 × 64 activation, p = 0.1;
2. **full-CE chunk size**: ``full_ce_loss`` forward and backward over 25,600 rows × 3,416 items
   for chunks of 256, 512 (the default) and 1,024 rows and for no chunking;
3. **freed-memory setting**: a whole training step (forward, chunked CE, backward, AdamW) in two
   fresh processes, one with ``attnsvm.process.keep_freed_memory()`` (what the CLI
   calls) and one with glibc's defaults, which return large freed blocks to the kernel and
   fault them in again on every step.

    .venv/bin/python benchmarks/train_step.py --threads 2 --repeats 20

With ``--before REF`` it also times the trainer's whole step as ``train()`` runs it (SASRec+ on
ML-1M, read from the run's ``log.jsonl``: training seconds over steps, evaluation excluded) at git
commit ``REF`` and in this tree, in fresh processes taken in turn (A B A B …): a refactoring of
the trainer must not slow its step.

    .venv/bin/python benchmarks/train_step.py --threads 2 --repeats 20 --before cd21b93

Medians over ``--repeats`` timed calls after 3 warm-up calls; inputs are random (the cost
depends on the shapes, not the values). Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

import conditions
from reference import run_snippet

BATCH, WINDOW, DIM, ITEMS = 128, 200, 64, 3416


def median_ms(call: Callable[[], None], repeats: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def time_dropout(repeats: int) -> dict[str, float]:
    from attnsvm.rec.nn.dropout import dropout

    x = torch.randn(BATCH, WINDOW, DIM, requires_grad=True)

    def step(function: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], None]:
        def call() -> None:
            function(x).sum().backward()
            x.grad = None

        return call

    return {
        "attnsvm dropout": median_ms(step(lambda t: dropout(t, 0.1)), repeats),
        "torch F.dropout": median_ms(step(lambda t: torch.nn.functional.dropout(t, 0.1)), repeats),
    }


def time_ce_chunks(repeats: int) -> dict[str, float]:
    from attnsvm.rec.nn.losses import full_ce_loss

    rows = BATCH * WINDOW
    hidden = torch.randn(rows, DIM, requires_grad=True)
    embedding = (0.1 * torch.randn(ITEMS + 1, DIM)).requires_grad_()
    positives = torch.randint(1, ITEMS + 1, (rows,))
    results = {}
    for chunk in (256, 512, 1024, None):

        def call(chunk: int | None = chunk) -> None:
            full_ce_loss(hidden, positives, embedding, None, chunk).backward()
            hidden.grad = embedding.grad = None

        results[f"CE chunk {chunk or 'none'}"] = median_ms(call, repeats)
    return results


def step_worker(keep: bool, threads: int, repeats: int) -> float:
    """One process's median ms for a whole SASRec+ training step."""
    torch.set_num_threads(threads)
    if keep:
        from attnsvm.process import keep_freed_memory

        keep_freed_memory()
    from attnsvm.rec.config import DataConfig, ModelChoice, RunConfig, TrainConfig
    from attnsvm.rec.models import LossConfig
    from attnsvm.rec.nn.losses import full_ce_loss
    from attnsvm.rec.train.scoring import build

    torch.manual_seed(0)
    model_config = {"hidden_size": DIM, "ffn_size": DIM, "num_blocks": 2, "num_heads": 1}
    config = RunConfig(
        ModelChoice("sasrec+", model_config),
        DataConfig("ml-1m", max_len=WINDOW),
        LossConfig(name="ce"),
        TrainConfig(batch_size=BATCH),
    )
    model = build(config, ITEMS)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98))
    inputs = torch.randint(1, ITEMS + 1, (BATCH, WINDOW))
    targets = torch.randint(1, ITEMS + 1, (BATCH * WINDOW,))

    def call() -> None:
        optimizer.zero_grad(set_to_none=False)
        hidden = model(inputs).reshape(-1, DIM)
        loss = full_ce_loss(
            hidden,
            targets,
            model.output_embedding(),
            model.output_bias(),
            config.loss.ce_chunk_size,
        )
        loss.backward()
        optimizer.step()

    return median_ms(call, repeats)


def time_memory_setting(threads: int, repeats: int) -> dict[str, float]:
    results = {}
    for keep, label in ((True, "step, keep_freed_memory"), (False, "step, glibc defaults")):
        output = subprocess.run(
            [
                sys.executable,
                __file__,
                "--step-worker",
                "keep" if keep else "default",
                "--threads",
                str(threads),
                "--repeats",
                str(repeats),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        results[label] = json.loads(output.splitlines()[-1])["ms"]
    return results


TRAINER_STEP = """
import json, tempfile, torch
from attnsvm.rec.config import RunConfig
from attnsvm.rec.train.trainer import train
try:  # newer trees: the CLI keeps freed memory, train() leaves the process as it is
    from attnsvm.process import keep_freed_memory
    keep_freed_memory()
except ImportError:  # older trees: train() kept it itself
    pass
torch.set_num_threads({threads})
data = {{
    "model": {{"name": "sasrec+"}},
    "data": {{"dataset": "ml-1m", "root": {root!r}, "max_len": 200}},
    "train": {{"epochs": 1, "steps_per_epoch": {steps}, "batch_size": 128, "seed": 0}},
    "eval": {{"valid_users": 64}},
}}
with tempfile.TemporaryDirectory() as folder:
    result = train(RunConfig.from_dict(data), folder + "/run", show_progress=False)
    record = json.loads(open(str(result.run_dir) + "/log.jsonl").readline())
    print(json.dumps({{"ms": 1000 * record["train_seconds"] / record["step"]}}))
"""


def time_trainer_step(before: str, threads: int, steps: int, rounds: int) -> dict[str, float]:
    """ms per step of ``train()``'s own loop (SASRec+ on ML-1M, the K&V shapes), the package at
    ``before`` against this tree, in fresh processes taken in turn (A B A B …); medians."""
    import tempfile
    from pathlib import Path

    from reference import THIS_TREE, checkout

    root = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
    code = TRAINER_STEP.format(threads=threads, root=str(root), steps=steps)
    times: dict[str, list[float]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as folder:
        sources = {"before": checkout(before, Path(folder)), "after": THIS_TREE}
        for _ in range(rounds):
            for label, src in sources.items():
                times[label].append(run_snippet(code, src)["ms"])
    return {
        f"trainer step at {before}": statistics.median(times["before"]),
        "trainer step, this tree": statistics.median(times["after"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--step-worker", choices=["keep", "default"], help=argparse.SUPPRESS)
    parser.add_argument(
        "--before",
        help="also time train()'s step at this git commit against this tree (needs ML-1M)",
    )
    parser.add_argument("--steps", type=int, default=30, help="steps per --before run")
    parser.add_argument("--rounds", type=int, default=3, help="A B rounds for --before")
    args = parser.parse_args(argv)
    if args.step_worker:
        ms = step_worker(args.step_worker == "keep", args.threads, args.repeats)
        print(json.dumps({"ms": ms}))
        return 0
    conditions.report()
    torch.set_num_threads(args.threads)
    rows = [
        (
            "dropout mask (fwd + bwd, 128×200×64, p 0.1)",
            time_dropout(args.repeats),
            "torch F.dropout",
        ),
        (
            "full CE (fwd + bwd, 25,600 rows × 3,416 items)",
            time_ce_chunks(args.repeats),
            "CE chunk 1024",
        ),
        (
            "whole SASRec+ step (fresh process each)",
            time_memory_setting(args.threads, args.repeats),
            "step, glibc defaults",
        ),
    ]
    if args.before:
        rows.append(
            (
                f"train() step, {args.steps} steps, {args.rounds} A B rounds",
                time_trainer_step(args.before, args.threads, args.steps, args.rounds),
                f"trainer step at {args.before}",
            )
        )
    print(f"torch {torch.__version__}, {args.threads} threads, median of {args.repeats}\n")
    print("| part | variant | ms | ratio to the alternative |")
    print("|---|---|---|---|")
    for part, results, reference in rows:
        for variant, ms in results.items():
            print(f"| {part} | {variant} | {ms:.1f} | {results[reference] / ms:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
