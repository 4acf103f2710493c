"""``kill -9`` at random points of a short training, then whatever the user would do next.

The uninterrupted run is trained first (in this process), then again in a forked process, which
is timed. Each interrupted run is the same training in a forked process (torch already imported
and warm: a start costs nothing), killed with SIGKILL after a random delay drawn from a seeded
generator over 1.15 × that time (so some kills come after the end). What the kill left is then
classified and carried on exactly as a user would: the same ``train`` command again where no
run had started, ``train --resume`` where an interrupted one is, nothing where the run had
finished. Every run must end finished, with the uninterrupted run's metrics, per-epoch losses
and weights, the same files and nothing else beside it: no ``.incomplete`` folder, no
temporary file, no lock file.

``python tests/reliability/reliability_kill.py`` prints the outcomes (RESULTS.md).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from reliability_harness import tiny_config, write_walks
from safetensors.torch import load_file

from attnsvm.rec.config import RunConfig
from attnsvm.rec.train import train
from attnsvm.rec.train.checkpoint import RESUME, RunDirectory

COMPARED = ("test", "valid", "best_epoch", "epochs", "stopped_early", "steps")


def kill_config(walks: Path) -> RunConfig:
    """Eight epochs, no early stop: each writes weights, resume state and log."""
    config = tiny_config(walks)
    return replace(config, train=replace(config.train, epochs=8, patience=100))


def train_in_a_child(config: RunConfig, out: Path) -> int:
    """The training in a forked process, its output discarded; returns its pid."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller (no pytest teardown, no atexit)
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)
        try:
            train(config, out, show_progress=False)
        finally:
            os._exit(0)
    return pid


def left_by_the_kill(out: Path) -> str:
    """What a kill left at ``out``, in the words of the table."""
    run = RunDirectory(out)
    if run.final.is_dir():
        return "finished"
    if not run.partial.is_dir():
        return "nothing (killed before the run folder)"
    if not (run.partial / "config.json").is_file():
        return "a folder without its config"
    if run.complete:
        return "every result written, the rename left"
    if not run.resumable:
        return "before the first epoch's state"
    log = run.partial / "log.jsonl"
    if not log.is_file():  # the resume state is saved first, the log right after it
        return "after the first epoch's state, before its log"
    epoch = json.loads(log.read_text().splitlines()[-1])["epoch"]
    return f"after epoch {epoch}'s state"


def carry_on(config: RunConfig, out: Path, left: str) -> None:
    """What the user does next: the same command where no run had started, else --resume."""
    if left.startswith("nothing") or left == "a folder without its config":
        train(config, out, show_progress=False)
    elif left != "finished":
        train(RunConfig(), out, resume=True, show_progress=False)


def check_same_run(out: Path, baseline: Path) -> None:
    """``out`` is finished with the baseline's results, files and weights, and alone."""
    metrics = json.loads((out / "metrics.json").read_text())
    expected = json.loads((baseline / "metrics.json").read_text())
    assert {k: metrics[k] for k in COMPARED} == {k: expected[k] for k in COMPARED}
    losses = [json.loads(line)["train_loss"] for line in (out / "log.jsonl").open()]
    assert losses == [json.loads(line)["train_loss"] for line in (baseline / "log.jsonl").open()]
    weights, reference = (
        load_file(out / "model.safetensors"),
        load_file(baseline / "model.safetensors"),
    )
    assert all(torch.equal(weights[key], reference[key]) for key in reference)
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    assert files == sorted(p.relative_to(baseline).as_posix() for p in baseline.rglob("*"))
    beside = sorted(p.name for p in out.parent.iterdir() if p.name.startswith(out.name))
    assert beside == [out.name], beside
    assert not (out / RESUME).exists()


def kill_and_resume(root: Path, points: int = 10, seed: int = 26) -> list[tuple[float, str]]:
    """The uninterrupted run, then ``points`` killed ones carried on; (delay, what the kill
    left) of each. Raises AssertionError where a run does not end as the uninterrupted one."""
    torch.set_num_threads(1)
    config = kill_config(write_walks(root / "walks.txt"))
    baseline = train(config, root / "uninterrupted", show_progress=False).run_dir
    # timed in a child, as the killed runs will be: this process is warm now, a fork costs nothing
    start = time.perf_counter()
    os.waitpid(train_in_a_child(config, root / "timed"), 0)
    duration = time.perf_counter() - start
    check_same_run(root / "timed", baseline)
    delays = np.sort(np.random.default_rng(seed).uniform(0, 1.15 * duration, size=points))
    outcomes = []
    for index, delay in enumerate(delays):
        out = root / f"killed-{index}"
        pid = train_in_a_child(config, out)
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        left = left_by_the_kill(out)
        carry_on(config, out, left)
        check_same_run(out, baseline)
        outcomes.append((float(delay), left))
    return outcomes


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        results = kill_and_resume(Path(folder), int(sys.argv[1]) if len(sys.argv) > 1 else 10)
    for delay, left in results:
        print(f"{delay:6.3f} s  {left}")
    print("\n".join(f"{n:3d}  {left}" for left, n in Counter(r[1] for r in results).items()))
