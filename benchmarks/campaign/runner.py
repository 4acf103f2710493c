"""Running cells: one cell in this process, or the pending ones side by side under a budget.

A finished cell appends one row per (arm, metric) to the results CSV, under a file lock and only
if no other process wrote that cell first, so rerunning a finished cell does nothing. The
scheduler starts each cell as a child process at the lowest priority (``nice 19``) with one
thread, lists the pending cells afresh before every start (cells added to the manifest while it
runs are picked up), never runs two cells that would train the same arm for the same seed at
once (an arm's seeds have folders of their own; what seeds share is made under a lock), starts
no cell
whose estimate exceeds the time left, and at the budget terminates what still runs: a stopped
cell ends as a spent slice does (its arm's record keeps the CPU it had), and those arms resume
from their run folders next time.
"""

from __future__ import annotations

import csv
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from campaign.arms import Arm, SliceSpent, Workspace
from campaign.claims import Claim

COLUMNS = (
    "system",
    "claim",
    "dataset",
    "arm",
    "role",
    "seed",
    "metric",
    "value",
    "epochs",
    "cpu_seconds",
    "commit",
    "finished_at",
)
CAMPAIGN = Path(__file__).resolve().parent
REPO = CAMPAIGN.parents[1]
RESULTS = REPO / "benchmarks" / "results" / "campaign.csv"
MANIFEST = "campaign.manifest"  # a module with ARMS and CLAIMS; tests pass a tiny one
SLICE_SPENT = 75  # a cell's exit code when its long arm used its slice (EX_TEMPFAIL)
# the evaluator's other cut-offs and diagnostics stay in the run folders, not in the CSV
# metrics not written to the CSV unless a claim reads them (sampled ones by their base name)
UNREPORTED = re.compile(
    r"^(?:(?:HR|NDCG|MRR)@[15]|(?:Recall|coverage|popularity)@\d+)(?: \(.+\))?$"
)
ONE_THREAD = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "PYTHONUNBUFFERED": "1",
}


@dataclass(frozen=True)
class Cell:
    claim: str
    seed: int
    minutes: float
    priority: int
    arms: tuple[str, ...]  # every arm the cell may train, dependencies included

    def name(self) -> str:
        return f"{self.claim}-seed{self.seed}"


def read_rows(results: Path) -> list[dict[str, str]]:
    if not results.is_file():
        return []
    with results.open(newline="") as handle:
        return list(csv.DictReader(handle))


def finished_cells(results: Path) -> set[tuple[str, int]]:
    return {(row["claim"], int(row["seed"])) for row in read_rows(results)}


def arm_closure(keys: list[str], arms: dict[str, Arm]) -> tuple[str, ...]:
    seen: list[str] = []
    while keys:
        key = keys.pop()
        if key not in seen:
            seen.append(key)
            keys.extend(arms[key].needs)
    return tuple(sorted(seen))


def schedulable(claims: list[Claim], named: bool) -> list[Claim]:
    """The claims whose cells the scheduler runs: every one when they were named (``--only``),
    else those not marked out of reach."""
    return claims if named else [claim for claim in claims if not claim.out_of_reach]


def pending(
    claims: list[Claim], arms: dict[str, Arm], results: Path, work: Path | None = None
) -> list[Cell]:
    """Cells without rows in ``results``, by priority (a claim's first seed by its lead, where it
    has one), then cheapest first, then seed. With the ``work`` folder, a cell's estimate is
    the sum over its arms not yet made there of each one's measured cost at the seeds that made
    it (an equal share of the claim's estimate for an arm no seed made yet), less what this
    seed already spent on it, and at least a minute (its rows), or the claim's own estimate
    where that is less. An arm recorded in ``results`` counts as made (``Workspace``) unless an
    unmade arm of the cell starts from its run."""
    space = Workspace(work, arms, results) if work is not None else None
    cells = []
    for claim, seed, closure in _unfinished(claims, arms, results):
        minutes = claim.minutes
        if space is not None:
            left = sum(_minutes_left(space, claim, seed, closure).values())
            floor = min(1.0, claim.minutes)  # reading the cached arms, writing the rows
            minutes = max(floor, round(left, 1))
        lead = claim.lead is not None and seed == claim.seeds[0]
        priority = claim.lead if lead else claim.priority
        cells.append(Cell(claim.id, seed, minutes, priority, closure))
    return sorted(cells, key=lambda c: (c.priority, c.minutes, c.seed, c.claim))


def pending_total(claims: list[Claim], arms: dict[str, Arm], results: Path, work: Path) -> float:
    """CPU-minutes the pending cells still need, each (arm, seed) counted once however many
    cells share it (the per-cell estimates of ``pending`` count a shared arm in each)."""
    space, left = Workspace(work, arms, results), {}
    for claim, seed, closure in _unfinished(claims, arms, results):
        for key, minutes in _minutes_left(space, claim, seed, closure).items():
            left.setdefault((key, seed), minutes)
    return sum(left.values())


def _minutes_left(space: Workspace, claim: Claim, seed: int, closure) -> dict[str, float]:
    """Each arm of the cell: the CPU-minutes it still needs (a share of the claim's estimate
    where no seed has measured it); the runs that its unmade arms start from are needed."""
    unmade = [key for key in closure if not space.done(key, seed)]
    runs_needed = {need for key in unmade for need in space.arms[key].needs}
    share = claim.minutes / len(closure)
    return {
        key: space.minutes_left(key, seed, share, run_needed=key in runs_needed) for key in closure
    }


def _unfinished(claims: list[Claim], arms: dict[str, Arm], results: Path):
    """``(claim, seed, the arms its cell may train)`` of every cell without rows in ``results``."""
    done = finished_cells(results)
    for claim in claims:
        closure = arm_closure([claim.system_arm, claim.baseline_arm], arms)
        for seed in claim.seeds:
            if (claim.id, seed) not in done:
                yield claim, seed, closure


def beside(candidates: list[Cell], running: list[Cell]) -> list[Cell]:
    """The candidates that may start while ``running`` run: none trains an arm, for its seed,
    that a running cell may be training."""
    busy = {(arm, cell.seed) for cell in running for arm in cell.arms}
    return [c for c in candidates if not busy.intersection((arm, c.seed) for arm in c.arms)]


def code_version(tree: Path = REPO) -> str:
    """The commit the cell's code comes from, ``+dirty`` when its sources differ from it."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(tree), "status", "--porcelain", "--", "src", "benchmarks"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    dirty_sources = [line for line in dirty.splitlines() if "benchmarks/results/" not in line]
    return commit + ("+dirty" if dirty_sources else "")


def run_cell(
    claim: Claim, seed: int, arms: dict[str, Arm], work: Path, results: Path
) -> list[dict]:
    """Train both arms of ``claim`` for ``seed`` (cached arms are reused) and append the rows;
    returns the rows written (none if another process finished the cell first)."""
    commit = code_version()
    space = Workspace(work, arms, results, commit)
    records = {
        "baseline": space.result(claim.baseline_arm, seed, claim.metric),
        "system": space.result(claim.system_arm, seed, claim.metric),
    }
    now = datetime.now(UTC).isoformat(timespec="seconds")
    rows = [
        {
            "system": record["system"],
            "claim": claim.id,
            "dataset": claim.dataset,
            "arm": record["key"],
            "role": role,
            "seed": seed,
            "metric": metric,
            "value": repr(value),
            "epochs": record["epochs"],
            "cpu_seconds": record["cpu_seconds"],
            "commit": record.get("commit") or commit,  # the arm's own, where it has one
            "finished_at": now,
        }
        for role, record in records.items()
        for metric, value in sorted(record["metrics"].items())
        if metric == claim.metric or not UNREPORTED.match(metric)
    ]
    return append_rows(results, claim.id, seed, rows)


def append_rows(results: Path, claim: str, seed: int, rows: list[dict]) -> list[dict]:
    results.parent.mkdir(parents=True, exist_ok=True)
    with open(results.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (claim, seed) in finished_cells(results):
            return []
        new = not results.is_file() or results.stat().st_size == 0
        with results.open("a", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
            if new:
                writer.writeheader()
            writer.writerows(rows)
            handle.flush()
            os.fsync(handle.fileno())
    return rows


def _lowest_priority() -> None:
    os.setpgrp()  # its own process group: the budget stops the cell and whatever it started
    os.nice(19)


def schedule(
    cores: int,
    budget_seconds: float,
    work: Path,
    results: Path,
    only: list[str] | None = None,
    *,
    manifest: str = MANIFEST,
    poll_seconds: float = 5.0,
    log=print,
) -> list[tuple[str, int]]:
    """Run pending cells, ``cores`` at a time, until none is left or the budget is spent;
    returns ``(cell name, exit code)`` of every cell started."""
    deadline = time.monotonic() + budget_seconds
    running: dict[subprocess.Popen, Cell] = {}
    started: list[tuple[str, int]] = []
    failed: set[str] = set()
    (work / "logs").mkdir(parents=True, exist_ok=True)
    try:
        while True:
            for process, cell in list(running.items()):
                if process.poll() is not None:
                    del running[process]
                    started.append((cell.name(), process.returncode))
                    if process.returncode == SLICE_SPENT:
                        log(f"{_clock()} {cell.name()}: slice spent, the run resumes next time")
                        continue
                    if process.returncode != 0:
                        failed.add(cell.name())
                    log(f"{_clock()} finished {cell.name()} (exit {process.returncode})")
            left = deadline - time.monotonic()
            if left <= 0:
                log(f"{_clock()} budget spent; stopping {len(running)} running cell(s)")
                break
            if len(running) < cores:
                candidates = [
                    cell
                    for cell in list_pending(results, only, manifest, work)
                    if cell.name() not in failed
                    and cell.name() not in {c.name() for c in running.values()}
                ]
                startable = beside(candidates, list(running.values()))
                fitting = [c for c in startable if c.minutes * 60 <= left]
                if fitting:
                    cell = fitting[0]
                    running[launch(cell, work, results, manifest)] = cell
                    log(f"{_clock()} started {cell.name()} (≈ {cell.minutes:g} CPU-min)")
                    continue
                if not running and not startable:
                    log(f"{_clock()} nothing left to start ({len(candidates)} pending)")
                    break
                if not running:
                    log(f"{_clock()} no pending cell fits the {left / 60:.0f} min left")
                    break
            time.sleep(poll_seconds)
    finally:
        for process in running:
            stop(process)
        for process, cell in running.items():
            started.append((cell.name(), process.wait()))
    return started


def _command(manifest: str, *words: str) -> list[str]:
    return [sys.executable, str(CAMPAIGN), *words, "--manifest", manifest]


def list_pending(
    results: Path, only: list[str] | None, manifest: str = MANIFEST, work: Path | None = None
) -> list[Cell]:
    """The pending cells as a fresh process reads the manifest (and the work folder) now."""
    command = _command(manifest, "pending", "--json", "--results", str(results))
    if work is not None:
        command += ["--work", str(work)]
    for claim in only or []:
        command += ["--only", claim]
    listing = subprocess.run(command, capture_output=True, text=True, env=_env())
    if listing.returncode != 0:
        raise RuntimeError(f"listing the pending cells failed:\n{listing.stderr}")
    return [Cell(**{**c, "arms": tuple(c["arms"])}) for c in json.loads(listing.stdout)]


def launch(cell: Cell, work: Path, results: Path, manifest: str = MANIFEST) -> subprocess.Popen:
    log = (work / "logs" / f"{cell.name()}.log").open("a")
    command = _command(manifest, "cell", cell.claim, str(cell.seed))
    command += ["--work", str(work), "--results", str(results)]
    return subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=_env(),
        preexec_fn=_lowest_priority,
    )


def stop_as_slice_spent(signum: int, frame: object) -> None:
    """A cell's SIGTERM handler: raise :class:`SliceSpent` where the cell is."""
    raise SliceSpent(f"stopped by signal {signum}")


def stop(process: subprocess.Popen, grace: float = 20.0) -> None:
    """Terminate a cell's process group, killing it if it outlives ``grace`` seconds."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)


def _env() -> dict[str, str]:
    return {**os.environ, **ONE_THREAD}


def _clock() -> str:
    return datetime.now(UTC).strftime("%H:%M:%S")
