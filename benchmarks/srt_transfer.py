"""SRT pre-trained on ML-1M and fine-tuned on ML-100K against SRT trained on ML-100K alone, and
items never seen in fine-tuning scored from their features.

The two catalogues share no item ids (ML-1M's movie 2 is Jumanji, ML-100K's is GoldenEye); they
share words: titles and genres, hashed into one token table, so the fine-tuning run starts from
every pre-trained weight (``train.init_from``, strict) with no id mapping. Runs, per seed:

- ``srt-pre``: SRT on ML-1M (``movies.dat``), leave-one-out, early-stopped on validation;
- on ML-100K (``u.item``), for each ``--splits``: ``srt-tuned`` (from ``srt-pre``),
  ``srt-scratch`` (fresh), ``sasrec+`` (an item-id model, the reference for cold items) and
  ``pop`` (training popularity, once: it has no seed).

Tables per split: HR@10 and NDCG@10 (mean ± std over seeds), NDCG@10 of each row paired against
``srt-scratch`` over users (each user averaged over the seeds both rows finished), and HR@10 on
the test events whose target never occurs in the split's training data ("cold"), with their
count. Leave-one-out leaves ML-100K 3 cold test targets; ``temporal`` (the 80/10/10 time cuts,
evaluation targets unseen in training kept) leaves 149, which is where the cold column means
something.

All SRT runs use the ``srt`` preset (sampled softmax, 300 popularity negatives, log-q
correction) and the from-scratch fine-tuning size (d = 64, 2 layers, 2 heads, dropout 0.5,
window ``--max-len``), Adam at ``--lr``, batch 128, patience 10. ``--objective causal`` (the
default) trains every position of one window per user; ``last`` trains every prefix's last
position, the paper's, at about 30 times the cost (ML-1M: ~990,000 prefixes an epoch instead of
6,040 windows; about 32 min against 1 min an epoch on one CPU thread). ``--negatives shared``
draws the 300 negatives once a step for every position (the official code's
``nce_global_negatives`` switch) instead of once per position: with every position of 128
windows of 200 trained, per-position negatives are 7.7 M a step: 1.5–1.6 s on ML-1M (one
thread, quiet, two steps timed by hand: not a benchmark; 3.2–3.6 s when they were gathered row
by row), shared ones 300 (0.60–0.68 s).

    python benchmarks/srt_transfer.py --seeds 0 1 2
    python benchmarks/srt_transfer.py --table
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

import study  # a sibling script: resumable runs and paired tables
from attnsvm.rec.config import DataConfig, EvalConfig, ModelChoice, RunConfig, TrainConfig
from attnsvm.rec.models import LossConfig, resolve
from attnsvm.rec.nn.losses import NEGATIVE_SOURCES

SPLITS = ("leave-one-out", "temporal")
FINE_TUNED = ("srt-tuned", "srt-scratch", "sasrec+", "pop")
SASREC = {"hidden_size": 64, "ffn_size": 64, "num_blocks": 2, "num_heads": 1}


def data(dataset: str, split: str, args: argparse.Namespace) -> DataConfig:
    return DataConfig(
        dataset, root=str(args.root), split=split, unseen_policy="keep", max_len=args.max_len
    )


def config(variant: str, dataset: str, split: str, seed: int, args) -> RunConfig:
    """The run ``variant`` of the module docstring on ``dataset`` under ``split``."""
    evaluation = EvalConfig(ks=(5, 10, 20))
    if variant == "pop":
        return RunConfig(model=ModelChoice("pop"), data=data(dataset, split, args), eval=evaluation)
    train = TrainConfig(
        batch_size=128, lr=args.lr, betas=(0.9, 0.999), grad_clip=None, patience=10, seed=seed
    )
    if variant == "sasrec+":
        model, loss = ModelChoice("sasrec+", SASREC), LossConfig(name="ce")
    else:
        features = {"features_dataset": dataset, "features_root": str(args.root)}
        model = ModelChoice("srt", {**features, "objective": args.objective})
        loss = replace(resolve("srt")[2], negatives=args.negatives)
    if variant == "srt-tuned":
        source = study.run_path(args.out, args.pretrain, "srt-pre", seed)
        train = replace(train, init_from=str(source))
    run = RunConfig(model=model, data=data(dataset, split, args), loss=loss, train=train)
    return study.budget(replace(run, eval=evaluation), args.epochs, args.steps, args.threads)


def cold_hit_rate(path: Path) -> tuple[float, int]:
    """HR@10 over the test events (target items; a temporal split has several per user)
    whose target the run's training data never holds, and their count."""
    from attnsvm.rec.eval.ranking import rank_topk
    from attnsvm.rec.train.runs import open_run

    opened = open_run(path)
    task, evaluation = opened.task, opened.run.config.eval
    topk = rank_topk(
        opened.run.scores(task),
        task,
        opened.data.num_items,
        10,
        batch_size=evaluation.batch_size,
        exclude_seen=evaluation.exclude_seen,
    )
    rows = np.repeat(np.arange(len(task)), task.targets.lengths)
    cold = opened.popularity[task.targets.items] == 0
    hits = (topk[rows[cold]] == task.targets.items[cold, None]).any(axis=1)
    return (float(hits.mean()) if hits.size else float("nan")), int(cold.sum())


def table(args: argparse.Namespace) -> str:
    lines = []
    for split in args.splits:
        folder = f"{args.finetune}-{split}"
        reference = study.finished(args.out, folder, "srt-scratch")
        lines += [
            f"\n{args.finetune}, {split}:\n",
            "| variant | seeds | HR@10 | NDCG@10 | Δ NDCG@10 vs srt-scratch (paired over users) "
            "| cold-target HR@10 (events) |",
            "|---|---|---|---|---|---|",
        ]
        for variant in FINE_TUNED:
            runs = study.finished(args.out, folder, variant)
            if not runs:
                continue
            records = [study.metrics(p) for p in runs.values()]
            cold = [cold_hit_rate(p) for p in runs.values()]
            versus = "—" if variant == "srt-scratch" else study.paired(runs, reference, "NDCG@10")
            lines.append(
                f"| {variant} | {len(runs)} | {study.pm([r['test']['HR@10'] for r in records])} "
                f"| {study.pm([r['test']['NDCG@10'] for r in records])} | {versus} "
                f"| {study.pm([c[0] for c in cold])} ({cold[0][1]}) |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pretrain", default="ml-1m")
    parser.add_argument("--finetune", default="ml-100k")
    parser.add_argument("--splits", nargs="+", default=list(SPLITS), choices=list(SPLITS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=None, help="cap on batches per epoch")
    parser.add_argument("--objective", choices=["last", "causal"], default="causal")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument(
        "--negatives",
        choices=NEGATIVE_SOURCES,
        default="per_position",
        help="the preset's 300 negatives per position, or one set shared by the step",
    )
    parser.add_argument("--max-len", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--root", type=Path, default=study.ROOT)
    parser.add_argument("--out", type=Path, default=Path("/tmp/srt"))
    parser.add_argument("--table", action="store_true", help="print the finished runs' tables")
    args = parser.parse_args(argv)
    if args.table:
        print(table(args))
        return 0
    for seed in args.seeds:
        pre = config("srt-pre", args.pretrain, "leave-one-out", seed, args)
        study.run(pre, study.run_path(args.out, args.pretrain, "srt-pre", seed))
        for split in args.splits:
            for variant in FINE_TUNED:
                if variant == "pop" and seed != args.seeds[0]:
                    continue  # deterministic: one run stands for every seed
                run = config(variant, args.finetune, split, seed, args)
                path = study.run_path(args.out, f"{args.finetune}-{split}", variant, seed)
                study.run(run, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
