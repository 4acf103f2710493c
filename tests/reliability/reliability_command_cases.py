"""Hostile requests to the commands added since the first corpus (``tune``, ``rl``, ``stream``,
``export``, ``serve``, ``recommend --all``), output paths that can never be written, and
decompression and expansion bombs.

A refused request writes nothing: no run directory, no ``.incomplete`` folder, no simulator
folder, no export (``_nothing_left``), and a request refused for its data is refused the same
way when it is given again (nothing of the first attempt is in its way)."""

from __future__ import annotations

import gzip
import json
import os
import pickle

import numpy as np
from reliability_config_cases import train_arguments
from reliability_harness import Case, accepted, refused
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.rec.data.datasets import load_dataset
from attnsvm.rec.sim.simulator import FitSettings, fit_simulator

COMMAND, OUTPUT, BOMB = "tune/rl/stream/export request", "output path", "bomb"
SERVE = "serve / recommend --all request"
SIMULATOR_ITEMS = 10


def _ratings(workspace) -> str:
    """A MovieLens ``ratings.csv``: 30 users rate 8 of 12 items 1–5, a second apart."""
    rng = np.random.default_rng(0)
    lines = ["userId,movieId,rating,timestamp"]
    for user in range(1, 31):
        for step, item in enumerate(rng.choice(12, size=8, replace=False) + 1):
            lines.append(f"{user},{item},{rng.integers(1, 6)}.0,{user * 100 + step}")
    return str(workspace.file("ratings.csv", "\n".join(lines) + "\n"))


def _simulator(workspace) -> str:
    settings = FitSettings(groups=2, items=SIMULATOR_ITEMS, factors=2)
    folder = workspace.root / "sim"
    fit_simulator(load_dataset(_ratings(workspace)), settings).save(folder)
    return str(folder)


def _baseline_on_ratings(workspace) -> str:
    """A finished popularity run on the rated file (leave-one-out)."""
    arguments = ["train", "--model", "pop", "--data", _ratings(workspace), "--no-progress",
                 "--set", "eval.ks=1,10"]  # fmt: skip
    result = CliRunner().invoke(app, [*arguments, "--out", str(workspace.root / "pop")])
    assert result.exit_code == 0, result.output
    return str(workspace.root / "pop")


def _dangling(workspace, name: str) -> str:
    os.symlink(workspace.root / "nowhere" / name, workspace.root / name)
    return str(workspace.root / name)


def _directory(workspace, name: str) -> str:
    (workspace.root / name).mkdir()
    return str(workspace.root / name)


def _nothing_left(*names: str):
    def check(workspace, output: str) -> None:
        left = {p.name for p in workspace.root.rglob("*")}
        written = {n for n in left for name in names if n in (name, f"{name}.incomplete")}
        temporaries = {n for n in left if ".tmp" in n}
        assert not written and not temporaries, sorted(written | temporaries)

    return check


def _twice(workspace, arguments: list[str]) -> list[str]:
    """``arguments`` run once here; the case runs them again, which must say the same."""
    CliRunner().invoke(app, arguments)
    return arguments


def _stream_config(workspace, config: dict) -> list[str]:
    run = workspace.root / "s.incomplete"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(config))
    return ["stream", "--out", str(workspace.root / "s"), "--resume"]


def _tune(workspace, space: bytes | str | None, *, study: bytes | None = None) -> list[str]:
    """``tune`` with ``space`` as its search-space file (None: a directory in its place) and
    ``study`` as the study.db already there."""
    out = workspace.root / "study"
    if study is not None:
        out.mkdir()
        (out / "study.db").write_bytes(study)
    space_file = workspace.root if space is None else workspace.file("space.toml", space)
    config = str(workspace.shared.config)
    return ["tune", "--config", config, "--space", str(space_file), "--out", str(out)]


SPACE = "[train.lr]\nlow = 1e-3\nhigh = 1e-2\nlog = true\n"


def _request_cases() -> list[Case]:
    episodes = lambda w, *o: ["rl", "episodes", _simulator(w), "--policy", "random", *o]  # noqa: E731
    fit = lambda w, *o: ["rl", "simulator", "--data", _ratings(w), "--out", str(w.root / "fitted"),  # noqa: E731
                         "--groups", "2", "--items", "10", *o]  # fmt: skip
    run = lambda w: str(w.copy_run())  # noqa: E731
    return [
        refused("rl episodes --steps 0", COMMAND, lambda w: episodes(w, "--steps", "0"),
                r"--steps must lie in \[1, 2,147,483,647\], got 0"),
        refused("rl episodes --steps beyond the simulator's catalogue", COMMAND,
                lambda w: episodes(w, "--steps", "11"),
                r"episode steps must lie in 1\.\.10 \(the simulator's catalogue\), got 11"),
        refused("rl episodes --users -1", COMMAND, lambda w: episodes(w, "--users", "-1"),
                r"--users must lie in \[1, 1,000,000\], got -1"),
        refused("rl episodes --seed 2^64", COMMAND, lambda w: episodes(w, "--seed", str(2**64)),
                r"--seed must lie in \[0, 9,223,372,036,854,775,807\]"),
        refused("rl simulator --shrinkage nan", COMMAND, lambda w: fit(w, "--shrinkage", "nan"),
                r"--shrinkage must be a finite number, got nan", _nothing_left("fitted")),
        refused("rl simulator --shrinkage -1", COMMAND, lambda w: fit(w, "--shrinkage", "-1"),
                r"--shrinkage must lie in \[0, ∞\], got -1", _nothing_left("fitted")),
        refused("rl simulator --items beyond the catalogue", COMMAND,
                lambda w: fit(w, "--items", "13"), r"simulator items 13 > the 12 items",
                _nothing_left("fitted")),
        refused("rl simulator --groups 0", COMMAND, lambda w: fit(w, "--groups", "0"),
                r"--groups must lie in \[1, ", _nothing_left("fitted")),
        refused("rl rlt4rec --steps beyond the simulator's catalogue", COMMAND,
                lambda w: ["rl", "rlt4rec", _simulator(w), "--out", str(w.root / "r"),
                           "--steps", "11"],
                r"steps 11 > the simulator's 10 items", _nothing_left("r")),
        refused("rl rated --threshold nan", COMMAND,
                lambda w: ["rl", "rated", run(w), "--threshold", "nan"],
                r"--threshold must be a finite number, got nan"),
        refused("rl rated --threshold above every rating", COMMAND,
                lambda w: ["rl", "rated", _baseline_on_ratings(w), "--threshold", "6"],
                r"no user rated their held-out target ≥ 6\.0 \(the ratings lie in 1\.\.5\)"),
        refused("rl rated on a run without ratings", COMMAND,
                lambda w: ["rl", "rated", run(w)], r"has no ratings"),
        refused("rl crr on a baseline run", COMMAND,
                lambda w: ["rl", "crr", _baseline_on_ratings(w), "--out", str(w.root / "c")],
                r"pop: a 'pop' baseline run has no network to start from",
                _nothing_left("c")),
        refused("rl crr on a run without ratings", COMMAND,
                lambda w: ["rl", "crr", run(w), "--out", str(w.root / "c")],
                r"CRR needs ratings as rewards", _nothing_left("c")),
        refused("rl crr --set crr.like_threshold=nan", COMMAND,
                lambda w: ["rl", "crr", run(w), "--out", str(w.root / "c"),
                           "--set", "crr.like_threshold=nan"],
                r"crr.like_threshold must be a finite number", _nothing_left("c")),
        refused("stream --resume a config.json with 'model': 5", COMMAND,
                lambda w: _stream_config(w, {"model": 5}),
                r"s.incomplete/config.json: 'model' must be a table of settings, got int 5"),
        refused("stream --resume a config.json with 'stream': []", COMMAND,
                lambda w: _stream_config(w, {"stream": []}),
                r"config.json: 'stream' must be a table of settings, got list \[\]"),
        refused("stream on data without times, given twice", COMMAND,
                lambda w: _twice(w, ["stream", "--out", str(w.root / "s"), "--data",
                                     str(w.walks)]),
                r"walks.txt: has no event times", _nothing_left("s")),
        refused("stream --set stream.lr=nan", COMMAND,
                lambda w: ["stream", "--out", str(w.root / "s"), "--set", "stream.lr=nan"],
                r"stream.lr must be a finite number", _nothing_left("s")),
        refused("tune --trials 0", COMMAND, lambda w: [*_tune(w, SPACE), "--trials", "0"],
                r"--trials must lie in \[1, 1,000,000\], got 0", _nothing_left("study")),
        refused("tune with a search space in Latin-1", COMMAND,
                lambda w: _tune(w, SPACE.replace("log", "# caf\xe9\nlog").encode("latin-1")),
                r"space.toml: cannot read the search space \(is not UTF-8 text",
                _nothing_left("study")),
        refused("tune with a search space that is a directory", COMMAND,
                lambda w: _tune(w, None),
                r"cannot read the search space \(is a directory"),
        refused("tune on a damaged study.db", COMMAND,
                lambda w: _tune(w, SPACE, study=b"SQLite format 3\x00" + bytes(range(256)) * 8),
                r"study/study.db: is not a readable Optuna study \(file is not a database\)"),
        refused("tune on a study.db of text", COMMAND,
                lambda w: _tune(w, SPACE, study=b"not a database\n"),
                r"study.db: is not a readable Optuna study"),
        refused("train a baseline whose eval.ks exceed the catalogue", COMMAND,
                lambda w: ["train", "--model", "pop", "--data", _ratings(w), "--out",
                           str(w.root / "pop")],
                r"eval.ks cut-off 20 exceeds the catalogue of 12 items", _nothing_left("pop")),
        refused("export --format bogus", COMMAND,
                lambda w: ["export", run(w), "--format", "[b]x"], r"format must be one of"),
    ]  # fmt: skip


def _output_cases() -> list[Case]:
    run = lambda w: str(w.copy_run())  # noqa: E731
    return [
        refused("train --out a dangling symbolic link", OUTPUT,
                lambda w: [*train_arguments(w)[:-2], "--out", _dangling(w, "run")],
                r"run: is a dangling symbolic link \(to .*nowhere/run\): remove it",
                _nothing_left("nowhere")),
        refused("train --out whose .incomplete is a dangling link", OUTPUT,
                lambda w: [*train_arguments(w)[:-2], "--out",
                           _dangling(w, "x.incomplete").removesuffix(".incomplete")],
                r"x.incomplete: is a dangling symbolic link"),
        refused("stream --out a dangling symbolic link", OUTPUT,
                lambda w: ["stream", "--out", _dangling(w, "s"), "--data", str(w.walks)],
                r"s: is a dangling symbolic link"),
        refused("export --out a dangling symbolic link", OUTPUT,
                lambda w: ["export", run(w), "--format", "torchscript", "--out",
                           _dangling(w, "m.pt")],
                r"m.pt: is a dangling symbolic link", _nothing_left("m.pt.json")),
        refused("export --out a directory", OUTPUT,
                lambda w: ["export", run(w), "--format", "torchscript", "--out",
                           _directory(w, "d.pt")], r"d.pt: Is a directory"),
        refused("lens --out a dangling symbolic link", OUTPUT,
                lambda w: ["lens", run(w), "--sequences", "2", "--out", _dangling(w, "lens")],
                r"lens: is a dangling symbolic link"),
        refused("rl simulator --out under a file", OUTPUT,
                lambda w: ["rl", "simulator", "--data", _ratings(w), "--out",
                           str(w.file("f", "x") / "sim")], r"f: Not a directory"),
        refused("rl episodes --out a dangling symbolic link", OUTPUT,
                lambda w: ["rl", "episodes", _simulator(w), "--policy", "random", "--out",
                           _dangling(w, "e")], r"e: is a dangling symbolic link"),
        refused("tune --out a file", OUTPUT, lambda w: [*_tune(w, SPACE)[:-1],
                                                        str(w.file("o", "x"))],
                r"o: Not a directory"),
    ]  # fmt: skip


def _titles(workspace, header: str) -> str:
    return str(workspace.file("titles.csv", f"{header}\n1,a,b\n2,c,d\n"))


def _serve_cases() -> list[Case]:
    """Refused before the server listens (an accepted one would serve until stopped)."""
    serve = lambda w, *o: ["serve", str(w.copy_run()), *o]  # noqa: E731
    everyone = lambda w, *o: ["recommend", str(w.copy_run()), "--all", *o]  # noqa: E731
    return [
        refused("serve --port 70000", SERVE, lambda w: serve(w, "--port", "70000"),
                r"--port must lie in \[0, 65,535\], got 70000"),
        refused("serve --batch-wait-ms nan", SERVE, lambda w: serve(w, "--batch-wait-ms", "nan"),
                r"--batch-wait-ms must be a finite number, got nan"),
        refused("serve --workers 0", SERVE, lambda w: serve(w, "--workers", "0"),
                r"--workers must lie in \[1, "),
        refused("serve --titles with the title column named twice", SERVE,
                lambda w: serve(w, "--titles", _titles(w, "item,name,name"),
                                "--title-columns", "item=item,title=name"),
                r"titles.csv:1: has 2 columns named 'name' \(0-based columns 1, 2\)"),
        refused("recommend --all without --out", SERVE, lambda w: everyone(w),
                r"--all needs --out FILE.parquet"),
        refused("recommend --all --out a .csv", SERVE,
                lambda w: everyone(w, "--out", str(w.root / "r.csv")),
                r"out must be a .parquet file", _nothing_left("r.csv")),
        refused("recommend --all --out a dangling symbolic link", SERVE,
                lambda w: everyone(w, "--out", _dangling(w, "r.parquet")),
                r"r.parquet: is a dangling symbolic link", _nothing_left("nowhere")),
        refused("recommend --all --out a directory", SERVE,
                lambda w: everyone(w, "--out", _directory(w, "d.parquet")),
                r"d.parquet: Is a directory"),
        refused("recommend --all --histories bogus", SERVE,
                lambda w: everyone(w, "--histories", "bogus", "--out", str(w.root / "r.parquet")),
                r"histories must be one of full, test, valid", _nothing_left("r.parquet")),
        refused("recommend --all -k beyond the catalogue", SERVE,
                lambda w: everyone(w, "-k", "31", "--out", str(w.root / "r.parquet")),
                r"k=31 exceeds the catalogue \(30 items\)", _nothing_left("r.parquet")),
    ]  # fmt: skip


def _capped(workspace, variable: str, value: str | None) -> None:
    """``variable`` set to ``value`` for this case only (None: left as it is)."""
    if value is None:
        return
    previous = os.environ.get(variable)
    os.environ[variable] = value

    def restore() -> None:
        if previous is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = previous

    workspace.cleanups.append(restore)


def _gzip_table(workspace, rows: int, cap: str) -> list[str]:
    """``data stats`` of a gzipped CSV of ``rows`` rows, with ``cap`` decompressed bytes."""
    _capped(workspace, "ATTNSVM_MAX_DECOMPRESSED_BYTES", cap)
    text = "user,item\n" + "".join(f"{1 + k % 5},{1 + k % 7}\n" for k in range(rows))
    path = workspace.file("t.csv.gz", gzip.compress(text.encode(), mtime=0))
    return ["data", "stats", str(path), "--columns", "user=user,item=item"]


def _session_pickle(workspace, references: int, length: int, cap: str | None = None) -> list[str]:
    """``data prepare diginetica`` from SR-GNN's ``all_train_seq.txt`` holding one session of
    ``length`` items ``references`` times (a pickle stores it once), with ``cap`` events."""
    _capped(workspace, "ATTNSVM_MAX_EVENTS", cap)
    session = list(range(1, length + 1))
    path = workspace.file("dg/all_train_seq.txt", pickle.dumps([session] * references, 2))
    return ["data", "prepare", "diginetica", "--from", str(path), "--no-verify",
            "--cache-dir", str(workspace.root / "cache")]  # fmt: skip


def _read_rows(rows: int):
    def check(workspace, output: str) -> None:
        assert f"read {rows:,} rows" in output, output[-500:]

    return check


def _prepared(name: str):
    def check(workspace, output: str) -> None:
        assert f"prepared {name}" in output, output[-500:]

    return check


def _bomb_cases() -> list[Case]:
    cap = r"over the cap of [\d,]+ that guards against decompression and expansion bombs: set "
    return [
        refused("a gzip table past the decompressed-size cap", BOMB,
                lambda w: _gzip_table(w, 20_000, cap="4096"),
                r"t.csv.gz: decompresses to at least [\d,]+ bytes, " + cap
                + "ATTNSVM_MAX_DECOMPRESSED_BYTES higher"),
        accepted("a gzip table under the cap", BOMB,
                 lambda w: _gzip_table(w, 200, cap="4096"), _read_rows(200)),
        refused("an SR-GNN pickle of one session referenced 200,000 times", BOMB,
                lambda w: _session_pickle(w, 200_000, 3000),
                r"all_train_seq.txt: its sessions expand to 600,000,000 events, " + cap
                + "ATTNSVM_MAX_EVENTS higher", _nothing_left("cache")),
        refused("an SR-GNN pickle past a cap set low", BOMB,
                lambda w: _session_pickle(w, 11, 5, cap="50"),
                r"its sessions expand to 55 events, over the cap of 50", _nothing_left("cache")),
        accepted("an SR-GNN pickle at a cap set low", BOMB,
                 lambda w: _session_pickle(w, 11, 5, cap="55"), _prepared("diginetica")),
        refused("ATTNSVM_MAX_EVENTS that is not a number", BOMB,
                lambda w: _session_pickle(w, 2, 2, cap="nan"),
                r"environment: ATTNSVM_MAX_EVENTS must be int, got 'nan'"),
        refused("ATTNSVM_MAX_DECOMPRESSED_BYTES of 0", BOMB,
                lambda w: _gzip_table(w, 10, cap="0"),
                r"environment: ATTNSVM_MAX_DECOMPRESSED_BYTES must lie in \[1, "),
    ]  # fmt: skip


def command_cases() -> list[Case]:
    return _request_cases() + _serve_cases() + _output_cases() + _bomb_cases()
