"""kill -9 anywhere in a short training ends, after what a user does next, in the uninterrupted
run exactly (``reliability_kill``); and a second ``--resume`` of a run in progress is refused,
naming the process that holds it."""

from __future__ import annotations

import os
from contextlib import suppress

import torch
from reliability_harness import write_walks
from reliability_kill import check_same_run, kill_and_resume, kill_config
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.rec.config import RunConfig
from attnsvm.rec.train import train


def test_kill_nine_at_ten_random_points_resumes_to_the_same_run(tmp_path):
    outcomes = kill_and_resume(tmp_path, points=10, seed=26)
    assert len(outcomes) == 10


class _Stop(Exception):
    pass


class _StopAfterFirstEpoch:
    def on_epoch_end(self, state) -> None:
        raise _Stop


class _PauseAtEpochEnd:
    """Tells the parent it is mid-run (holding the lock), then waits until the parent says go."""

    def __init__(self, ready: int, go: int) -> None:
        self.ready, self.go = ready, go

    def on_epoch_end(self, state) -> None:
        if self.go is not None:
            os.write(self.ready, b"1")
            os.read(self.go, 1)
            self.go = None


def test_a_second_resume_of_a_run_in_progress_is_refused(tmp_path):
    torch.set_num_threads(1)
    config = kill_config(write_walks(tmp_path / "walks.txt"))
    baseline = train(config, tmp_path / "uninterrupted", show_progress=False).run_dir
    out = tmp_path / "run"
    with suppress(_Stop):  # an interrupted run: the first epoch's state saved
        train(config, out, [_StopAfterFirstEpoch()], show_progress=False)
    ready_read, ready_write = os.pipe()
    go_read, go_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the first --resume, paused mid-run; never returns into pytest
        with suppress(BaseException):
            quiet = os.open(os.devnull, os.O_WRONLY)
            os.dup2(quiet, 1)
            os.dup2(quiet, 2)
            pause = _PauseAtEpochEnd(ready_write, go_read)
            train(RunConfig(), out, [pause], resume=True, show_progress=False)
        os._exit(0)
    try:
        assert os.read(ready_read, 1) == b"1"  # the child is training, and holds the run
        result = CliRunner().invoke(app, ["train", "--resume", str(out)])
        assert result.exit_code == 1, result.output
        assert f"another process is working in this run (process {pid} on " in result.output
    finally:
        os.write(go_write, b"1")
        os.waitpid(pid, 0)
    check_same_run(out, baseline)  # the first resume finished the run as if never stopped
