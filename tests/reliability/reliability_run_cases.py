"""Damaged run files, run states and requests: run files damaged in a copy of a finished run
and read by ``evaluate``, ``recommend``, ``compare`` and ``lens``; run states made from a run
interrupted after its first epoch and resumed with ``train --resume``; requests with odd
options."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil

from reliability_config_cases import deep_json, train_arguments
from reliability_harness import Case, accepted, refused, usage
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.rec.train.checkpoint import read_metrics
from attnsvm.rec.train.run_lock import RunLock

RUN_FILE, RUN_STATE, REQUEST = "damaged run file", "run state", "request"


def _damage(workspace, name: str, data: bytes | str | None = None, *, cut: int | None = None):
    run = workspace.copy_run()
    target = run / name
    if cut is not None:
        data = target.read_bytes()[:cut]
    if data is None:
        target.unlink()
    else:
        target.write_bytes(data.encode() if isinstance(data, str) else data)
    return run


def _model_json(**changes) -> str:
    info = {"model": "sasrec", "model_config": {"hidden_size": 16}, "num_items": 30, **changes}
    return json.dumps(info)


class _Hostile:  # unpickling it runs a command: resume.pt must never be unpickled that way
    def __reduce__(self):
        return (exec, ("open('UNPICKLED', 'w').close()",))


def _never_unpickled(workspace, output: str) -> None:
    assert not any(p.name == "UNPICKLED" for p in workspace.root.rglob("*")), "unpickled"


def _resume_with(workspace, data: bytes) -> list[str]:
    run = workspace.copy_run(workspace.shared.interrupted)
    (run / "resume.pt").write_bytes(data)
    return ["train", "--resume", str(run)]


def _resume_from_another_model(workspace) -> list[str]:
    import torch

    run = workspace.copy_run(workspace.shared.interrupted)
    state = torch.load(run / "resume.pt", weights_only=True)
    state["model"] = {"items.input.weight": torch.zeros(3, 3)}
    torch.save(state, run / "resume.pt")
    return ["train", "--resume", str(run)]


def _run_file_cases() -> list[Case]:
    weights = "model.safetensors"
    shape_of_another = _model_json(model_config={"hidden_size": 32})
    by_command = {
        "evaluate": lambda run: ["evaluate", str(run)],
        "recommend": lambda run: ["recommend", str(run), "--user", "100"],
        "lens": lambda run: ["lens", str(run), "--sequences", "2"],
    }
    damages = {
        "a truncated model.safetensors": ((weights, None, 100), rf"{weights}: damaged weights"),
        "an empty model.safetensors": ((weights, b"", None), rf"{weights}: damaged weights"),
        "model.json {'model': 5}": (("model.json", '{"model": 5}', None), r"'model' is 5"),
        "model.json a list": (("model.json", "[]", None), r"model.json: damaged \(not a JSON"),
        "model.json 100,000 deep": (("model.json", deep_json(), None), r"nested too deeply"),
        "model.json an unknown model": (("model.json", _model_json(model="gpt5"), None),
                                        r"model.json: damaged \(unknown model 'gpt5'\)"),
        "model.json 10^12 items": (("model.json", _model_json(num_items=10**12), None),
                                   r"model.json: damaged \(num_items is"),
        "model.json a 10^9-wide model": (
            ("model.json", _model_json(model_config={"hidden_size": 10**9}), None),
            rf"{weights}: does not fit the model of model.json"),
        "model.json another model's sizes": (("model.json", shape_of_another, None),
                                             r"does not fit the model of model.json"),
        "model.json NaN dropout": (
            ("model.json", _model_json(model_config={"dropout": float("nan")}), None),
            r"model.json: damaged \(SASRecConfig.dropout must be a finite number"),
        "id_maps.json of the wrong length": (("id_maps.json", '{"items": [0], "users": []}',
                                              None), r"id_maps.json: damaged \(1 item ids"),
        "id_maps.json nested": (("id_maps.json", '{"items": [[1]], "users": []}', None),
                                r"id_maps.json: damaged \(items holds something other"),
        "id_maps.json missing": (("id_maps.json", None, None), r"id_maps.json is missing"),
        "config.json NaN": (("config.json", '{"train": {"lr": NaN}}', None),
                            r"config.json: train.lr must be a finite number"),
        "config.json damaged": (("config.json", "{", None), r"config.json: not valid json"),
    }  # fmt: skip
    cases = []
    for damage, ((name, data, cut), pattern) in damages.items():
        for command, arguments in by_command.items():
            cases.append(
                refused(
                    f"{command}: {damage}",
                    RUN_FILE,
                    lambda w, n=name, d=data, c=cut, a=arguments: a(_damage(w, n, d, cut=c)),
                    pattern,
                )
            )
    compare = lambda run: ["compare", str(run), str(run)]  # noqa: E731
    cases += [
        refused("compare: test_eval.json damaged", RUN_FILE,
                lambda w: compare(_damage(w, "test_eval.json", "{}")),
                r"test_eval.json: not a saved evaluation result"),
        refused("compare: test_eval.npz missing", RUN_FILE,
                lambda w: compare(_damage(w, "test_eval.npz")), r"test_eval.npz: no such file"),
        refused("compare: test_eval.npz garbage", RUN_FILE,
                lambda w: compare(_damage(w, "test_eval.npz", b"PK\x03\x04junk")),
                r"test_eval.npz: damaged"),
        refused("compare: test_eval.npz holding a pickled object", RUN_FILE,
                lambda w: compare(_damage(w, "test_eval.npz", _pickled_npz())),
                r"test_eval.npz: damaged", _never_unpickled),
        refused("lens: metrics.json damaged", RUN_FILE,
                lambda w: by_command["lens"](_damage(w, "metrics.json", '{"best_epoch": "x"}')),
                r"metrics.json: damaged"),
        refused("lens: an attention snapshot damaged", RUN_FILE,
                lambda w: by_command["lens"](_damage(w, "attention/epoch_0001.safetensors", b"x")),
                r"epoch_0001.safetensors: damaged attention snapshot"),
        refused("resume: resume.pt truncated", RUN_FILE,
                lambda w: _resume_with(w, (w.shared.interrupted / "resume.pt").read_bytes()[:999]),
                r"resume.pt: damaged resume state"),
        refused("resume: resume.pt a hostile pickle", RUN_FILE,
                lambda w: _resume_with(w, pickle.dumps(_Hostile(), protocol=2)),
                r"resume.pt: damaged resume state", _never_unpickled),
        refused("resume: resume.pt text", RUN_FILE, lambda w: _resume_with(w, b"hello"),
                r"resume.pt: damaged resume state"),
        refused("resume: resume.pt of another model", RUN_FILE, _resume_from_another_model,
                r"resume.pt: does not fit this run"),
    ]  # fmt: skip
    return cases


def _pickled_npz() -> bytes:
    import io

    import numpy as np

    buffer = io.BytesIO()
    np.savez(buffer, users=np.array([object(), 1], dtype=object))
    return buffer.getvalue()


def _same_metrics_as_trained(workspace, output: str) -> None:
    published = read_metrics(workspace.root / "run")
    assert published["test"] == read_metrics(workspace.shared.trained)["test"], published
    stray = [p.name for p in workspace.root.rglob("*") if re.match(r"\..*\.tmp|\.lock$", p.name)]
    assert not stray and not (workspace.root / "run.incomplete").exists(), stray


def _interrupted(workspace, *, drop: tuple[str, ...] = (), complete: bool = False) -> list[str]:
    run = workspace.copy_run(workspace.shared.interrupted)
    if complete:  # every result written, then killed before the rename
        for name in ("test_eval.json", "test_eval.npz", "metrics.json", "model.safetensors"):
            shutil.copy(workspace.shared.trained / name, run / name)
    for name in drop:
        (run / name).unlink()
    (run / ".model.safetensors.k1ll3d00.tmp.safetensors").write_bytes(b"half")  # killed mid-write
    return ["train", "--resume", str(run)]


def _held(workspace) -> list[str]:
    run = workspace.copy_run(workspace.shared.interrupted)
    lock = RunLock(run)  # another holder: an open file description of its own
    workspace.cleanups.append(lock.release)
    return ["train", "--resume", str(run)]


def _killed_before_config(workspace) -> list[str]:
    """The folder a start leaves when killed before its config: the same command goes on."""
    (workspace.root / "run.incomplete").mkdir()
    (workspace.root / "run.incomplete" / ".config.json.abcd1234.tmp.json").write_text("{")
    return train_arguments(workspace)


def _trained_again(workspace, output: str) -> None:
    assert read_metrics(workspace.root / "run")["epochs"] == 1
    assert sorted(p.name for p in workspace.root.iterdir()) == ["run"]
    assert not any(".tmp" in p.name for p in (workspace.root / "run").iterdir())


def _interrupted_baseline(workspace) -> list[str]:
    """A popularity baseline killed after its header, before its results."""
    arguments = [*train_arguments(workspace, "model=pop")[:-2], "--out", str(workspace.root / "b")]
    arguments.remove("--no-progress")
    assert CliRunner().invoke(app, arguments).exit_code == 0
    (workspace.root / "b").rename(workspace.root / "b.incomplete")
    for name in ("metrics.json", "test_eval.json", "test_eval.npz"):
        (workspace.root / "b.incomplete" / name).unlink()
    return ["train", "--resume", str(workspace.root / "b")]


def _baseline_published(workspace, output: str) -> None:
    assert read_metrics(workspace.root / "b")["epochs"] == 0
    assert not (workspace.root / "b.incomplete").exists()


def _state_cases() -> list[Case]:
    return [
        accepted("resume after the first epoch", RUN_STATE, _interrupted, _same_metrics_as_trained),
        accepted("resume before any epoch's state (no resume.pt)", RUN_STATE,
                 lambda w: _interrupted(w, drop=("resume.pt",)), _same_metrics_as_trained),
        accepted("resume with every result written, the rename left", RUN_STATE,
                 lambda w: _interrupted(w, drop=("resume.pt",), complete=True),
                 _same_metrics_as_trained),
        accepted("train again over a start killed before its config", RUN_STATE,
                 _killed_before_config, _trained_again),
        accepted("resume a baseline run interrupted before its results", RUN_STATE,
                 _interrupted_baseline, _baseline_published),
        refused("resume while another process holds the run", RUN_STATE, _held,
                r"run.incomplete: another process is working in this run \(process \d+ on "),
        refused("resume with no config.json", RUN_STATE,
                lambda w: _interrupted(w, drop=("config.json",)),
                r"interrupted before it wrote its config; start it again"),
        refused("resume a finished run", RUN_STATE,
                lambda w: ["train", "--resume", str(w.copy_run())], r"this run finished"),
        refused("resume nothing", RUN_STATE, lambda w: ["train", "--resume", str(w.root / "x")],
                r"x.incomplete: no resumable run state"),
        refused("evaluate an interrupted run", RUN_STATE,
                lambda w: ["evaluate", str(w.copy_run(w.shared.interrupted))],
                r"did not finish; continue it with attnsvm train --resume .*run$"),
        refused("evaluate by the final name of an interrupted run", RUN_STATE,
                lambda w: ["evaluate", str(w.copy_run(w.shared.interrupted).with_suffix(""))],
                r"run: the run did not finish; continue it with attnsvm train --resume"),
        refused("train into an existing run", RUN_STATE,
                lambda w: [*train_arguments(w)[:-2], "--out", str(w.copy_run())],
                r"already exists"),
        refused("train over an interrupted run", RUN_STATE,
                lambda w: [*train_arguments(w)[:-2], "--out",
                           str(w.copy_run(w.shared.interrupted).with_suffix(""))],
                r"an interrupted run is there; continue it with --resume"),
        refused("train --out under a file", RUN_STATE,
                lambda w: [*train_arguments(w)[:-2], "--out", str(w.file("f", b"x") / "run")],
                r"f(/run.incomplete)?: Not a directory"),
    ]  # fmt: skip


def _request_cases() -> list[Case]:
    def run(w):
        return str(w.copy_run())

    def lens(w, *options):
        return ["lens", run(w), "--sequences", "2", *options]

    fifo = lambda w: _mkfifo(w.root / "titles.txt")  # noqa: E731
    return [
        refused("recommend an unknown user", REQUEST,
                lambda w: ["recommend", run(w), "--user", "nobody"], r"unknown user id nobody"),
        refused("recommend a user named in markup", REQUEST,
                lambda w: ["recommend", run(w), "--user", "[/bogus]"], r"user id \[/bogus\]"),
        refused("recommend after an unknown item", REQUEST,
                lambda w: ["recommend", run(w), "--history", "1 999"], r"item id\(s\) 999 "),
        refused("recommend after a 10 MB history", REQUEST,
                lambda w: ["recommend", run(w), "--history", "x" * 10_000_000],
                r"item id\(s\) x+…x+ \(10,000,000 characters\)"),
        refused("recommend k = 0", REQUEST,
                lambda w: ["recommend", run(w), "--user", "100", "-k", "0"],
                r"-k must lie in \[1, 2,147,483,647\], got 0"),
        refused("recommend k beyond the catalogue", REQUEST,
                lambda w: ["recommend", run(w), "--user", "100", "-k", "31"], r"k must lie in 1.."),
        refused("recommend k = 10^30", REQUEST,
                lambda w: ["recommend", run(w), "--user", "100", "-k", "1" + "0" * 30],
                r"-k must lie in \[1, 2,147,483,647\], got 10+$"),
        usage("recommend k = '[/bogus]'", REQUEST,
              lambda w: ["recommend", run(w), "-k", "[/bogus]"], r"Invalid value for '-k'"),
        refused("recommend with neither user nor history", REQUEST,
                lambda w: ["recommend", run(w)], r"give exactly one of user or history"),
        accepted("recommend after a history", REQUEST,
                 lambda w: ["recommend", run(w), "--history", "1 4 7", "-k", "3"],
                 lambda w, out: None),
        refused("evaluate --split bogus", REQUEST,
                lambda w: ["evaluate", run(w), "--split", "[b]x"], r"split must be 'test' or"),
        refused("evaluate --sampled 0", REQUEST,
                lambda w: ["evaluate", run(w), "--sampled", "0"], r"--sampled must lie in \[1, "),
        refused("evaluate --sampled beyond the catalogue", REQUEST,
                lambda w: ["evaluate", run(w), "--sampled", "1000"], r"must be in 1..29"),
        refused("evaluate --sampled 3 with ks up to 10", REQUEST,
                lambda w: ["evaluate", run(w), "--sampled", "3"], r"cut-offs \[10\] are outside"),
        refused("evaluate --sampler bogus", REQUEST,
                lambda w: ["evaluate", run(w), "--sampled", "20", "--sampler", "x"],
                r"unknown sampler 'x'"),
        refused("compare --metric bogus", REQUEST,
                lambda w: ["compare", *[run(w)] * 2, "--metric", "XX@3"],
                r"has no per-user 'XX@3'"),
        refused("lens --titles missing", REQUEST,
                lambda w: lens(w, "--titles", str(w.root / "no.txt")), r"no.txt: no such file"),
        refused("lens --titles a named pipe", REQUEST, lambda w: lens(w, "--titles", fifo(w)),
                r"titles.txt: is a named pipe"),
        refused("lens --out a file", REQUEST, lambda w: lens(w, "--out", str(w.file("o", "x"))),
                r"o: (File exists|Not a directory)"),
        refused("lens --layer 3", REQUEST, lambda w: lens(w, "--layer", "3"),
                r"layer 3 does not exist"),
        refused("lens --head 4", REQUEST, lambda w: lens(w, "--head", "4"),
                r"head 4 does not exist"),
        refused("lens --sequences 0", REQUEST, lambda w: ["lens", run(w), "--sequences", "0"],
                r"--sequences must lie in \[1, 2,147,483,647\], got 0"),
        accepted("lens with titles in markup", REQUEST,
                 lambda w: lens(w, "--titles", str(w.file("t.txt", "1\t[/bogus] :x:\n"))),
                 lambda w, out: None),
        refused("data prepare an unknown dataset", REQUEST,
                lambda w: ["data", "prepare", "[/nope]", "--from", str(w.root)],
                r"unknown dataset '\[/nope\]'; known:"),
        refused("data download a dataset without a URL", REQUEST,
                lambda w: ["data", "download", "steam", "--cache-dir", str(w.root)],
                r"steam: has no public download URL"),
        refused("data prepare from nowhere", REQUEST,
                lambda w: ["data", "prepare", "ml-100k", "--from", str(w.root / "nowhere")],
                r"nowhere: no such file or folder"),
        refused("data stats of a dataset not prepared", REQUEST,
                lambda w: ["data", "stats", "beauty", "--cache-dir", str(w.root)],
                r"beauty is not prepared"),
        refused("data stats of a Windows path", REQUEST,
                lambda w: ["data", "stats", r"C:\Users\me\ml-100k\u.data"],
                r"C:\\Users\\me\\ml-100k\\u.data: is neither a file nor a registered dataset"),
        refused("data prepare into a cache that is a file", REQUEST,
                lambda w: ["data", "prepare", "ml-100k", "--no-verify", "--from",
                           str(w.file("u.data", "1\t2\t3\t4\n" * 30)), "--cache-dir",
                           str(w.file("cache", "x"))], r"cache(/ml-100k)?: (File exists|Not a)"),
    ]  # fmt: skip


def _mkfifo(path) -> str:
    os.mkfifo(path)
    return str(path)


def run_cases() -> list[Case]:
    return _run_file_cases() + _state_cases() + _request_cases()
