"""Bulk recommendation timed beside the evaluator's own ranking, in one process on the same run.

Three timings, each the median of ``--repeats`` (the run and its data loaded once before):

- **evaluator**: ``rank_topk`` over the run's test task at k = ``-k`` with the run's eval batch
  size, what ``attnsvm evaluate`` spends ranking (its metrics need only max(ks) items; k = 100
  here so both rank the same list length);
- **bulk, ranking**: ``recommend_all(..., histories="full")``'s scoring and top-k of every user
  after their whole history (``BulkResult.rank_seconds``);
- **bulk, end to end**: the same call from the run directory to the written Parquet file
  (loading the run and the data, ranking, writing).

- **object API**: ``Recommender.load(run).recommend(users=…, k=10)`` for 1,000 users in one
  call, after the load; its lists are checked against ``recommend(run_dir, user=…)`` for a
  sample of them.

Targets (the 2-core machine): all 6,040 ML-1M users at k = 100 in under 5 s (issue 25); 1,000
users through the object API in under 1 s after the load (issue 28).

    python benchmarks/bulk_recommend.py /tmp/runs/ml1m-sasrec+ -k 100 [--threads 2] [--repeats 3]

A smoke run on any small run directory: ``python benchmarks/bulk_recommend.py RUN -k 5
--repeats 1``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import polars as pl
import torch

import conditions
from attnsvm.rec.eval.ranking import rank_topk
from attnsvm.rec.recommender import Recommender
from attnsvm.rec.train.bulk import recommend_all
from attnsvm.rec.train.runs import open_run, recommend

TARGET_SECONDS = 5.0


def median_seconds(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a finished run directory")
    parser.add_argument("-k", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    conditions.report()
    torch.set_num_threads(args.threads)

    opened = open_run(args.run, "test")
    run, task = opened.run, opened.task
    config = run.config.eval

    def evaluator() -> None:
        rank_topk(
            run.scores(task),
            task,
            opened.data.num_items,
            args.k,
            batch_size=config.batch_size,
            exclude_seen=config.exclude_seen,
        )

    evaluator()  # warm-up: first-call allocations and thread start
    evaluator_seconds = median_seconds(evaluator, args.repeats)
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "recs.parquet"
        ranking, total = [], []
        for _ in range(args.repeats):
            start = time.perf_counter()
            result = recommend_all(args.run, out, args.k)
            total.append(time.perf_counter() - start)
            ranking.append(result.rank_seconds)
        size_mib = out.stat().st_size / 2**20
    print(
        f"{args.run}: {run.config.model.name}, {result.users} users, k = {args.k}, "
        f"{args.threads} threads, median of {args.repeats}"
    )
    print(f"evaluator rank_topk (test task, {len(task)} users): {evaluator_seconds:8.2f} s")
    print(f"bulk recommend, ranking (whole histories):      {statistics.median(ranking):8.2f} s")
    print(
        f"bulk recommend, end to end (load, rank, write): {statistics.median(total):8.2f} s "
        f"({size_mib:.1f} MiB Parquet)"
    )
    verdict = "PASS" if statistics.median(total) < TARGET_SECONDS else "FAIL"
    print(f"{verdict}  end to end under {TARGET_SECONDS:.0f} s")
    object_api(args.run, args.repeats)


def object_api(run_dir: Path, repeats: int, count: int = 1000) -> None:
    """1,000 users in one ``Recommender.recommend`` call, and the same lists as ``recommend``."""
    start = time.perf_counter()
    model = Recommender.load(run_dir)
    load_seconds = time.perf_counter() - start
    users = [str(u) for u in model._loaded().user_ids[:count]]
    model.recommend(users=users[:10], k=10)  # warm-up
    seconds = median_seconds(lambda: model.recommend(users=users, k=10), repeats)
    table = model.recommend(users=users, k=10)
    sample = users[:: max(1, len(users) // 20)]
    same = all(
        table.filter(pl.col("query") == user)["item"].to_list()
        == [str(i) for i in recommend(run_dir, user=user, k=10)]
        for user in sample
    )
    print(f"object API: load {load_seconds:.2f} s, recommend {len(users)} users: {seconds:.3f} s")
    print(f"{'PASS' if seconds < 1.0 else 'FAIL'}  {len(users)} users under 1 s after the load")
    print(f"{'PASS' if same else 'FAIL'}  the same lists as recommend() for {len(sample)} users")


if __name__ == "__main__":
    main()
