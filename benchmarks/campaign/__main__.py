"""The reproduction campaign: paper claims as cells of at most 90 CPU-minutes, run in the
background at low priority, their results in ``benchmarks/results/campaign.csv``.

    python benchmarks/campaign run --cores 1 --budget 150m    # pending cells, cheapest first
    python benchmarks/campaign status                         # done / pending per claim
    python benchmarks/campaign report                         # table into RESULTS.md and the
                                                              # README, forest plot beside the CSV
    python benchmarks/campaign cell CLAIM SEED                # one cell in this process
    python benchmarks/campaign smoke --scratch /tmp/smoke     # every unmade arm, 2 steps each

``--work`` holds the arms' run folders and cached results (default ``runs/campaign``, ignored by
git); pause a running campaign with ``kill -STOP -PGID`` (each cell is its own process group)
while timings are taken elsewhere, and ``kill -CONT`` it after.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import signal
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the sibling scripts

from campaign import runner
from campaign.arms import SliceSpent

DEFAULT_WORK = runner.REPO / "runs" / "campaign"


def duration(text: str) -> float:
    """Seconds of ``90m``, ``2h``, ``1h30m`` or a bare number of minutes."""
    match = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m?)?", text.strip())
    if not text.strip() or match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 90m, 2h or 1h30m")
    hours, minutes = (float(g) if g else 0.0 for g in match.groups())
    return hours * 3600 + minutes * 60


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="campaign", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run pending cells under a budget")
    run.add_argument("--cores", type=int, default=1, help="cells at a time, one thread each")
    run.add_argument("--budget", type=duration, required=True, help="wall clock: 90m, 2h, …")
    cell = commands.add_parser("cell", help="run one cell here")
    cell.add_argument("claim")
    cell.add_argument("seed", type=int)
    listing = commands.add_parser("pending", help="the pending cells, in the order run takes")
    listing.add_argument("--json", action="store_true")
    commands.add_parser("status", help="finished and pending seeds per claim")
    report = commands.add_parser("report", help="write the table and the forest plot")
    report.add_argument("--print", action="store_true", help="print the table only")
    trial = commands.add_parser("smoke", help="every arm not yet made, for 2 steps, in scratch")
    trial.add_argument("--scratch", type=Path, required=True, help="a folder for the trial runs")
    for sub in (run, cell, listing, commands.choices["status"], report, trial):
        sub.add_argument("--results", type=Path, default=runner.RESULTS)
        sub.add_argument("--work", type=Path, default=DEFAULT_WORK)
        sub.add_argument("--only", action="append", help="claim id (repeatable)")
        sub.add_argument("--manifest", default=runner.MANIFEST, help="module of ARMS and CLAIMS")
    args = parser.parse_args(argv)
    manifest = importlib.import_module(args.manifest)

    claims = [c for c in manifest.CLAIMS if not args.only or c.id in args.only]
    if args.only and len(claims) != len(set(args.only)):
        known = sorted(c.id for c in manifest.CLAIMS)
        parser.error(f"unknown claim in --only {args.only}; known: {', '.join(known)}")
    if args.command == "run":
        if args.cores < 1:
            parser.error("--cores must be at least 1")
        started = runner.schedule(
            args.cores, args.budget, args.work, args.results, args.only, manifest=args.manifest
        )
        print(f"{len(started)} cell(s) started; {sum(rc == 0 for _, rc in started)} finished")
        return 0
    if args.command == "cell":
        by_id = {c.id: c for c in claims}
        if args.claim not in by_id:
            parser.error(f"unknown claim {args.claim!r}")
        # the scheduler's stop at its budget ends the cell as a spent slice would, so the arm's
        # record counts the CPU this cell gave it (its run resumes from its last epoch)
        signal.signal(signal.SIGTERM, runner.stop_as_slice_spent)
        try:
            rows = runner.run_cell(
                by_id[args.claim], args.seed, manifest.ARMS, args.work, args.results
            )
        except SliceSpent as spent:
            print(f"{spent}; the next cell resumes it")
            return runner.SLICE_SPENT
        print(f"{args.claim} seed {args.seed}: {len(rows)} row(s) written to {args.results}")
        return 0
    if args.command == "pending":
        chosen = runner.schedulable(claims, named=bool(args.only))
        cells = runner.pending(chosen, manifest.ARMS, args.results, args.work)
        if args.json:
            print(json.dumps([asdict(c) for c in cells]))
        else:
            for c in cells:
                print(f"{c.name():40} priority {c.priority}  ≈ {c.minutes:g} CPU-min")
            total = runner.pending_total(chosen, manifest.ARMS, args.results, args.work)
            print(f"{len(cells)} cell(s); their arms not yet made ≈ {total:.0f} CPU-min in all")
        return 0

    if args.command == "smoke":
        from campaign.smoke import smoke

        chosen = runner.schedulable(claims, named=bool(args.only))
        outcome = smoke(chosen, manifest.ARMS, args.work, args.scratch)
        failed = [key for key, verdict in outcome.items() if verdict != "ok"]
        print(f"{len(outcome)} arm(s) tried; {len(failed)} not ok: {', '.join(failed) or '—'}")
        return 1 if failed else 0

    from campaign import report as reporting

    if args.command == "status":
        print(reporting.status(claims, runner.read_rows(args.results)))
        return 0
    table = reporting.table(claims, runner.read_rows(args.results))
    if args.print:
        print(table)
        return 0
    reporting.publish(claims, runner.read_rows(args.results))
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
