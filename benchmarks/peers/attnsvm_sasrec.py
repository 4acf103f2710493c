"""attnsvm SASRec+ worker for ``benchmarks/sasrec_peers.py`` (runs in the project's venv).

Trains through ``attnsvm.rec.train.train`` with the common config (``_common.CONFIG``, the same
as ``train_published.py``'s ``RUNS["sasrec+"]``: d = 64, 2 blocks, 1 head, FFN 64, dropout
0.1, window 200, full CE, AdamW betas (0.9, 0.98), weight decay 0, lr 1e-3, batch 128, no
clipping) for a fixed number of epochs, keeping the last weights. ``train`` also ranks the
validation users after every epoch; that is not in the epoch seconds (``train_seconds`` of
``log.jsonl`` covers the optimiser steps only). Then the last weights rank the whole catalogue
for every test user from the train + valid history, seen items excluded, timed.

``--variant bf16`` trains and ranks under bf16 autocast (the matmuls, the chunked CE's
included, on bfloat16 operands with float32 masters and accumulators); ``--variant compile``
trains the model under ``torch.compile`` (its first epoch includes the compilation).

    .venv/bin/python benchmarks/peers/attnsvm_sasrec.py --table T.csv --out DIR \\
        --dataset ml-1m --root ../shared/data
"""

from __future__ import annotations

import json
import time

from attnsvm.process import short_spin

short_spin()  # as the CLI does, before torch loads its OpenMP runtime (attnsvm.process)

import torch  # noqa: E402
from _common import CONFIG, finish, parse_args, use_threads  # noqa: E402

import attnsvm  # noqa: E402
from attnsvm.rec.config import (  # noqa: E402
    DataConfig,
    EvalConfig,
    ModelChoice,
    RunConfig,
    TrainConfig,
)
from attnsvm.rec.eval import rank_topk  # noqa: E402
from attnsvm.rec.models import LossConfig  # noqa: E402
from attnsvm.rec.train import load_run, train  # noqa: E402
from attnsvm.rec.train.scoring import load_split, score_function  # noqa: E402


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
            bf16=args.variant == "bf16",
            compile=args.variant == "compile",
        ),
        EvalConfig(ks=(args.top_k,), batch_size=args.eval_batch_size),
    )
    result = train(config, args.out / "run", show_progress=False)
    log = [json.loads(line) for line in (result.run_dir / "log.jsonl").read_text().splitlines()]

    run = load_run(result.run_dir)
    split = load_split(config.data)
    score = score_function(run.model, split.test, torch.device("cpu"), bf16=args.variant == "bf16")
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
            "library": "attnsvm" if args.variant == "fp32" else f"attnsvm-{args.variant}",
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
