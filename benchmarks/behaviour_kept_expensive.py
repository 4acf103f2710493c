"""Do issue 33's cheaper paths keep what ADT, MrTransformer, BiCAT and SMM learn? Fixed-seed
short runs before and after, in one run (``behaviour_kept.py``'s method, for these four).

Data: the first 2,000 users of S3-Beauty (leave-one-out, full ranking), written into a temporary
folder. Each case trains with seed 0 for 2 epochs of 8 steps (batch 64, window 50, d = 32, one
thread), once with ``src/`` of ``--before`` and once with this tree, each in a fresh
interpreter, and the test metrics of both are printed with the largest difference:

- ``adt``: the ``adt-ml-1m`` λ, one length group (the official window means);
- ``mrtransformer``: its recipe, swap pre-training then CE + coverage fine-tuning;
- ``bicat``: its recipe, reverse pre-training, generation, KL fine-tuning, at its own dropout
  (0.7): the changed generation is exact and changes no random draw, so the whole run repeats;
- ``smm``: CE at the mask token.

ADT, MrTransformer and SMM now compute on other shapes (rows in length groups, the last layer at
one query), so their dropout masks are other draws of the same distribution: they run with
dropout 0, where the two trees compute the same function and a difference is float rounding.
The script fails (exit 1) if any metric differs by more than ``--tolerance``.

    .venv/bin/python benchmarks/behaviour_kept_expensive.py --before 1c0625d
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from reference import behaviour_kept
from staged_common import ROOT, dataset

CASES = ("adt", "mrtransformer", "bicat", "smm")
SMALL = {"hidden_size": 32, "ffn_size": 32, "num_heads": 2}
OFF = {"dropout": 0.0, "attention_dropout": 0.0}
BUDGET = {"epochs": 2, "steps_per_epoch": 8, "batch_size": 64, "seed": 0, "num_threads": 1}
RUNS = {
    "adt": ("adt-ml-1m", {**SMALL, **OFF}, {"length_groups": 1}),
    "smm": ("smm", {**SMALL, **OFF}, {}),
}
RECIPES = {
    "mrtransformer": [
        *(f"model.{k}={v}" for k, v in {**SMALL, **OFF}.items()),
        "model.pair_neighbours=5",
        "train.warmup_steps=0",
    ],
    "bicat": [f"model.{k}={v}" for k, v in SMALL.items()],
}

SNIPPET = """
import json, tempfile
from pathlib import Path
from attnsvm.rec.config import RunConfig
from attnsvm.rec.train.recipe import run_recipe
from attnsvm.rec.train.trainer import train
case, data, runs, recipes, budget = {case!r}, {data!r}, {runs!r}, {recipes!r}, {budget!r}
with tempfile.TemporaryDirectory() as folder:
    if case in recipes:
        settings = [*recipes[case], "data.max_len=50"]
        settings += [f"train.{{k}}={{v}}" for k, v in budget.items()]
        result = run_recipe(case, Path(folder) / "run", data, None, settings, show_progress=False)
        test = result.test
    else:
        model, overrides, train_options = runs[case]
        config = {{
            "model": {{"name": model, **overrides}},
            "data": {{"dataset": data, "max_len": 50}},
            "train": {{**budget, **train_options}},
        }}
        result = train(RunConfig.from_dict(config), folder + "/run", show_progress=False)
        test = json.load(open(str(result.run_dir) + "/metrics.json"))["test"]
print(json.dumps(test))
"""


def printed(metric: str) -> bool:
    """The metrics the table shows (all of them are compared)."""
    return metric.endswith("@10")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default="HEAD", help="git commit to compare against")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--tolerance", type=float, default=1e-6)
    args = parser.parse_args()
    if not (ROOT / "amazon-beauty").is_dir():
        print(f"needs {ROOT / 'amazon-beauty'}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        data = dataset("beauty", ROOT, Path(folder), users=2000)[0]
        snippets = {
            case: SNIPPET.format(case=case, data=data, runs=RUNS, recipes=RECIPES, budget=BUDGET)
            for case in args.cases
        }
        return behaviour_kept(args.before, Path(folder), snippets, printed, args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
