"""``benchmarks/parallel_runs.py``: the job list and the deadline-bound process pool."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load():
    spec = importlib.util.spec_from_file_location("parallel_runs", BENCHMARKS / "parallel_runs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["parallel_runs"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_jobs_cover_every_zoo_row_for_three_seeds_once():
    runs = _load()
    jobs = runs.default_jobs()
    labels = [job.label for job in jobs]
    assert len(labels) == len(set(labels))
    zoo = {(j.dataset, j.name, j.setting, j.seed) for j in jobs if j.dataset}
    for name, setting in runs.PAPER.items():
        settings = ["paper"] if setting.loss.name == "ce" else ["paper", "ce"]
        for dataset in runs.DATASETS:
            if not runs.runs_on(name, dataset):
                assert not any(j.dataset == dataset and j.name == name for j in jobs)
                continue
            for setting_name in settings:
                for seed in (0, 1, 2):
                    assert (dataset, name, setting_name, seed) in zoo
    # STRec selects its queries by event time: only the timestamped dataset has it
    assert runs.runs_on("strec", "ml-100k") and not runs.runs_on("strec", "beauty")
    # seed 0 of every zoo row starts before any other seed
    first_other_seed = next(i for i, j in enumerate(jobs) if j.dataset and j.seed > 0)
    assert all(j.seed == 0 for j in jobs[:first_other_seed] if j.dataset)


def test_partial_scoring_commands_point_at_the_run(tmp_path):
    runs = _load()
    published = runs.Job("sasrec+", 1)
    zoo_run = runs.Job("bsarec", 2, "beauty", "paper")
    assert published.path(tmp_path) == tmp_path / "published" / "sasrec+-seed1"
    command = published.partial_command(tmp_path)
    assert command[-1] == "--partial" and str(published.path(tmp_path)) in command
    command = zoo_run.partial_command(tmp_path)
    assert command[-2:] == ["--only", str(tmp_path / "zoo" / "beauty" / "bsarec-paper-seed2")]


def test_the_pool_stops_at_its_deadline_and_reports_every_job(tmp_path):
    runs = _load()
    quick, slow, queued = runs.Job("a", 0), runs.Job("b", 0), runs.Job("c", 0)
    sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
    commands = [(quick, [sys.executable, "-c", "print('done')"]), (slow, sleep), (queued, sleep)]
    start = time.monotonic()
    ended, stopped = runs.run_pool(commands, 2, start + 3.0, tmp_path)
    assert time.monotonic() - start < 20
    assert ended[quick]["returncode"] == 0
    # the queued job got the quick one's slot, so both sleepers were running at the deadline
    assert set(stopped) == {slow, queued}
    assert (tmp_path / f"{quick.label}.log").read_text().strip() == "done"


def test_a_job_that_never_got_a_slot_is_reported_not_started(tmp_path):
    runs = _load()
    first, second = runs.Job("a", 0), runs.Job("b", 0)
    sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
    ended, stopped = runs.run_pool(
        [(first, sleep), (second, sleep)], 1, time.monotonic() + 1.0, tmp_path
    )
    assert stopped == [first]
    assert ended[second] == {"status": "not started"}
