"""SDAT against SASRec+ on the datasets with event times, with each of its parts taken out.

Protocol: leave-one-out, full ranking, seen items excluded, all users; every variant in
SASRec+'s setting (CE, d = 64, 2 blocks, 1 head, dropout 0.1, batch 128, Adam lr 1e-3, up to
``--epochs`` epochs with patience 10 on validation NDCG@10; window ``--max-len``):

- ``sasrec+``: the reference;
- ``sdat``: every part on (log-interval bias, recency gain, gap time encoding, GRU head);
- ``sdat-no-bias``, ``sdat-no-gain``, ``sdat-no-time-encoding`` (learned positions instead),
  ``sdat-no-gru``: one part off each.

Two tables: every variant against SASRec+, and every ablation against the whole SDAT, NDCG@10
paired over users (each user's value averaged over the seeds both rows finished).

    python benchmarks/sdat_ablation.py --datasets ml-100k ml-latest-small --seeds 0 1 2
    python benchmarks/sdat_ablation.py --table
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import study  # a sibling script: resumable runs and paired tables
from attnsvm.rec.config import DataConfig, EvalConfig, ModelChoice, RunConfig, TrainConfig
from attnsvm.rec.models import LossConfig

SIZE = {"hidden_size": 64, "ffn_size": 64, "num_blocks": 2, "num_heads": 1}
VARIANTS = {
    "sasrec+": ("sasrec+", {}),
    "sdat": ("sdat", {}),
    "sdat-no-bias": ("sdat", {"interval_bias": "none"}),
    "sdat-no-gain": ("sdat", {"recency_gain": False}),
    "sdat-no-time-encoding": ("sdat", {"time_encoding": "none", "position": "learned"}),
    "sdat-no-gru": ("sdat", {"gru_head": False}),
}
DATASETS = ("ml-100k", "ml-latest-small")


def run_config(dataset: str, variant: str, seed: int, args: argparse.Namespace) -> RunConfig:
    model, overrides = VARIANTS[variant]
    config = RunConfig(
        model=ModelChoice(model, {**SIZE, **overrides}),
        data=DataConfig(dataset, root=str(args.root), max_len=args.max_len),
        loss=LossConfig(name="ce"),
        train=TrainConfig(
            batch_size=128, lr=1e-3, betas=(0.9, 0.999), grad_clip=None, patience=10, seed=seed
        ),
        eval=EvalConfig(ks=(5, 10, 20)),
    )
    return study.budget(config, args.epochs, args.steps_per_epoch, args.threads)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--steps-per-epoch", type=int, default=None)
    parser.add_argument("--max-len", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--root", type=Path, default=study.ROOT)
    parser.add_argument("--out", type=Path, default=Path("/tmp/sdat"))
    parser.add_argument("--table", action="store_true", help="print the finished runs' tables")
    args = parser.parse_args(argv)
    if args.table:
        print(study.table(args.out, args.datasets, args.variants, "sasrec+"))
        print()
        print(study.table(args.out, args.datasets, args.variants, "sdat"))
        return 0
    for dataset in args.datasets:
        for variant in args.variants:
            for seed in args.seeds:
                config = run_config(dataset, variant, seed, args)
                study.run(config, study.run_path(args.out, dataset, variant, seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
