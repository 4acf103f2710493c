"""Many benchmark trainings side by side on one machine (a GPU host), within a deadline.

The jobs are ``train_published.py`` and ``zoo.py`` runs, started in priority order, ``--workers``
at a time, each a single-threaded process of its own (on a GPU host they share the device).
At ``--deadline`` seconds the runs still training are stopped and the best checkpoint each has
written so far is scored on the test users (the scripts' ``--partial`` modes), so a batch cut
short by its budget still reports every run it started, labelled unfinished with its epoch count.

    python benchmarks/parallel_runs.py --out /tmp/gpu --root ../shared/data --workers 4 \\
        --deadline 420 --ce-chunk-size none
    python benchmarks/parallel_runs.py --list            # the jobs, in the order they start

On one GPU keep ``--workers`` at about 4: processes time-slice the device, and 14 of them left
each SASRec+ run at 11.8 s per epoch, no faster than two CPU cores (RESULTS.md).

``summary.json`` in ``--out`` lists every job: finished, unfinished (scored partially), failed
(with its log's tail) or not started. Published runs land in ``OUT/published/NAME-seedS``, zoo
runs in ``OUT/zoo`` (read them with ``zoo.py --table --out OUT/zoo``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from zoo import DATASETS, PAPER, ROOT, VARIANTS, run_dir, runs_on  # noqa: E402  (a sibling script, not a package)


@dataclass(frozen=True)
class Job:
    """A ``train_published.py`` run (``dataset`` empty) or a ``zoo.py`` run."""

    name: str
    seed: int
    dataset: str = ""
    setting: str = ""

    @property
    def label(self) -> str:
        if self.dataset:
            return f"zoo-{self.dataset}-{self.name}-{self.setting}-seed{self.seed}"
        return f"published-{self.name}-seed{self.seed}"

    def path(self, out: Path) -> Path:
        if self.dataset:
            return run_dir(out / "zoo", self.dataset, self.name, self.setting, self.seed)
        return out / "published" / f"{self.name}-seed{self.seed}"

    def command(self, out: Path, root: Path, chunk: str) -> list[str]:
        if self.dataset:
            return [
                sys.executable,
                str(HERE / "zoo.py"),
                "--out",
                str(out / "zoo"),
                "--root",
                str(root),
                "--datasets",
                self.dataset,
                "--models",
                self.name,
                "--settings",
                self.setting,
                "--seeds",
                str(self.seed),
                "--ce-chunk-size",
                chunk,
            ]
        return [
            sys.executable,
            str(HERE / "train_published.py"),
            self.name,
            "--root",
            str(root),
            "--out",
            str(self.path(out)),
            "--seed",
            str(self.seed),
            "--threads",
            "1",
            "--ce-chunk-size",
            chunk,
        ]

    def partial_command(self, out: Path) -> list[str]:
        if self.dataset:
            return [
                sys.executable,
                str(HERE / "zoo.py"),
                "--out",
                str(out / "zoo"),
                "--partial",
                "--only",
                str(self.path(out)),
            ]
        return [
            sys.executable,
            str(HERE / "train_published.py"),
            self.name,
            "--out",
            str(self.path(out)),
            "--partial",
        ]


def zoo_jobs(seeds: list[int], root: Path = ROOT) -> list[Job]:
    jobs = []
    for seed in seeds:
        for name, setting in PAPER.items():
            for setting_name in ("paper", "ce"):
                if setting_name == "ce" and setting.loss.name == "ce":
                    continue  # the paper's loss is full CE: one run covers both
                jobs += [
                    Job(name, seed, dataset, setting_name)
                    for dataset in DATASETS
                    if runs_on(name, dataset, root)
                ]
    return jobs


def default_jobs(root: Path = ROOT) -> list[Job]:
    """Longest first among the published runs, then seed 0 of every zoo row, then the other
    seeds, then the diagnostic variants of SASRec+ and the zoo's diagnostic rows."""
    published = [
        Job("bert4rec", 0),
        Job("bert4rec-kv-budget", 0),
        Job("gsasrec", 0),
        Job("sasrec", 0),
        Job("sasrec-avoid-row", 0),
        Job("sasrec+", 0),
        Job("sasrec-ss-beauty", 0),
        Job("sasrec-ss-beauty-p50", 0),
    ]
    more_seeds = [
        Job(name, seed) for seed in (1, 2) for name in ("sasrec+", "sasrec", "sasrec-ss-beauty")
    ]
    variants = [
        Job(name, 0)
        for name in (
            "sasrec+adam",
            "sasrec+kv-attention",
            "sasrec+from-start",
            "sasrec-kv-attention",
        )
    ]
    diagnostics = [Job(name, 0, "beauty", "paper") for name in VARIANTS]
    zoo_first, zoo_rest = zoo_jobs([0], root), zoo_jobs([1, 2], root)
    return [*published, *zoo_first, *more_seeds, *zoo_rest, *variants, *diagnostics]


@dataclass
class Running:
    job: Job
    process: subprocess.Popen
    started: float
    log: Path


def _start(job: Job, command: list[str], logs: Path, suffix: str = "") -> Running:
    log = logs / f"{job.label}{suffix}.log"
    with log.open("w") as handle:
        process = subprocess.Popen(
            command, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )  # its own group: stop it whole
    return Running(job, process, time.monotonic(), log)


def _stop(running: list[Running], grace: float = 10.0) -> None:
    for item in running:
        os.killpg(item.process.pid, signal.SIGTERM)
    end = time.monotonic() + grace
    for item in running:
        try:
            item.process.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(item.process.pid, signal.SIGKILL)
            item.process.wait()


def _tail(log: Path, lines: int = 15) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def run_pool(
    commands: list[tuple[Job, list[str]]],
    workers: int,
    deadline: float,
    logs: Path,
    suffix: str = "",
) -> tuple[dict[Job, dict], list[Job]]:
    """Run ``commands`` ``workers`` at a time until all end or ``deadline`` (monotonic) passes.
    Returns each ended job's record and the jobs stopped at the deadline."""
    queue = list(commands)
    running: list[Running] = []
    ended: dict[Job, dict] = {}
    while (queue or running) and time.monotonic() < deadline:
        while queue and len(running) < workers:
            job, command = queue.pop(0)
            running.append(_start(job, command, logs, suffix))
        time.sleep(0.5)
        for item in [r for r in running if r.process.poll() is not None]:
            running.remove(item)
            record = {
                "seconds": round(time.monotonic() - item.started, 1),
                "returncode": item.process.returncode,
            }
            if item.process.returncode:
                record["log_tail"] = _tail(item.log)
            ended[item.job] = record
            print(
                f"{item.job.label}{suffix}: rc {item.process.returncode} after "
                f"{record['seconds']:.0f} s",
                flush=True,
            )
    stopped = [item.job for item in running]
    _stop(running)
    for job, _ in queue:
        ended[job] = {"status": "not started"}
    return ended, stopped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/parallel_runs"))
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--deadline",
        type=float,
        default=3600.0,
        help="seconds of training; then unfinished runs are scored partially",
    )
    parser.add_argument(
        "--scoring-seconds",
        type=float,
        default=90.0,
        help="seconds allowed for scoring the unfinished runs",
    )
    parser.add_argument(
        "--ce-chunk-size",
        default="512",
        help="rows of full-CE logits at a time ('none' on a GPU); memory only",
    )
    parser.add_argument("--only", nargs="+", help="job labels to run (default: all, in order)")
    parser.add_argument("--list", action="store_true", help="print the job labels and stop")
    args = parser.parse_args(argv)
    jobs = default_jobs(args.root)
    if args.only:
        known = {job.label: job for job in jobs}
        unknown = sorted(set(args.only) - set(known))
        if unknown:
            parser.error(f"unknown job label(s): {', '.join(unknown)} (see --list)")
        jobs = [known[label] for label in args.only]
    if args.list:
        print("\n".join(job.label for job in jobs))
        return 0
    start = time.monotonic()
    logs = args.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    commands = [
        (job, job.command(args.out, args.root.resolve(), args.ce_chunk_size)) for job in jobs
    ]
    ended, stopped = run_pool(commands, args.workers, start + args.deadline, logs)
    # a stopped run is scorable once it has written a best checkpoint
    scorable = [
        job
        for job in stopped
        if (
            job.path(args.out).with_name(job.path(args.out).name + ".incomplete")
            / "model.safetensors"
        ).exists()
    ]
    scored, unscored = run_pool(
        [(job, job.partial_command(args.out)) for job in scorable],
        args.workers,
        time.monotonic() + args.scoring_seconds,
        logs,
        "-partial",
    )
    for job in stopped:
        record = {"status": "unfinished"}  # stopped at the deadline, whenever it started
        if job not in scorable:
            record["partial"] = "no checkpoint yet"
        elif job in unscored:
            record["partial"] = "scoring stopped at its deadline"
        elif scored[job].get("returncode") == 0:
            record["partial"] = "scored"
        else:
            record["partial"] = f"scoring failed: {scored[job].get('log_tail', '')}"
        ended[job] = record
    summary = {
        job.label: {
            "status": "finished" if ended[job].get("returncode") == 0 else "failed",
            **ended[job],
        }
        if "status" not in ended[job]
        else ended[job]
        for job in jobs
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    counts: dict[str, int] = {}
    for record in summary.values():
        counts[record["status"]] = counts.get(record["status"], 0) + 1
    print(
        f"{len(jobs)} jobs in {time.monotonic() - start:.0f} s: {counts}; "
        f"{len(unscored)} left unscored",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
