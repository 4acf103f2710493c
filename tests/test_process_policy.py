"""The library applies the CLI's process policy itself (``attnsvm.process``): ``fit`` beside a
busy core trains with the measured thread count, the short OpenMP spin and the allocator set,
and a choice the caller made (``configure_process``, ``torch.set_num_threads``,
``OMP_NUM_THREADS``) is kept."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import time

import pytest
import torch

from attnsvm import process

CHOSEN_BY_USER = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "GOMP_SPINCOUNT", "OMP_WAIT_POLICY")
FIT = """
import json, os, sys
from attnsvm.rec.recommender import Recommender  # attnsvm.rec first: torch loads after the spin
import torch
from attnsvm import process

run = sys.argv[1]
settings = {"train.steps_per_epoch": 2, "data.max_len": 6, "eval.ks": "[10]"}
Recommender.from_config(model="sasrec+", dataset="synthetic", epochs=2, hidden_size=8, ffn_size=8,
                        num_blocks=1, **settings).fit(run)
log = [json.loads(line) for line in open(os.path.join(run, "log.jsonl"))]
print(json.dumps({
    "run": json.load(open(os.path.join(run, "metrics.json")))["threads"],
    "each epoch": [record["threads"] for record in log],
    "torch": torch.get_num_threads(),
    "spin": os.environ.get("GOMP_SPINCOUNT"),
    "allocator set": process.keep_freed_memory.cache_info().currsize == 1,
}))
"""


def _spin(core: int, seconds: float) -> None:
    os.sched_setaffinity(0, {core})
    deadline = time.time() + seconds
    while time.time() < deadline:
        pass


def _environment(**chosen: str) -> dict[str, str]:
    """This process's environment less every setting of the policy a user may make, plus
    ``chosen``."""
    return {**{k: v for k, v in os.environ.items() if k not in CHOSEN_BY_USER}, **chosen}


def _fresh(code: str, *arguments: str) -> str:
    """The last line ``code`` prints, run by a fresh interpreter that chose nothing."""
    done = subprocess.run(
        [sys.executable, "-c", code, *arguments], env=_environment(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture
def restore_threads():
    before, chosen = torch.get_num_threads(), process._chosen
    yield
    torch.set_num_threads(before)
    process._chosen = chosen


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs Linux's /proc/stat")
def test_fit_beside_a_busy_core_trains_under_the_policy(tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    child = mp.get_context("spawn").Process(target=_spin, args=(cores[-1], 120.0))
    child.start()
    try:
        time.sleep(1.0)  # the spawned interpreter starts, then spins
        seen = json.loads(_fresh(FIT, str(tmp_path / "run")))
    finally:
        child.kill()
        child.join()
    threads = seen["run"]
    assert threads["chosen_by"] == "measurement"
    assert threads["busy_elsewhere"] >= process.BUSY_SHARE  # the spinning core was seen
    assert 1 <= threads["threads"] <= max(1, len(cores) - 1)
    assert seen["each epoch"] == [threads["threads"]] * 2 and seen["torch"] == threads["threads"]
    assert threads["waiting"] == f"GOMP_SPINCOUNT={process.SPIN_COUNT}"
    assert seen["spin"] == str(process.SPIN_COUNT) and seen["allocator set"]


def test_torch_imported_first_keeps_its_spin():
    code = "import torch, os, attnsvm.rec; print(os.environ.get('GOMP_SPINCOUNT'))"
    assert _fresh(code) == "None"


@pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="the MKL builds' rule")
def test_torch_default_threads_is_the_count_a_fresh_torch_has():
    code = (
        "import torch; from attnsvm.process import torch_default_threads; "
        "print(torch.get_num_threads(), torch_default_threads())"
    )
    environments = [{}, {"OMP_NUM_THREADS": "1"}, {"MKL_NUM_THREADS": "1"}]
    environments.append({"OMP_NUM_THREADS": "64"})  # more than the cores: torch stops at them
    started = [  # side by side: each needs an interpreter of its own
        subprocess.Popen(
            [sys.executable, "-c", code], env=_environment(**chosen), stdout=subprocess.PIPE
        )
        for chosen in environments
    ]
    for environment, child in zip(environments, started, strict=True):
        torch_has, rule_says = child.communicate()[0].split()
        assert torch_has == rule_says, environment


def test_the_callers_torch_setting_is_kept(monkeypatch, restore_threads):
    process._chosen = None
    torch.set_num_threads(1)
    monkeypatch.setattr(process, "torch_default_threads", lambda: 2)
    choice = process.configure_unless_chosen()
    assert (choice.threads, choice.chosen_by) == (1, "the caller (torch's setting)")
    assert process._chosen is None and torch.get_num_threads() == 1


def test_an_explicit_choice_is_kept_and_a_later_torch_setting_wins(monkeypatch, restore_threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    first = process.configure_process(1)
    assert process.configure_unless_chosen() is first
    torch.set_num_threads(2)
    choice = process.configure_unless_chosen()
    assert (choice.threads, choice.chosen_by) == (2, "the caller (torch's setting)")


def test_nothing_chosen_means_the_policy(monkeypatch, restore_threads):
    process._chosen = None
    monkeypatch.setattr(process, "torch_default_threads", torch.get_num_threads)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    choice = process.configure_unless_chosen()
    assert (choice.threads, choice.chosen_by) == (1, "OMP_NUM_THREADS")
    assert process.chosen_threads() is choice and torch.get_num_threads() == 1
