"""MrTransformer's partner search (``pairs.nearest_examples``) before and after the search by
rows, on the training windows its recipe's pre-training searches, in one run.

Each tree searches in a fresh interpreter with ``attnsvm`` from its own ``src/``
(``reference.py``), one thread: every training window's ``pair_neighbours`` nearest windows
(window and neighbours of the recipe's pre-training stage, at the zoo's window, as
``epoch_cases.py`` sets it). "After" is this tree, searched whole; "before" is ``src/`` of
``--before`` (default ``05129ac``, the last commit with the sparse product alone), searched
whole on the datasets of ``--whole-before`` and otherwise estimated the way the epoch table
estimates it (``epoch_cases.partner_search``: the search timed on random windows, scaled by the
whole product's terms, which that search's cost follows). Where both trees searched whole,
their neighbours must be identical; this tree's are also checked, for ``--check`` random
windows, against an exhaustive search (every window's distance from one product).

    .venv/bin/python benchmarks/partner_search.py                     # S3-Beauty and ML-1M
    .venv/bin/python benchmarks/partner_search.py --datasets beauty

A timing is a claim only from a quiet machine: the load is printed before and after each part.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

import conditions
from reference import THIS_TREE, checkout, describe, run_snippet

BENCHMARKS = Path(__file__).resolve().parent

SNIPPET = """
import json, sys, time
import numpy as np
import torch
torch.set_num_threads(1)
sys.path.insert(0, {benchmarks!r})
from pathlib import Path
import epoch_cases
from attnsvm.rec.data.batches import make_examples
from attnsvm.rec.data.pairs import nearest_examples, window_sets
from attnsvm.rec.data.transforms import training_rows
from attnsvm.rec.train.scoring import build
work = Path({work!r})
config = epoch_cases.config_of("mrtransformer-pretrain", {dataset!r}, work)
split = epoch_cases.split_of(config.data)
model = build(config, split.num_items)
rows = training_rows(split, config.data)
examples = make_examples(rows, model.objective)
window, neighbours = model.config.max_len, model.config.pair_neighbours
out = {{"windows": len(examples), "window": window, "neighbours": neighbours}}
if {whole!r}:
    start, wall = time.process_time(), time.perf_counter()
    found = nearest_examples(rows, examples, window, split.num_items, neighbours)
    out.update(seconds=time.process_time() - start, wall=time.perf_counter() - wall)
    np.save(work / "found.npy", found)
    sets = window_sets(rows, examples, window, split.num_items)
    sizes = np.diff(sets.indptr)
    chosen = np.random.default_rng(0).choice(len(examples), {check!r}, replace=False)
    shared = np.asarray(sets @ sets[chosen].T.toarray().astype(np.float32)).astype(np.int64)
    exhaustive = [
        np.lexsort((np.arange(len(sizes)), sizes[q] + sizes - 2 * shared[:, c]))[:neighbours]
        for c, q in enumerate(chosen)
    ]
    out["checked"] = len(chosen)
    differ = [not np.array_equal(e, found[q]) for e, q in zip(exhaustive, chosen)]
    out["mismatched"] = int(sum(differ))
else:
    out["estimated"] = epoch_cases.partner_search(config, split).seconds
print(json.dumps(out))
"""


def search(src: Path, dataset: str, whole: bool, work: Path, check: int = 0) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    code = SNIPPET.format(
        benchmarks=str(BENCHMARKS), work=str(work), dataset=dataset, whole=whole, check=check
    )
    with conditions.OtherWork() as other:
        result = run_snippet(code, src, env={"OMP_NUM_THREADS": "1"})
    tree = "this tree" if src == THIS_TREE else "before"
    print(f"{dataset}, {tree}: other cores busy {other.cores:.1f}, load {conditions.load():.2f}")
    return result


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["beauty", "ml-1m"])
    parser.add_argument("--before", default="05129ac")
    parser.add_argument("--whole-before", nargs="*", default=["beauty"])
    parser.add_argument("--check", type=int, default=100, help="windows checked exhaustively")
    args = parser.parse_args()
    print(f"load {conditions.load():.2f} at the start; before: {describe(args.before)}")
    scratch = Path(tempfile.mkdtemp(prefix="partner-search-"))
    before_src = checkout(args.before, scratch / "before")
    rows = []
    for dataset in args.datasets:
        after = search(THIS_TREE, dataset, True, scratch / dataset / "after", args.check)
        print(
            f"{dataset}: {after['mismatched']} of {after['checked']} windows differ from the "
            "exhaustive search"
        )
        whole = dataset in args.whole_before
        before = search(before_src, dataset, whole, scratch / dataset / "before")
        if whole:
            same = np.array_equal(
                np.load(scratch / dataset / "after" / "found.npy"),
                np.load(scratch / dataset / "before" / "found.npy"),
            )
            then = duration(before["seconds"])
            identical = "yes" if same else "**no**"
        else:
            then, identical = f"≈ {duration(before['estimated'])} (estimated)", "—"
        speed_up = before.get("seconds", before.get("estimated")) / after["seconds"]
        rows.append(
            f"| {dataset} | {after['windows']:,} | {after['window']} | {after['neighbours']} "
            f"| {then} | {duration(after['seconds'])} | {speed_up:,.0f}× | {identical} |"
        )
    print(f"load {conditions.load():.2f} at the end\n")
    print(
        "| dataset | windows | window | neighbours | before (CPU) | after (CPU) | speed-up "
        "| identical |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
