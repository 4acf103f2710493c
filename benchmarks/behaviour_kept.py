"""Does a change keep training's results? Fixed-seed short runs before and after, in one run.

Trains ``sasrec+``, ``bert4rec``, the every-prefix models (``bsarec``, ``adamct``, ``matrrec``,
``actsr``), ``srt`` (its items from ML-100K's titles and genres) and the ``vstan`` baseline on
ML-100K (leave-one-out, full ranking) with a fixed seed and a short budget (2 epochs of 8 steps,
window 50), once with the package as it was at ``--before`` (a git commit, extracted by
``reference.checkout``) and once with this working tree, each in a fresh interpreter, and prints
every test metric of both with the largest difference.
It fails (exit 1) if any differs by more than ``--tolerance``.

The every-prefix models and SRT run without dropout (``NO_DROPOUT``): since issue 33 their step
computes the last layer for the last query alone (AdaMCT: each length group at its own width),
so with dropout the same seed draws masks of other shapes (equal in distribution, not in value);
without it, before and after are the same function and differ by float rounding only.

    .venv/bin/python benchmarks/behaviour_kept.py --before cd21b93

Needs ``../shared/data/ml-100k``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from reference import behaviour_kept

ROOT = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
MODELS = ("sasrec+", "bert4rec", "bsarec", "adamct", "matrrec", "actsr", "srt", "vstan")
NO_DROPOUT = ("bsarec", "adamct", "matrrec", "actsr", "srt")

SNIPPET = """
import json, sys, tempfile
from attnsvm.rec.config import RunConfig
from attnsvm.rec.train.trainer import train
name, root, no_dropout = {name!r}, {root!r}, {no_dropout!r}
data = {{"model": {{"name": name}}, "data": {{"dataset": "ml-100k", "root": root}}}}
if name != "vstan":
    data["model"].update({{"hidden_size": 32, "ffn_size": 32}})
if name == "srt":
    data["model"].update({{"features_dataset": "ml-100k", "features_root": root}})
if no_dropout:
    data["model"].update({{"dropout": 0.0, "attention_dropout": 0.0}})
data["data"]["max_len"] = 50
data["train"] = {{"epochs": 2, "steps_per_epoch": 8, "batch_size": 64, "seed": 0,
                 "num_threads": 1}}
with tempfile.TemporaryDirectory() as folder:
    result = train(RunConfig.from_dict(data), folder + "/run", show_progress=False)
    print(json.dumps(json.load(open(str(result.run_dir) + "/metrics.json"))["test"]))
"""


def printed(metric: str) -> bool:
    """The metrics the table shows (all of them are compared)."""
    return metric.endswith("@10") or metric.startswith("HR@1")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default="HEAD", help="git commit to compare against")
    parser.add_argument("--tolerance", type=float, default=1e-6)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    args = parser.parse_args()
    if not (ROOT / "ml-100k").is_dir():
        print(f"needs {ROOT / 'ml-100k'}", file=sys.stderr)
        return 2
    snippets = {
        name: SNIPPET.format(name=name, root=str(ROOT), no_dropout=name in NO_DROPOUT)
        for name in args.models
    }
    with tempfile.TemporaryDirectory() as folder:
        return behaviour_kept(args.before, Path(folder), snippets, printed, args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
