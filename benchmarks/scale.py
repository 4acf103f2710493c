"""Scale benchmark: a synthetic shop-like log of N events over M items, prepared, trained for one
epoch and evaluated on every user over every item; each stage's time, peak memory (RSS) and
throughput, with the loss it trained.

The log (``generate_log``, written once as Parquet into the work folder, which must lie outside
the repository, and reused while its sizes and seed are the same):

- item popularity follows a power law (Zipf, exponent ``POPULARITY_EXPONENT``), the ids shuffled
  so that an id says nothing about its popularity;
- users have lognormal history lengths (mean ``MEAN_HISTORY`` events, at least 3, so every user
  has training, validation and test events);
- sequential structure: every item has ``SUCCESSORS`` successors drawn by popularity, and an
  event follows one of its predecessor's successors with probability ``FOLLOW`` (otherwise it
  is drawn by popularity); times rise by exponential gaps from a random start per user.

Stages, each with its own peak RSS (Linux: the process's high-water mark is reset between them):

- **prepare**: the Parquet file read and stored as a dataset of its own (``prepare_frame``);
- **train**: one epoch over every user's training window (``train()``; the epoch's validation,
  a user sample once users × items passes ``eval.valid_max_scores``, is timed apart);
- **test**: the final evaluation inside ``train()``: every test user ranked over every item,
  the run's results written.

Full size (issue 35's targets: prepare ≤ 30 s, the epoch ≤ 20 min, the test ≤ 5 min, peak
memory ≤ 16 GB; run it on a quiet machine, ``uptime`` below 0.2, nothing else running):

    .venv/bin/python benchmarks/scale.py --work /tmp/attnsvm-scale --json /tmp/scale.json

Smaller logs: ``--events 1000000 --items 100000``; the CI size, which
``tests/rec/test_scale_small.py`` runs: ``--events 20000 --items 5000``. Other losses:
``--loss ce --ce-item-chunk 8192``, ``--negatives shared --sampler popularity``,
``--num-negatives 4096``; ``--threads 1`` for per-thread figures.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import conditions

REPOSITORY = Path(__file__).resolve().parents[1]
POPULARITY_EXPONENT = 0.8  # flat enough that most of a million items occur in 10 M events
MEAN_HISTORY = 50
SUCCESSORS = 8
FOLLOW = 0.5
COLUMNS = {"user": "user", "item": "item", "time": "time"}


def generate_log(events: int, items: int, users: int, seed: int):
    """The synthetic log as a polars DataFrame (``user``, ``item``, ``time``: Unix seconds),
    ordered by time as a shop's export would be (see the module docstring)."""
    import polars as pl

    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, items + 1) ** POPULARITY_EXPONENT
    cdf = np.cumsum(weights) / weights.sum()
    by_rank = rng.permutation(items) + 1  # the id of the item at each popularity rank

    def popular(count: int) -> np.ndarray:
        ranks = np.minimum(np.searchsorted(cdf, rng.random(count), side="right"), items - 1)
        return by_rank[ranks]

    successors = popular((items + 1) * SUCCESSORS).reshape(items + 1, SUCCESSORS)
    lengths = history_lengths(events, users, rng)
    first = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    item = np.empty(events, dtype=np.int64)
    item[first] = popular(users)
    active = np.arange(users)
    for position in range(1, int(lengths.max())):  # every user's next event needs its last
        active = active[lengths[active] > position]
        at = first[active] + position
        successor = successors[item[at - 1], rng.integers(0, SUCCESSORS, active.size)]
        follows = rng.random(active.size) < FOLLOW
        item[at] = np.where(follows, successor, popular(active.size))
    gaps = rng.exponential(3600.0, size=events).astype(np.int64) + 1
    gaps[first] = 0
    elapsed = np.cumsum(gaps)
    begin = rng.integers(1_600_000_000, 1_630_000_000, size=users)
    when = np.repeat(begin - elapsed[first], lengths) + elapsed
    user = np.repeat(np.arange(users, dtype=np.int64), lengths)
    order = np.argsort(when, kind="stable")
    return pl.DataFrame({"user": user[order], "item": item[order], "time": when[order]})


def history_lengths(events: int, users: int, rng: np.random.Generator) -> np.ndarray:
    """Lognormal lengths (σ = 1), each at least 3, summing to ``events`` exactly."""
    raw = rng.lognormal(0.0, 1.0, size=users)
    lengths = np.maximum(3, np.floor(raw / raw.sum() * events)).astype(np.int64)
    while lengths.sum() != events:
        surplus = int(lengths.sum()) - events
        if surplus < 0:  # the floors: add one event to that many random users
            np.add.at(lengths, rng.integers(0, users, size=-surplus), 1)
        else:  # the minimum of 3: take one from each of the longest histories
            longest = np.argsort(-lengths, kind="stable")[: min(surplus, users)]
            lengths[longest[lengths[longest] > 3]] -= 1
    return lengths


# -- measuring ----------------------------------------------------------------------------------


def reset_peak_memory() -> None:
    """Restart the process's resident-memory high-water mark (Linux ``clear_refs``)."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_memory() -> int:
    """Bytes of the process's resident-memory high-water mark since the last reset."""
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE).group(1)) * 1024


@dataclass
class Stage:
    name: str
    seconds: float
    peak_bytes: int | None  # None: measured with the stage before it
    throughput: str
    details: dict = field(default_factory=dict)

    def line(self) -> str:
        peak = (
            "with the epoch" if self.peak_bytes is None else f"{self.peak_bytes / 2**30:,.2f} GiB"
        )
        return f"| {self.name} | {self.seconds:,.1f} s | {peak} | {self.throughput} |"


class EpochEnd:
    """A trainer callback: the epoch's peak memory, and the moment the final test starts."""

    def __init__(self) -> None:
        self.epoch_peak = 0
        self.test_start = 0.0

    def on_epoch_end(self, state) -> None:
        self.epoch_peak = peak_memory()
        reset_peak_memory()
        self.test_start = time.perf_counter()


def run_config(args: argparse.Namespace, dataset: Path):
    from attnsvm.rec.config import DataConfig, EvalConfig, ModelChoice, RunConfig, TrainConfig
    from attnsvm.rec.models import LossConfig

    sampled = args.loss != "ce"
    loss = LossConfig(
        name=args.loss,
        num_negatives=args.num_negatives if sampled else 1,
        negatives=args.negatives if sampled else "per_position",
        sampler=args.sampler,
        logq_correction=args.logq and sampled,
        ce_item_chunk=args.ce_item_chunk,
    )
    return RunConfig(
        model=ModelChoice(args.model, {"hidden_size": args.hidden}),
        data=DataConfig(dataset=str(dataset), max_len=args.max_len),
        loss=loss,
        train=TrainConfig(
            epochs=1,
            batch_size=args.batch_size,
            keep="last",
            seed=args.seed,
            num_threads=args.threads,
        ),
        eval=EvalConfig(ks=(1, 10, 20), batch_size=args.eval_batch_size),
    )


def run(args: argparse.Namespace) -> list[Stage]:
    """Generate (or reuse) the log, then prepare, train one epoch and test: the stages."""
    import polars as pl

    from attnsvm.rec.data import prepare_frame
    from attnsvm.rec.train import train

    work = args.work.resolve()
    if work.is_relative_to(REPOSITORY):
        raise SystemExit(f"--work {work} lies inside the repository; choose a folder outside it")
    work.mkdir(parents=True, exist_ok=True)
    users = args.users or max(1, args.events // MEAN_HISTORY)
    if args.events < 3 * users:
        raise SystemExit(f"--events {args.events} leaves some of the {users} users under 3 events")
    log = work / f"log-{args.events}-{args.items}-{users}-{args.seed}.parquet"
    if not log.exists():
        start = time.perf_counter()
        partial = log.with_suffix(".partial")
        generate_log(args.events, args.items, users, args.seed).write_parquet(partial)
        partial.replace(log)
        print(f"generated {log} in {time.perf_counter() - start:,.1f} s", flush=True)

    reset_peak_memory()
    start = time.perf_counter()
    dataset = prepare_frame(
        "scale", pl.read_parquet(log), COLUMNS, cache_dir=work / "cache", force=True
    )
    seconds = time.perf_counter() - start
    prepare = Stage("prepare", seconds, peak_memory(), f"{args.events / seconds:,.0f} events/s")

    config = run_config(args, dataset)
    run_dir = work / "run"
    for previous in (run_dir, run_dir.with_name("run.incomplete")):
        shutil.rmtree(previous, ignore_errors=True)  # this benchmark's own earlier run
    epoch_end = EpochEnd()
    reset_peak_memory()
    result = train(config, run_dir, [epoch_end], show_progress=args.progress)
    test_seconds = time.perf_counter() - epoch_end.test_start
    test_peak = peak_memory()
    record = json.loads((result.run_dir / "log.jsonl").read_text().splitlines()[-1])
    test_users = json.loads((result.run_dir / "test_eval.json").read_text())["num_users"]
    catalogue = json.loads((result.run_dir / "model.json").read_text())["num_items"]
    valid_users = record.get("valid_users", test_users)  # leave-one-out: one row a user
    return [
        prepare,
        Stage(
            "train, one epoch",
            record["train_seconds"],
            epoch_end.epoch_peak,
            f"{record['samples_per_second']:,.1f} sequences/s ({record['step']:,} steps, "
            f"{record['threads']} threads)",
            {"loss": config.loss.to_dict(), "catalogue": catalogue, "users": test_users},
        ),
        Stage(
            "validation, in the epoch",
            record["valid_seconds"],
            None,
            f"{valid_users / record['valid_seconds']:,.0f} users/s ({valid_users:,} users)",
        ),
        Stage(
            "test, every user × every item",
            test_seconds,
            test_peak,
            f"{test_users / test_seconds:,.0f} users/s ({test_users:,} users)",
            {"test": result.test},
        ),
    ]


def main(argv: list[str] | None = None) -> list[Stage]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="a folder outside the repo")
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=None, help=f"default: events / {MEAN_HISTORY}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="sasrec+")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--max-len", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--eval-batch-size", type=int, default=512)
    parser.add_argument("--loss", default="sampled_softmax", help="ce, sampled_softmax, bce, gbce")
    parser.add_argument(
        "--negatives", default="mixed", help="per_position, shared, in_batch, mixed"
    )
    parser.add_argument("--num-negatives", type=int, default=1024)
    parser.add_argument("--sampler", default="uniform", help="uniform or popularity")
    parser.add_argument("--logq", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--ce-item-chunk", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None, help="default: the process policy")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--json", type=Path, default=None, help="also write the stages here")
    args = parser.parse_args(argv)

    info = conditions.report()
    stages = run(args)
    details = stages[1].details
    print(
        f"\n{args.events:,} events, {details['users']:,} users, {details['catalogue']:,} items; "
        f"{args.model} d={args.hidden}, loss {json.dumps(details['loss'])}"
    )
    print("| stage | time | peak RSS | throughput |\n|---|---|---|---|")
    for stage in stages:
        print(stage.line())
    print(f"test metrics: {json.dumps(stages[-1].details['test'])}")
    info["load_at_end"] = conditions.load()
    print(f"- load average at end: {info['load_at_end']:.2f}")
    if args.json is not None:
        rows = [stage.__dict__ for stage in stages]
        args.json.write_text(json.dumps({"conditions": info, "stages": rows}, indent=1) + "\n")
    return stages


if __name__ == "__main__":
    main()
