"""The prequential stream protocol (``attnsvm stream``): PI-Transformer with and without replay
against SASRec+ trained online on the same stream, on ML-100K and yoochoose-100k, over seeds.

    python benchmarks/streaming.py --out runs/streaming                  # the full table
    python benchmarks/streaming.py --out /tmp/s --seeds 0 --max-events 3200 --datasets ml-100k

Every run is one ``run_stream`` run directory, ``OUT/{dataset}/{arm}-s{seed}``, on the whole
stream (global time order, chunks of ``--chunk`` events, each predicted with full ranking over
the items seen so far before its one AdamW step; the ``StreamSettings`` defaults otherwise).
Arms: ``pi-transformer`` and ``sasrec+`` at R = 0 and R = ``--replay`` replay streams (the
PI-Transformer with its Transformer-XL memory). The table gives each arm's prequential HR@10,
NDCG@10 and log-loss (mean ± sd over the seeds) and its throughput in events per second (the
stream's events over the seconds of predicting and learning, data loading excluded).
``OUT/summary.md`` and ``summary.json`` hold it. Finished runs are reused, so an interrupted
benchmark continues (an ``*.incomplete`` run is resumed where it saved its state).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from attnsvm._atomic import write_json, write_text
from attnsvm.rec.stream import StreamConfig, resume_stream, run_stream

ROOT = Path(__file__).resolve().parents[2] / "shared" / "data"
METRICS = ("HR@10", "NDCG@10", "log_loss", "events_per_second")


def arms(replay: int) -> dict[str, tuple[str, int]]:
    return {
        "pi-transformer R=0": ("pi-transformer", 0),
        f"pi-transformer R={replay}": ("pi-transformer", replay),
        "sasrec+ R=0": ("sasrec+", 0),
        f"sasrec+ R={replay}": ("sasrec+", replay),
    }


def one_run(args, dataset: str, arm: str, model: str, replay: int, seed: int) -> dict:
    folder = args.out / dataset / f"{arm.replace(' ', '-').replace('=', '')}-s{seed}"
    if (folder / "metrics.json").is_file():
        return json.loads((folder / "metrics.json").read_text())
    if folder.with_name(folder.name + ".incomplete").is_dir():
        return resume_stream(folder)
    settings = [
        f"data.dataset={dataset}",
        f"data.root={args.root}",
        f"stream.chunk_size={args.chunk}",
        f"stream.replay_streams={replay}",
        f"stream.seed={seed}",
        f"stream.max_events={args.max_events}",
    ]
    return run_stream(StreamConfig(model=model).with_settings(settings), folder)


def table(results: dict) -> str:
    lines = [
        "| stream | arm | seeds | HR@10 | NDCG@10 | log-loss | events/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for dataset, by_arm in results.items():
        for arm, runs in by_arm.items():
            cells = []
            for name in METRICS:
                values = [run[name] for run in runs]
                spread = statistics.stdev(values) if len(values) > 1 else 0.0
                digits = 0 if name == "events_per_second" else 4
                cells.append(f"{statistics.mean(values):.{digits}f} ± {spread:.{digits}f}")
            lines.append(f"| {dataset} | {arm} | {len(runs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="benchmark folder")
    parser.add_argument("--root", type=Path, default=ROOT, help="folder of raw datasets")
    parser.add_argument("--datasets", nargs="+", default=["ml-100k", "yoochoose-100k"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--replay", type=int, default=2, help="R of the replay arms")
    parser.add_argument("--chunk", type=int, default=64, help="events per chunk")
    parser.add_argument("--max-events", type=int, default=0, help="0: the whole stream")
    parser.add_argument("--arms", nargs="*", help="only these arms (default: all four)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    results: dict[str, dict[str, list[dict]]] = {}
    for dataset in args.datasets:
        for arm, (model, replay) in arms(args.replay).items():
            if args.arms and arm not in args.arms:
                continue
            for seed in args.seeds:
                metrics = one_run(args, dataset, arm, model, replay, seed)
                results.setdefault(dataset, {}).setdefault(arm, []).append(metrics)
                print(dataset, arm, seed, {k: metrics[k] for k in METRICS}, flush=True)
    summary = table(results)
    write_text(args.out / "summary.md", summary)
    write_json(args.out / "summary.json", results)
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
