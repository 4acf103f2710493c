"""Session-based recommendation on SR-GNN's fixed Diginetica split: SMM against BERT4Rec-cloze,
SASRec+ and the session-kNN baselines, beside SR-GNN's published P@20 / MRR@20.

Protocol (``data.split = "predefined"``, ``attnsvm.rec.data.sessions``): SR-GNN's training
sessions and test sessions; every test prefix predicts its next item (60,858), full ranking of
the 43,097 items, nothing excluded; P@20 (= HR@20) and MRR@20. Validation, which SR-GNN's
published runs do not have (its ``main.py`` reports the best test epoch unless ``--validation``,
which holds out a random 10 % of training prefixes), is here the latest 10 % of the training
sessions, and early stopping reads its MRR@20 on ``--valid-prefixes`` of them.

Neural setting, shared: d = 64, 2 blocks, dropout 0.1, window ``--max-len`` tokens, full CE,
Adam lr 1e-3, batch 256, up to ``--epochs`` epochs (patience 3). Variants:

- ``smm``: masked-last over every training prefix (stride 1), pre-LN, tied, 2 heads, FFN 256;
- ``smm-cope``: the same with CoPE in every attention layer;
- ``bert4rec``: BERT4Rec's cloze (mask probability 0.2), post-LN, 2 heads, FFN 256;
- ``sasrec+``: causal, every position a target (so every prefix), 1 head, FFN 64;
- ``sknn``, ``vsknn``, ``vstan``: deterministic (one run stands for every seed), 100 neighbours.

    python benchmarks/sessions.py --cost                 # seconds per epoch and per evaluation
    python benchmarks/sessions.py --variants sknn vsknn vstan
    python benchmarks/sessions.py --variants smm bert4rec sasrec+ --seeds 0 1 2
    python benchmarks/sessions.py --table
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

import study  # a sibling script: resumable runs
from attnsvm.rec.config import (
    DataConfig,
    EvalConfig,
    ModelChoice,
    RunConfig,
    TrainConfig,
    load_config,
)
from attnsvm.rec.models import LossConfig
from attnsvm.rec.models.registry import lookup

DATASET = "diginetica"
# Wu et al., AAAI 2019, Table 2 (SR-GNN row, Diginetica): P@20, MRR@20, in %
SR_GNN_PUBLISHED = (50.73, 17.59)
NEURAL = {"hidden_size": 64, "num_blocks": 2, "dropout": 0.1, "attention_dropout": 0.1}
VARIANTS: dict[str, tuple[str, dict]] = {
    "smm": ("smm", {**NEURAL, "num_heads": 2, "ffn_size": 256}),
    "smm-cope": ("smm", {**NEURAL, "num_heads": 2, "ffn_size": 256, "cope": True}),
    "bert4rec": ("bert4rec", {**NEURAL, "num_heads": 2, "ffn_size": 256}),
    "sasrec+": ("sasrec+", {**NEURAL, "num_heads": 1, "ffn_size": 64}),
    "sknn": ("sknn", {}),
    "vsknn": ("vsknn", {}),
    "vstan": ("vstan", {}),
}


def run_config(variant: str, seed: int, args: argparse.Namespace) -> RunConfig:
    model, overrides = VARIANTS[variant]
    baseline = lookup(model).baseline
    config = RunConfig(
        model=ModelChoice(model, overrides),
        data=DataConfig(DATASET, root=str(args.root), split="predefined", max_len=args.max_len),
        loss=None if baseline else LossConfig(name="ce"),
        train=TrainConfig(batch_size=256, lr=1e-3, patience=3, seed=seed),
        # kNN similarities are dense (rows × training sessions): small ranking batches
        eval=EvalConfig(
            ks=(10, 20),
            batch_size=128 if baseline else 512,
            valid_metric="MRR@20",
            valid_users=args.valid_prefixes,
        ),
    )
    return study.budget(config, args.epochs, args.steps_per_epoch, args.threads)


def measure_cost(args: argparse.Namespace) -> None:
    """Seconds per training step and per full epoch of each neural variant, and seconds to rank
    the whole test stage, from ``--cost-steps`` timed steps and 2,000 ranked test prefixes."""
    from attnsvm.rec.train import distributed, training_loop
    from attnsvm.rec.train.scoring import evaluate_model, subtask

    torch.set_num_threads(args.threads)
    split = None
    print("| variant | examples / epoch | s / step | s / epoch (est.) | s / test ranking (est.) |")
    print("|---|---|---|---|---|")
    for variant in args.variants:
        if lookup(VARIANTS[variant][0]).baseline:
            continue
        config = run_config(variant, 0, args)
        loop = training_loop(config, split, distributed.Context())
        split, model = loop.split, loop.model
        generator = loop.begin_epoch(1)
        order = torch.randperm(len(loop.examples), generator=generator).numpy()
        batch = config.train.batch_size
        steps = [order[i * batch : (i + 1) * batch] for i in range(args.cost_steps + 2)]
        for index in steps[:2]:  # warm-up
            loop.train_step(index, generator)
        start = time.perf_counter()
        for index in steps[2:]:
            loop.train_step(index, generator)
        per_step = (time.perf_counter() - start) / args.cost_steps
        per_epoch = per_step * -(-len(loop.examples) // batch)
        sample = subtask(split.test, np.arange(2000))
        start = time.perf_counter()
        evaluate_model(model, sample, split.num_items, config.eval)
        ranking = (time.perf_counter() - start) * len(split.test) / len(sample)
        print(
            f"| {variant} | {len(loop.examples):,} | {per_step:.3f} | {per_epoch:.0f} "
            f"| {ranking:.0f} |",
            flush=True,
        )


def table(out: Path, variants: list[str]) -> str:
    """P@20 and MRR@20 (mean ± std over seeds, in %), epochs, budget and cost of every finished
    run; a baseline's cost is its fit and its ranking of the test prefixes."""
    lines = [
        "| model | seeds | P@20 (= HR@20) | MRR@20 | epochs run (budget) | cost |",
        "|---|---|---|---|---|---|",
        f"| SR-GNN (published, AAAI 2019 Table 2) | — | {SR_GNN_PUBLISHED[0]:.2f} "
        f"| {SR_GNN_PUBLISHED[1]:.2f} | — | — |",
    ]
    for variant in variants:
        runs = study.finished(out, DATASET, variant)
        if not runs:
            continue
        records = [study.metrics(p) for p in runs.values()]
        config = load_config(next(iter(runs.values())) / "config.json")
        p20 = [100 * r["test"]["HR@20"] for r in records]
        mrr = [100 * r["test"]["MRR@20"] for r in records]
        if lookup(config.model.name).baseline:
            seeds, epochs = "deterministic", "— (a fit)"
            cost = (
                f"fit {records[0]['train_seconds']:.0f} s, test {records[0]['test_seconds']:.0f} s"
            )
        else:
            seeds = str(len(runs))
            cap = config.train.steps_per_epoch
            budget = f"{config.train.epochs}" + (f" × {cap} steps" if cap else "")
            epochs = "/".join(str(r["epochs"]) for r in records) + f" ({budget})"
            per_epoch = np.mean([r["train_seconds"] / max(r["epochs"], 1) for r in records])
            cost = f"{per_epoch:.0f} s / epoch"
        lines.append(f"| {variant} | {seeds} | {pm(p20)} | {pm(mrr)} | {epochs} | {cost} |")
    return "\n".join(lines)


def pm(values: list[float]) -> str:
    array = np.asarray(values)
    return f"{array[0]:.2f}" if array.size == 1 else f"{array.mean():.2f} ± {array.std(ddof=1):.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--steps-per-epoch", type=int, default=None)
    parser.add_argument("--max-len", type=int, default=20)
    parser.add_argument("--valid-prefixes", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--root", type=Path, default=study.ROOT)
    parser.add_argument("--out", type=Path, default=Path("/tmp/sessions"))
    parser.add_argument("--cost", action="store_true", help="measure s / epoch, train nothing")
    parser.add_argument("--cost-steps", type=int, default=20)
    parser.add_argument("--table", action="store_true", help="print the finished runs' table")
    args = parser.parse_args(argv)
    if args.table:
        print(table(args.out, args.variants))
        return 0
    if args.cost:
        measure_cost(args)
        return 0
    for variant in args.variants:
        baseline = lookup(VARIANTS[variant][0]).baseline
        for seed in args.seeds[:1] if baseline else args.seeds:
            config = run_config(variant, seed, args)
            study.run(config, study.run_path(args.out, DATASET, variant, seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
