"""How much the order of same-second events moves a leave-one-out score (ML-100K, SASRec+).

A rating log sorted by time leaves events of the same second in some order, and leave-one-out
makes the last of them the test item. Two copies of one dataset whose ties were broken
differently (a stable sort keeps the file order; pandas' default quicksort does not) are two
different tasks. ML-1M's copy here was sorted by an unstable sort and came without timestamps;
how SASRec's ``ml-1m.txt`` (the published numbers' copy) broke ties is not published. ML-100K
keeps its timestamps, so this script measures the effect there: SASRec+ in the zoo's setting,
trained and tested on three tie orders.

- ``file``: ties in ``u.data`` order (what ``load_dataset`` gives: a stable sort);
- ``item id``: ties by ascending item id, a pattern a model can learn;
- ``shuffled``: ties in a random order (a fixed seed).

    python benchmarks/tie_order.py --seeds 0 1 2

Each variant's sequences are written as a per-user text file (``write_per_user``) into a
temporary folder (deleted afterwards) and trained through the library like any dataset file.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from attnsvm.rec.data.datasets import load_dataset
from attnsvm.rec.data.interactions import Interactions
from attnsvm.rec.data.readers import write_per_user
from zoo import ROOT, run_config  # a sibling script: the zoo's SASRec+ setting

VARIANTS = ("file", "item id", "shuffled")


def reorder_ties(data: Interactions, variant: str, seed: int = 0) -> Interactions:
    """``data`` by (user, time), same-second events ordered as ``variant`` says."""
    within = {
        "file": np.arange(len(data)),
        "item id": data.item,
        "shuffled": np.random.default_rng(seed).permutation(len(data)),
    }[variant]
    order = np.lexsort((within, data.timestamp, data.user))
    columns = {name: getattr(data, name) for name in ("user", "item", "timestamp", "rating")}
    return replace(data, **{k: None if v is None else v[order] for k, v in columns.items()})


def tied_test_share(data: Interactions) -> float:
    """The share of users whose test event has the same time as their validation event (sorted
    by time, the test event ties with some earlier one exactly then): their test item is one of
    several same-second candidates, picked by the tie order."""
    ends = data.offsets[1:] - 1
    return float((data.timestamp[ends] == data.timestamp[ends - 1]).mean())


def main(argv: list[str] | None = None) -> int:
    from attnsvm.rec.config import DataConfig
    from attnsvm.rec.train.trainer import train

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="folder of the raw datasets")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args(argv)
    data = load_dataset("ml-100k", root=args.root)
    print(
        f"ml-100k: the test event shares its second with the validation event for "
        f"{tied_test_share(data):.1%} of users"
    )
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for variant in VARIANTS:
            path = Path(work) / f"{variant.replace(' ', '-')}.txt"
            write_per_user(reorder_ties(data, variant), path)
            scores = []
            for seed in args.seeds:
                config = run_config("ml-100k", "sasrec+", "paper", seed, args.root)
                config = replace(config, data=DataConfig(str(path), max_len=config.data.max_len))
                result = train(config, Path(work) / f"run-{path.stem}-{seed}", show_progress=False)
                scores.append((result.test["HR@10"], result.test["NDCG@10"]))
            rows.append((variant, np.array(scores)))
    base = rows[0][1].mean(axis=0)
    print("| tie order | seeds | HR@10 | NDCG@10 | vs file order (HR / NDCG) |")
    print("|---|---|---|---|---|")
    for variant, scores in rows:
        mean = scores.mean(axis=0)
        std = scores.std(axis=0, ddof=1) if len(scores) > 1 else np.zeros(2)
        change = mean / base - 1
        print(
            f"| {variant} | {len(scores)} | {mean[0]:.4f} ± {std[0]:.4f} | "
            f"{mean[1]:.4f} ± {std[1]:.4f} | {change[0]:+.1%} / {change[1]:+.1%} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
