"""What the expensive seed models' training steps cost beside SASRec+'s, before and after issue
33's changes to ADT, MrTransformer, BiCAT and SMM.

Cases, each the setting whose epoch the issue measured (``staged_cost.py``, ``sessions.py``):

- ``sasrec+``: SASRec+ on S3-Beauty (K&V settings, full CE, batch 128), the reference of the
  Beauty rows; ``adt``: the ``adt-beauty`` preset, batch 256, one length group (the official
  window means); ``bicat-pretrain``, ``bicat-finetune``, ``mrtransformer-pretrain``,
  ``mrtransformer-finetune``: the stages of the ``bicat`` and ``mrtransformer`` recipes (the
  fine-tunings from fresh weights: the weights do not change a step's cost; BiCAT's on a
  generation of this tree from fresh pre-training weights);
- ``bicat-generation``: seconds of the whole generation of a run (no-leak, the recipe's 20 items
  below 20), from ``--generation-users`` users chosen at random, scaled to every user;
- ``sasrec+diginetica``, ``smm``: ``sessions.py``'s settings on Diginetica (batch 256, window 20).

Each step figure is the median ms of one full trainer step (``TrainingLoop.train_step``:
forward, main loss, auxiliary terms, backward, AdamW) over ``--steps`` batches after two warm-up
steps, one thread, the cases' steps taken in turns (a change of load reaches them alike); an
epoch is that times the steps of an epoch, and its ratio is to SASRec+'s epoch on the same
data, measured in the same process. "before" measures with ``src/`` of
``--before`` (a git commit, ``reference.py``) in a fresh interpreter, "after" with this tree in
another; ``--profile`` adds where this tree's step spends its time, part by part and by torch
operator.

    .venv/bin/python benchmarks/expensive_step.py --before 1c0625d    # the commit before part 2
    .venv/bin/python benchmarks/expensive_step.py --cases adt smm --steps 4 --profile
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import conditions
from reference import THIS_TREE, checkout, describe, run_snippet

BENCHMARKS = Path(__file__).resolve().parent
BEAUTY = ("adt", "bicat-pretrain", "bicat-finetune", "mrtransformer-pretrain")
BEAUTY += ("mrtransformer-finetune",)
CASES = ("sasrec+", *BEAUTY, "bicat-generation", "sasrec+diginetica", "smm")

SNIPPET = """
import json, sys
sys.path.insert(0, {benchmarks!r})
import expensive_cases
print(json.dumps(expensive_cases.measure({cases!r}, {steps}, {users}, {work!r})))
"""


def measure_tree(src: Path, cases: list[str], steps: int, users: int, work: Path) -> dict:
    code = SNIPPET.format(
        benchmarks=str(BENCHMARKS), cases=cases, steps=steps, users=users, work=str(work)
    )
    return run_snippet(code, src, env={"OMP_NUM_THREADS": "1"})


def reference_of(case: str) -> str | None:
    if case == "bicat-generation":
        return None
    return "sasrec+diginetica" if case in ("smm", "sasrec+diginetica") else "sasrec+"


def table(before: dict | None, after: dict, cases: list[str]) -> str:
    """One row per case: ms per step before and after, the speed-up, and the epoch's ratio to
    SASRec+'s on the same data (a generation: its seconds against SASRec+'s epoch)."""
    lines = [
        "| case | ms / step before | ms / step after | speed-up | steps / epoch "
        "| s / epoch after | × SASRec+ epoch before | × SASRec+ epoch after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case in cases:
        now, then = after[case], (before or {}).get(case)
        reference = reference_of(case)
        key = "epoch" if reference else "seconds"
        reference = reference or "sasrec+"
        ratio = now[key] / after[reference]["epoch"]
        ratio_before = "—" if then is None else f"{then[key] / before[reference]['epoch']:.2f}"
        if key == "seconds":  # a whole generation, in seconds
            cells = [f"{case} (a whole run)", _cell(then, "seconds", " s")]
            cells += [f"{now['seconds']:.0f} s", _speedup(then, now, "seconds"), "—"]
            cells.append(f"{now['seconds']:.0f}")
        else:
            cells = [case, _cell(then, "ms"), f"{now['ms']:.0f}", _speedup(then, now, "ms")]
            cells += [str(now["steps"]), f"{now['epoch']:.0f}"]
        lines.append("| " + " | ".join([*cells, ratio_before, f"{ratio:.2f}"]) + " |")
    return "\n".join(lines)


def _cell(values: dict | None, key: str, unit: str = "") -> str:
    return "—" if values is None else f"{values[key]:.0f}{unit}"


def _speedup(then: dict | None, now: dict, key: str) -> str:
    return "—" if then is None else f"{then[key] / now[key]:.1f}x"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--generation-users", type=int, default=1024)
    parser.add_argument("--before", help="a git commit to measure too (default: this tree only)")
    parser.add_argument("--profile", action="store_true", help="this tree's step, part by part")
    args = parser.parse_args(argv)
    conditions.report()
    cases = list(dict.fromkeys(["sasrec+", *args.cases]))
    if "smm" in cases:
        cases.insert(cases.index("smm"), "sasrec+diginetica")
        cases = list(dict.fromkeys(cases))
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        after = measure_tree(THIS_TREE, cases, args.steps, args.generation_users, work)
        before = None
        if args.before:
            src = checkout(args.before, work / "before")
            before = measure_tree(src, cases, args.steps, args.generation_users, work)
        if args.profile:
            import expensive_cases

            print(expensive_cases.profile(cases, work))
    print(f"\nbefore: {describe(args.before) if args.before else '—'}; after: this tree")
    print(f"median of {args.steps} steps, 1 thread\n")
    print(table(before, after, cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
