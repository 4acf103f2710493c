"""Seconds per training epoch of each of the twenty seed papers' systems on S3-Beauty and ML-1M,
next to SASRec+'s, before and after issue 33's speed-ups, in one run (issue 33's table).

Each row (``epoch_cases.ROWS``) trains as the zoo trains it: the zoo's "paper" setting
(``zoo.run_config``: batch, loss, window), SAM as SASRec+'s zoo setting with
``train.optimizer = "sam"``, BERT4Rec in K&V's setting at the zoo's window, BiCAT's and
MrTransformer's recipe stages at the zoo's window, BiCAT's generation as the seconds of a whole
run (from ``--generation-users`` random users, scaled to every user). SASRec+'s zoo setting is
the reference on each dataset. Rows that cannot train on the data or have no epoch (time-aware
models without timestamps, rating-reading and stream-only systems, SMM's session setting) are
listed as n/a with their reason, and so is MrTransformer's pre-training where the search of
each training window's nearest windows, which a run does once before its first epoch, is
estimated above 15 minutes (ML-1M: days); where it runs, its time is printed beside the table.

Each step figure is the median ms of one full trainer step (``TrainingLoop.train_step``:
forward, loss, auxiliary terms, backward, optimiser; AC-TSR's attack step and SAM's second pass
included) over ``--steps`` batches of the epoch-1 order after two warm-up steps, one thread, the
rows' steps taken in turns; an epoch is that times the steps of an epoch (training examples /
batch), and its ratio is to SASRec+'s epoch on the same data, measured in the same process.
"after" is this tree, "before" ``src/`` of ``--before`` (default ``aef8c5e^``: the commit
before issue 33's first speed-up), each in a fresh interpreter per dataset (``reference.py``),
this tree first (BiCAT's fine-tuning reads a generation it writes, shared with "before").

    .venv/bin/python benchmarks/epoch_table.py       # the full table: about half an hour
    .venv/bin/python benchmarks/epoch_table.py --systems sasrec+ bsarec --datasets beauty --steps 1
    .venv/bin/python benchmarks/epoch_table.py --systems bicat --no-before   # a group of rows

``--systems`` takes row names (``epoch_cases.ROWS``) or ``bicat`` / ``mrtransformer`` for their
rows; SASRec+ is always measured. A row that fails prints its error in its cells; a "before"
that fails (an interface the old tree lacks) is "—" with a numbered footnote.

The figures are claims only from a quiet machine (load average below the cores for the whole
run; the load is printed at the start and the end, and the other cores' work per part):
otherwise the milliseconds are inflated and only the same-process ratios compare.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import conditions
from epoch_cases import DATASETS, ROWS, duration
from reference import THIS_TREE, checkout, describe, run_snippet

BENCHMARKS = Path(__file__).resolve().parent
DEFAULT_BEFORE = "aef8c5e^"
#: names that stand for several rows
GROUPS = {
    "bicat": ["bicat-pretrain", "bicat-finetune", "bicat-generation"],
    "mrtransformer": ["mrtransformer-pretrain", "mrtransformer-finetune"],
}
NO_EPOCH_NOTE = (
    'The kNN baselines of the "Transformers, kNN, sampled metrics" paper (sknn, vsknn, vstan) '
    "are fitted once, with no epochs: BERT4Rec is that paper's row."
)

SNIPPET = """
import json, sys
sys.path.insert(0, {benchmarks!r})
import epoch_cases
print(json.dumps(epoch_cases.measure({dataset!r}, {names!r}, {steps}, {users}, {work!r})))
"""


def measure_tree(
    src: Path, dataset: str, names: list[str], args: argparse.Namespace, work: Path
) -> dict:
    """Every row on ``dataset`` with ``attnsvm`` from ``src``, in a fresh interpreter; a whole
    failure (the interpreter died) is every row's error."""
    code = SNIPPET.format(
        benchmarks=str(BENCHMARKS),
        dataset=dataset,
        names=names,
        steps=args.steps,
        users=args.generation_users,
        work=str(work),
    )
    start = time.perf_counter()
    with conditions.OtherWork() as other:
        try:
            result = run_snippet(code, src, env={"OMP_NUM_THREADS": "1"})
        except (RuntimeError, ValueError, IndexError) as error:  # died, or printed no JSON
            last = [line for line in str(error).splitlines() if line.strip()][-1]
            result = {name: {"error": f"the interpreter failed: {last[:160]}"} for name in names}
    tree = "this tree" if src == THIS_TREE else "before"
    print(
        f"{dataset}, {tree}: {time.perf_counter() - start:.0f} s, other cores busy "
        f"{other.cores:.1f}, load {conditions.load():.2f}",
        flush=True,
    )
    return result


class Footnotes:
    """Numbered reasons for the "—" before cells, one number per distinct reason."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def mark(self, reason: str) -> str:
        if reason not in self.reasons:
            self.reasons.append(reason)
        return f"—[{self.reasons.index(reason) + 1}]"

    def lines(self) -> list[str]:
        return [f"[{n}] before: {reason}" for n, reason in enumerate(self.reasons, start=1)]


def _pair(before: str | None, after: str) -> str:
    """``before → after``, or one value where both are the same."""
    return after if before is None or before == after else f"{before} → {after}"


def _seconds(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def _ratio(result: dict, reference: dict | None, key: str) -> str | None:
    if key not in result or not reference or "epoch" not in reference:
        return None
    return f"{result[key] / reference['epoch']:.2f}×"


def _arrow(then: str | None, now: str) -> str:
    """``then → now``; ``now`` alone where nothing was measured before."""
    return now if then is None else f"{then} → {now}"


def row_cells(before: dict | None, after: dict, refs: tuple, notes: Footnotes) -> list[str]:
    """The measured cells of one row: batch, steps, ms, s, × SASRec+'s epoch (before → after;
    ``before`` None: not measured; a before that failed: "—" with a footnote)."""
    key = "seconds" if "seconds" in after else "epoch"
    then: dict[str, str | None] = dict.fromkeys(("batch", "steps", "ms", "time", "ratio"))
    if before is not None and ("error" in before or key not in before):
        mark = notes.mark(before.get("error", "no figure"))
        then.update(ms=mark, time=mark, ratio=mark)
    elif before is not None:
        then.update(
            batch=str(before.get("batch", "—")),
            steps=str(before.get("steps", "—")),
            ms=f"{before['ms']:.0f}" if "ms" in before else "—",
            time=_seconds(before[key]),
            ratio=_ratio(before, refs[0], key) or "—",
        )
    unit = " (a whole run)" if key == "seconds" else ""
    return [
        _pair(then["batch"], str(after.get("batch", "—"))),
        _pair(then["steps"], str(after.get("steps", "—"))),
        _arrow(then["ms"], f"{after['ms']:.0f}") if "ms" in after else "—",
        _arrow(then["time"], _seconds(after[key]) + unit),
        _arrow(then["ratio"], _ratio(after, refs[1], key) or "—"),
    ]


def table(results: dict, names: list[str], datasets: list[str], before_run: bool) -> str:
    """The markdown table, then the n/a rows with their reasons and the footnotes."""
    notes = Footnotes()
    pair = " before → after" if before_run else ""
    lines = [
        f"| paper | system / row | dataset | batch | steps / epoch | ms / step{pair} "
        f"| s / epoch{pair} | × SASRec+'s epoch{pair} |",
        "|---|---|---|---|---|---|---|---|",
    ]
    unavailable, once = [], []
    for dataset in datasets:
        before, after = results[dataset].get("before"), results[dataset]["after"]
        refs = ((before or {}).get("sasrec+"), after.get("sasrec+"))
        for name in names:
            row, now = ROWS[name], after[name]
            head = [row.paper, row.label, DATASETS[dataset]]
            if "na" in now:
                unavailable.append(
                    f"- {row.paper}, `{row.label}`, {DATASETS[dataset]}: {now['na']}"
                )
                continue
            if "build_s" in now:  # a cost of the run, before its first epoch
                once.append(
                    f"- {row.paper}, `{row.label}`, {DATASETS[dataset]}: its loop, which "
                    "searches each training window's nearest windows once per run, took "
                    f"{duration(now['build_s'])} to build (this tree)"
                )
            if "error" in now:
                cells = ["—", "—", "—", f"failed: {now['error']}", "—"]
            else:
                then = (before or {}).get(name, {"error": "no result"}) if before_run else None
                cells = row_cells(then, now, refs, notes)
            lines.append("| " + " | ".join(head + cells) + " |")
    if unavailable:
        lines += ["", "n/a (no epoch to measure on that dataset):", "", *unavailable]
    if once:
        lines += ["", "Once per run, not in the epoch:", "", *once]
    lines += ["", NO_EPOCH_NOTE]
    if notes.reasons:
        lines += ["", *notes.lines()]
    return "\n".join(lines)


def chosen_rows(systems: list[str]) -> list[str]:
    """The rows asked for, SASRec+ first (the reference), in ``ROWS``' order."""
    wanted = {"sasrec+"}
    for system in systems:
        wanted.update(GROUPS.get(system, [system]))
    return [name for name in ROWS if name in wanted]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    choices = [*ROWS, *GROUPS]
    parser.add_argument("--systems", nargs="+", default=list(ROWS), choices=choices)
    parser.add_argument("--steps", type=int, default=5, help="timed steps a row (after 2 warm-ups)")
    parser.add_argument("--generation-users", type=int, default=1024, help="0: every user")
    parser.add_argument(
        "--before", default=DEFAULT_BEFORE, help="a git commit (default: %(default)s)"
    )
    parser.add_argument("--no-before", action="store_true", help="this tree only")
    args = parser.parse_args(argv)
    conditions.report()
    names = chosen_rows(args.systems)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        src = None if args.no_before else checkout(args.before, work / "before")
        for dataset in args.datasets:
            # this tree first: BiCAT's fine-tuning reads the generation it writes
            results[dataset] = {"after": measure_tree(THIS_TREE, dataset, names, args, work)}
            if src is not None:
                results[dataset]["before"] = measure_tree(src, dataset, names, args, work)
    print(f"- load average at end: {conditions.load():.2f}")
    before = "—" if args.no_before else describe(args.before)
    print(f"\nbefore: {before}; after: this tree; median of {args.steps} steps, 1 thread\n")
    print(table(results, names, args.datasets, not args.no_before))
    return 0


if __name__ == "__main__":
    sys.exit(main())
