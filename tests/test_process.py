"""The process-wide thread choice (attnsvm.process) and how a run records and keeps it."""

import json
import multiprocessing as mp
import os
import subprocess
import sys
import time

import pytest
import torch

from attnsvm import process
from attnsvm.rec.config import DataConfig, ModelChoice, RunConfig, TrainConfig
from attnsvm.rec.train.trainer import _thread_choice, train


def _spin(core: int, seconds: float) -> None:
    os.sched_setaffinity(0, {core})
    deadline = time.time() + seconds
    while time.time() < deadline:
        pass


@pytest.fixture
def restore_threads():
    before, chosen = torch.get_num_threads(), process._chosen
    yield
    torch.set_num_threads(before)
    process._chosen = chosen


def test_a_requested_count_wins(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    choice = process.choose_threads(5)
    assert (choice.threads, choice.chosen_by) == (5, "train.num_threads")
    assert "5 thread(s)" in choice.describe()


def test_omp_num_threads_pins_the_count(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    choice = process.choose_threads()
    assert (choice.threads, choice.chosen_by, choice.busy_elsewhere) == (1, "OMP_NUM_THREADS", None)


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs Linux's /proc/stat")
def test_a_busy_core_elsewhere_is_seen_and_left_alone(monkeypatch):
    """Whatever else runs on the machine, a spinning child only adds to the busy count."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = sorted(os.sched_getaffinity(0))
    child = mp.get_context("spawn").Process(target=_spin, args=(cores[-1], 20.0))
    child.start()
    try:
        time.sleep(1.0)  # the spawned interpreter starts, then spins
        busy = process.busy_elsewhere(0.3)
        choice = process.choose_threads()
    finally:
        child.kill()
        child.join()
    assert busy is not None and busy >= process.BUSY_SHARE
    assert choice.chosen_by == "measurement"
    assert 1 <= choice.threads <= max(1, len(cores) - 1)


def test_configure_process_sets_torch_threads_and_measures_once(monkeypatch, restore_threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    process._chosen = None
    first = process.configure_process()
    assert torch.get_num_threads() == first.threads
    assert process.configure_process() is first  # no second sample
    assert process.configure_process(1).threads == 1 == torch.get_num_threads()


def test_a_resumed_run_keeps_its_thread_count(restore_threads):
    config = RunConfig()
    torch.set_num_threads(2)
    choice = _thread_choice(config, [{"epoch": 1, "threads": 1}])
    assert (choice.threads, choice.chosen_by) == (1, "the resumed run")
    assert torch.get_num_threads() == 1


def test_a_run_records_its_threads(tmp_path, restore_threads):
    torch.set_num_threads(1)
    process._chosen = None
    config = RunConfig(
        model=ModelChoice("sasrec+", {"hidden_size": 16, "ffn_size": 16, "num_blocks": 1}),
        data=DataConfig(dataset="synthetic", max_len=10),
        train=TrainConfig(epochs=1, batch_size=64, seed=0),
    )
    result = train(config, tmp_path / "run", show_progress=False)
    metrics = json.loads((result.run_dir / "metrics.json").read_text())
    assert metrics["threads"]["threads"] == 1
    assert metrics["threads"]["chosen_by"] == "the caller (torch's setting)"
    log = [json.loads(line) for line in (result.run_dir / "log.jsonl").read_text().splitlines()]
    assert [record["threads"] for record in log] == [1]


SPIN_PROBE = (
    "import os, sys; from attnsvm.process import configure_process; "
    "choice = configure_process(); assert 'torch' not in sys.modules; import torch; "
    "print(os.environ.get('GOMP_SPINCOUNT'), choice.waiting, torch.get_num_threads() == "
    "choice.threads)"
)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, f"{process.SPIN_COUNT} GOMP_SPINCOUNT={process.SPIN_COUNT} True"),
        ({"OMP_WAIT_POLICY": "ACTIVE"}, "None OMP_WAIT_POLICY=ACTIVE True"),
        ({"GOMP_SPINCOUNT": "7"}, "7 GOMP_SPINCOUNT=7 True"),
    ],
)
def test_the_short_spin_is_set_before_torch_loads_unless_the_user_chose(env, expected):
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    done = subprocess.run(
        [sys.executable, "-c", SPIN_PROBE],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split("\n")[0] == expected
