"""attnsvm SASRec+ worker for ``benchmarks/sasrec_peers.py`` (runs in the project's venv).

Trains through ``attnsvm.rec.train.train`` with the common config (``_common.CONFIG``, the same
as ``train_published.py``'s ``RUNS["sasrec+"]``: d = 64, 2 blocks, 1 head, FFN 64, dropout
0.1, window 200, full CE, AdamW betas (0.9, 0.98), weight decay 0, lr 1e-3, batch 128, no
clipping) for a fixed number of epochs, keeping the last weights. ``train`` also ranks the
validation users after every epoch; that is not in the epoch seconds (``train_seconds`` of
``log.jsonl`` covers the optimiser steps only). Then the last weights rank the whole catalogue
for every test user from the train + valid history, seen items excluded, timed.

    .venv/bin/python benchmarks/peers/attnsvm_sasrec.py --table T.csv --out DIR \\
        --dataset ml-1m --root ../shared/data
"""

from __future__ import annotations

import json
import time

import torch
from _common import CONFIG, finish, parse_args, use_threads

import attnsvm
from attnsvm.rec.config import DataConfig, EvalConfig, ModelChoice, RunConfig, TrainConfig
from attnsvm.rec.eval import rank_topk
from attnsvm.rec.models import LossConfig
from attnsvm.rec.train import load_run, train
from attnsvm.rec.train.scoring import load_split, score_function


def main() -> None:
    args = parse_args(__doc__.split("\n")[0])
    use_threads(args.threads)
    config = RunConfig(
        ModelChoice(
            "sasrec+",
            {
                "hidden_size": CONFIG["hidden_size"],
                "ffn_size": CONFIG["ffn_size"],
                "num_blocks": CONFIG["num_blocks"],
                "num_heads": CONFIG["num_heads"],
                "dropout": CONFIG["dropout"],
                "attention_dropout": CONFIG["dropout"],
            },
        ),
        DataConfig(args.dataset, root=args.root, max_len=CONFIG["max_len"]),
        LossConfig(name="ce"),
        TrainConfig(
            epochs=args.epochs,
            batch_size=CONFIG["batch_size"],
            lr=CONFIG["lr"],
            betas=CONFIG["betas"],
            weight_decay=CONFIG["weight_decay"],
            grad_clip=None,
            keep="last",  # a fixed budget of epochs, as for every peer
            seed=args.seed,
            num_threads=args.threads,
        ),
        EvalConfig(ks=(args.top_k,), batch_size=args.eval_batch_size),
    )
    result = train(config, args.out / "run", show_progress=False)
    log = [json.loads(line) for line in (result.run_dir / "log.jsonl").read_text().splitlines()]

    run = load_run(result.run_dir)
    split = load_split(config.data)
    score = score_function(run.model, split.test, torch.device("cpu"))
    start = time.perf_counter()
    topk = rank_topk(
        score, split.test, split.num_items, args.top_k, batch_size=args.eval_batch_size
    )
    eval_seconds = time.perf_counter() - start

    finish(
        args,
        split.test.users,
        topk,
        {
            "library": "attnsvm",
            "version": attnsvm.__version__,
            "epoch_seconds": [record["train_seconds"] for record in log],
            "fit_seconds": result.train_seconds,
            "eval_seconds": eval_seconds,
            "parameters": sum(p.numel() for p in run.model.parameters()),
            "steps": json.loads((result.run_dir / "metrics.json").read_text())["steps"],
            "own_test_metrics": {k: v for k, v in result.test.items() if "@" in k},
            "notes": "train.keep='last'; validation ranking after each epoch not timed",
        },
    )


if __name__ == "__main__":
    main()
