"""The hostile-input corpus's machinery: a case, what it must end in, and running it.

A ``Case`` writes its input into a fresh folder (``Workspace``) and returns the ``attnsvm``
arguments that read it; the command runs in-process (``CliRunner``, through the real app and its
error boundary) under a timeout. Its outcome is one of:

- ``refused``: exit status 1 and one line ``error: …`` that matches the case's pattern (the
  file and line, or the setting), carries no raw control character and is of bounded length;
- ``accepted``: exit status 0 and the case's check of the result holds (a legitimate variant
  read correctly: nothing silently wrong);
- ``usage``: exit status 2, click's own message about a malformed option;
- and the failures the corpus exists to rule out: ``traceback`` (an exception escaped the
  boundary), ``hang`` (the timeout fired), ``wrong`` (any other mismatch with the expectation).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.errors import MESSAGE_LIMIT
from attnsvm.rec.config import (
    DataConfig,
    EvalConfig,
    ModelChoice,
    RunConfig,
    TrainConfig,
    save_config,
)
from attnsvm.rec.train import train
from attnsvm.rec.train.callbacks import AttentionSnapshots

# run as scripts (reliability_kill.py, reliability_corpus.py) the repository is not on the path
sys.path.append(str(Path(__file__).resolve().parents[2]))
from tests.walks import NUM_ITEMS as NUM_ITEMS
from tests.walks import write_walks as write_walks

CASE_SECONDS = 60  # far above any case's time; only a hang reaches it
REFUSED, ACCEPTED, USAGE = "refused", "accepted", "usage"
FAILURES = ("traceback", "hang", "wrong")


def tiny_config(data: Path, epochs: int = 2) -> RunConfig:
    """A 1-block SASRec+ of width 16 on ``data``: a run takes a fraction of a second."""
    model = {"hidden_size": 16, "ffn_size": 16, "num_blocks": 1}
    return RunConfig(
        model=ModelChoice("sasrec+", model),
        data=DataConfig(dataset=str(data), max_len=12),
        train=TrainConfig(epochs=epochs, batch_size=32, lr=1e-2, num_threads=1),
        eval=EvalConfig(ks=(1, 10), batch_size=64),
    )


class _Interrupt(Exception):
    pass


class _InterruptAfterFirstEpoch:
    def on_epoch_end(self, state) -> None:
        raise _Interrupt


@dataclass(frozen=True)
class SharedInputs:
    walks: Path  # a tiny learnable per-user file (120 users, 30 items)
    config: Path  # tiny_config(walks) as TOML, one epoch
    trained: Path  # a finished run of tiny_config(walks) (two epochs, attention snapshots)
    interrupted: Path  # the same run interrupted after its first epoch (resume.pt)


def make_shared_inputs(root: Path) -> SharedInputs:
    walks = write_walks(root / "walks.txt")
    save_config(replace(tiny_config(walks), train=replace(tiny_config(walks).train, epochs=1)),
                root / "one-epoch.toml")  # fmt: skip
    trained = train(
        tiny_config(walks), root / "trained", [AttentionSnapshots()], show_progress=False
    ).run_dir
    with contextlib.suppress(_Interrupt):  # a run stopped after its first epoch's state
        train(tiny_config(walks), root / "interrupted", [_InterruptAfterFirstEpoch()],
              show_progress=False)  # fmt: skip
    return SharedInputs(walks, root / "one-epoch.toml", trained, root / "interrupted.incomplete")


@dataclass
class Workspace:
    """A case's own folder, with the shared read-only inputs it may copy."""

    root: Path
    shared: SharedInputs
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    @property
    def walks(self) -> Path:
        return self.shared.walks

    def file(self, name: str, data: bytes | str) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            data = data.encode()
        path.write_bytes(data)
        return path

    def copy_run(self, source: Path | None = None, name: str = "run") -> Path:
        """A copy of the trained run (or of ``source``) to damage."""
        source = source or self.shared.trained
        target = self.root / (name + (".incomplete" if source.name.endswith(".incomplete") else ""))
        shutil.copytree(source, target)
        return target


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # the class of input: a row of the table in benchmarks/RESULTS.md
    build: Callable[[Workspace], list[str]]  # writes the input, returns the arguments
    expect: str  # REFUSED, ACCEPTED or USAGE
    pattern: str = ""  # refused/usage: a regex the message must match
    check: Callable[[Workspace, str], None] | None = None  # asserts on the output and files


def refused(name: str, kind: str, build, pattern: str, check=None) -> Case:
    return Case(name, kind, build, REFUSED, pattern, check)


def accepted(name: str, kind: str, build, check=None) -> Case:
    return Case(name, kind, build, ACCEPTED, check=check)


def usage(name: str, kind: str, build, pattern: str) -> Case:
    return Case(name, kind, build, USAGE, pattern)


class _CaseTimeout(BaseException):  # not an Exception: nothing in the package may catch it
    pass


def _alarm(signum, frame):
    raise _CaseTimeout


@dataclass(frozen=True)
class Outcome:
    result: str  # REFUSED, ACCEPTED, USAGE or one of FAILURES
    detail: str


def run_case(case: Case, workspace: Workspace) -> Outcome:
    """Build and run ``case``; its outcome, judged against what the case expects."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        arguments = case.build(workspace)
        result = CliRunner().invoke(app, arguments)
    except _CaseTimeout:
        return Outcome("hang", f"no answer in {CASE_SECONDS} s")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        for cleanup in reversed(workspace.cleanups):
            cleanup()
    output = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return Outcome("traceback", f"{type(result.exception).__name__}: {result.exception}")
    return _judge(case, workspace, result.exit_code, output)


def _judge(case: Case, workspace: Workspace, code: int, output: str) -> Outcome:
    if "Traceback" in output:
        return Outcome("traceback", output[-2000:])
    if case.expect == ACCEPTED:
        if code != 0:
            return Outcome("wrong", f"exit {code}: {output[-1000:]}")
        try:
            if case.check is not None:
                case.check(workspace, output)
        except AssertionError as error:
            return Outcome("wrong", f"accepted, but the result is wrong: {error}")
        return Outcome(ACCEPTED, "")
    if case.expect == USAGE:
        if code != 2 or not re.search(case.pattern, output, re.DOTALL):
            return Outcome("wrong", f"exit {code}: {output[-1000:]}")
        return Outcome(USAGE, "")
    lines = [line for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    if code != 1 or len(errors) != 1:
        return Outcome("wrong", f"exit {code}: {output[-1000:]}")
    message = errors[0]
    if not re.search(case.pattern, message):
        return Outcome("wrong", f"message does not match {case.pattern!r}: {message[:1000]}")
    if len(message) > MESSAGE_LIMIT + 20 or re.search(r"[\x00-\x08\x0b-\x1f\x7f]", message):
        return Outcome("wrong", f"message too long or with control characters: {message[:300]}")
    try:
        if case.check is not None:
            case.check(workspace, output)
    except AssertionError as error:
        return Outcome("wrong", f"refused, but: {error}")
    return Outcome(REFUSED, message)
