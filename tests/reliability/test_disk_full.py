"""A full disk under every writer of ``train``, ``data prepare``, ``export``, ``recommend --all``,
``lens``, ``rl simulator``, ``rl episodes`` and ``stream``: one line naming the file that could
not be written, nothing half-written left behind (no temporary file, no partial export, simulator,
recommendation table or prepared table, no folder the command created), and once space is freed
the same command, or its ``--resume``, finishes with the results of a run that never met a full
disk.

The disk is ``full_disk.FullDisk``: from its k-th write on, every write raises
``OSError(ENOSPC)``. Each writer is tried with the disk filling at its first write, at its last,
and between."""

from __future__ import annotations

import errno
import json
import re
from pathlib import Path

import numpy as np
import pytest
from full_disk import FullDisk
from reliability_config_cases import train_arguments
from reliability_harness import Workspace
from typer.testing import CliRunner

from attnsvm._atomic import atomic_files, atomic_path
from attnsvm.cli.main import app
from attnsvm.rec.train.checkpoint import read_metrics

FULL = "No space left on device"


@pytest.fixture
def disk(monkeypatch) -> FullDisk:
    return FullDisk().install(monkeypatch)


def invoke(arguments: list[str]):
    return CliRunner().invoke(app, arguments)


def refused_for_space(result) -> Path:
    """The file the one error line names as not written for want of space (the lines before it
    are the epochs a run finished)."""
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert result.exit_code == 1 and len(errors) == 1, result.output
    assert "Traceback" not in result.output, result.output
    match = re.fullmatch(rf"error: (.+): {FULL}", errors[0])
    assert match is not None, errors[0]
    return Path(match[1])


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def no_temporaries(folder: Path) -> None:
    stray = [name for name in files_under(folder) if ".tmp" in name]
    assert not stray, stray


def fill_points(writes: int) -> list[int]:
    """The first write, the last, and three between."""
    return sorted({1, writes // 4, writes // 2, 3 * writes // 4, writes} - {0})


def writes_of(disk: FullDisk, arguments: list[str]) -> int:
    """How many writes ``arguments`` make on a disk with room (it must succeed)."""
    disk.count()
    result = invoke(arguments)
    assert result.exit_code == 0, result.output
    return disk.writes


# -- the writer itself ------------------------------------------------------------------------


def test_a_failed_write_names_its_destination_and_leaves_nothing(tmp_path, disk):
    disk.fill_from(1)
    with pytest.raises(OSError) as raised, atomic_path(tmp_path / "a.json") as temporary:
        temporary.write_text("{}")
    assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, str(tmp_path / "a.json"))
    assert files_under(tmp_path) == []


def test_files_written_together_are_all_kept_or_none(tmp_path, disk):
    folder = tmp_path / "new" / "nested"
    disk.fill_from(2)
    with pytest.raises(OSError, match=FULL), atomic_files(folder) as temporary:
        temporary("one.txt").write_text("1")
        temporary("two.txt").write_text("2")
    assert files_under(tmp_path) == []  # the folders it created are gone too
    disk.free()
    with atomic_files(folder) as temporary:
        temporary("one.txt").write_text("1")
        temporary("two.txt").write_text("2")
    assert files_under(folder) == ["one.txt", "two.txt"]


# -- train ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def uninterrupted(shared_inputs, tmp_path_factory) -> tuple[int, dict]:
    """A one-epoch run on a disk with room: how many writes it makes, and its test metrics."""
    workspace = Workspace(tmp_path_factory.mktemp("uninterrupted"), shared_inputs)
    with pytest.MonkeyPatch.context() as patch:
        writes = writes_of(FullDisk().install(patch), train_arguments(workspace))
    return writes, read_metrics(workspace.root / "run")["test"]


@pytest.mark.parametrize("share", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_train_on_a_full_disk_resumes_to_the_same_run(share, uninterrupted, shared_inputs,
                                                      tmp_path, disk):  # fmt: skip
    writes, test_metrics = uninterrupted
    workspace = Workspace(tmp_path, shared_inputs)
    disk.fill_from(max(1, round(share * writes)))
    named = refused_for_space(invoke(train_arguments(workspace)))
    assert named.is_relative_to(tmp_path / "run.incomplete"), named
    no_temporaries(tmp_path)
    disk.free()
    started = (tmp_path / "run.incomplete" / "config.json").is_file()
    again = ["train", "--resume", str(tmp_path / "run")] if started else train_arguments(workspace)
    result = invoke(again)
    assert result.exit_code == 0, result.output
    assert read_metrics(tmp_path / "run")["test"] == test_metrics
    assert files_under(tmp_path)[0] == "run" and not (tmp_path / "run.incomplete").exists()
    no_temporaries(tmp_path)


# -- data prepare --------------------------------------------------------------------------------


def _udata(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    rows = [f"{u}\t{rng.integers(1, 40)}\t{rng.integers(1, 6)}\t{1000 + k}"
            for u in range(1, 31) for k in range(25)]  # fmt: skip
    path = tmp_path / "raw" / "u.data"
    path.parent.mkdir()
    path.write_text("\n".join(rows) + "\n")
    return path


PREPARE = {
    "registered": lambda raw, cache: ["data", "prepare", "ml-100k", "--no-verify", "--from",
                                      str(raw), "--cache-dir", str(cache)],
    "own table": lambda raw, cache: ["data", "prepare", "--from", str(raw), "--columns",
                                     "user=0,item=1,time=2", "--format", "tsv", "--name", "mine",
                                     "--cache-dir", str(cache)],
}  # fmt: skip


@pytest.mark.parametrize("kind", PREPARE)
def test_data_prepare_on_a_full_disk_leaves_no_table(kind, tmp_path, disk):
    raw, cache = _udata(tmp_path), tmp_path / "cache"
    arguments = PREPARE[kind](raw, cache)
    writes = writes_of(disk, arguments)
    prepared = files_under(cache)
    for write in fill_points(writes):
        for path in cache.iterdir():  # prepared again from nothing each time
            for file in path.iterdir():
                file.unlink()
            path.rmdir()
        disk.fill_from(write)
        named = refused_for_space(invoke(arguments))
        assert named.is_relative_to(cache), named
        assert files_under(cache) == [], (write, files_under(cache))
        disk.free()
        assert invoke(arguments).exit_code == 0
        assert files_under(cache) == prepared


# -- export, recommend --all, lens, rl --------------------------------------------------------


def _simulator(tmp_path: Path) -> Path:
    ratings = _udata(tmp_path)
    folder = tmp_path / "sim"
    fit = ["rl", "simulator", "--data", str(ratings), "--out", str(folder), "--groups", "2",
           "--items", "20", "--factors", "2"]  # fmt: skip
    assert invoke(fit).exit_code == 0
    return folder


WRITERS = {  # writer → (arguments, the folder it writes, whether the folder is its own)
    "export torchscript": lambda w: (
        ["export", str(w.copy_run()), "--format", "torchscript"], w.root / "run" / "export"),
    "recommend --all --out": lambda w: (
        ["recommend", str(w.copy_run()), "--all", "--out", str(w.root / "recs" / "all.parquet")],
        w.root / "recs"),
    "lens --out": lambda w: (
        ["lens", str(w.copy_run()), "--sequences", "4", "--out", str(w.root / "lens")],
        w.root / "lens"),
    "rl simulator --out": lambda w: (
        ["rl", "simulator", "--data", str(_udata(w.root)), "--out", str(w.root / "fitted"),
         "--groups", "2", "--items", "20", "--factors", "2"], w.root / "fitted"),
    "rl episodes --out": lambda w: (
        ["rl", "episodes", str(_simulator(w.root)), "--policy", "oracle", "--policy", "random",
         "--users", "3", "--steps", "5", "--out", str(w.root / "episodes")], w.root / "episodes"),
}  # fmt: skip


@pytest.mark.parametrize("writer", WRITERS)
def test_a_writer_on_a_full_disk_leaves_nothing_and_runs_again(writer, shared_inputs, tmp_path,
                                                               disk):  # fmt: skip
    arguments, folder = WRITERS[writer](Workspace(tmp_path, shared_inputs))
    writes = writes_of(disk, arguments)
    written = files_under(folder)
    for write in fill_points(writes):
        for file in folder.iterdir():
            file.unlink()
        folder.rmdir()
        disk.fill_from(write)
        named = refused_for_space(invoke(arguments))
        assert named.parent == folder and named.name in written, named
        assert not folder.exists()
        no_temporaries(tmp_path)
        disk.free()
        assert invoke(arguments).exit_code == 0
        assert files_under(folder) == written


# -- stream --------------------------------------------------------------------------------------


def test_stream_on_a_full_disk_resumes_to_the_same_run(tmp_path, disk):
    events = _udata(tmp_path)
    settings = ["stream.chunk_size=100", "stream.save_every=2", "stream.log_every=2",
                "model.hidden_size=16", "model.num_blocks=1"]  # fmt: skip
    arguments = ["stream", "--data", str(events), *(a for s in settings for a in ("--set", s))]
    writes = writes_of(disk, [*arguments, "--out", str(tmp_path / "ref")])
    reference = json.loads((tmp_path / "ref" / "metrics.json").read_text())
    for write in fill_points(writes):
        out = tmp_path / f"s{write}"
        disk.fill_from(write)
        named = refused_for_space(invoke([*arguments, "--out", str(out)]))
        assert named.is_relative_to(tmp_path / f"s{write}.incomplete"), named
        no_temporaries(tmp_path)
        disk.free()
        started = (tmp_path / f"s{write}.incomplete" / "config.json").is_file()
        again = ["stream", "--out", str(out), "--resume"] if started else [*arguments, "--out",
                                                                              str(out)]  # fmt: skip
        result = invoke(again)
        assert result.exit_code == 0, result.output
        metrics = json.loads((out / "metrics.json").read_text())
        same = ("HR@10", "NDCG@10", "log_loss", "chunks")
        assert {k: metrics[k] for k in same} == {k: reference[k] for k in same}, write
