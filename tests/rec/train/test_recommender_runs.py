"""Every kind of run goes fit (or ``attnsvm train``) → save → load in a fresh process →
recommend, and gives the lists ``attnsvm recommend`` prints: a named dataset (generated, and raw
from a root), a table prepared under a name, a plain file, a file read through a column mapping
(Parquet by ``fit``, CSV by the CLI: where ``fit`` and ``load`` used to stop with "is Parquet:
call read_table with a column mapping"), a non-neural baseline, models that read the users
(SSE-PT) or the ratings (RLT4Rec: a bare history is refused, alike), and a session run on its
predefined split. The kinds that need ../shared/data skip without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from tests.conftest import shared_data_dir
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.rec.recommender import Recommender
from attnsvm.rec.train.runs import recommend

TINY_MODEL = {"hidden_size": 8, "ffn_size": 8, "num_blocks": 1, "num_heads": 1}
TINY_RUN = {
    "data.max_len": 6,
    "train.epochs": 1,
    "train.steps_per_epoch": 2,
    "train.batch_size": 16,
    "eval.ks": "[10]",
}
TINY = {**TINY_MODEL, **TINY_RUN}
COLUMNS = "user=uid,item=sku,time=ts"
K = 4
SHARED = shared_data_dir()
#: kind → how ``fit`` is configured (None: trained by the CLI), and whether it needs shared data
KINDS = {
    "named, generated": ({"model": "sasrec+", "dataset": "synthetic", **TINY}, False),
    "named, raw from a root": (
        {"model": "sasrec+", "dataset": "ml-100k", "root": str(SHARED), **TINY},
        True,
    ),
    "prepared under a name": ({"model": "sasrec+", "dataset": "shop", **TINY}, False),
    "plain file": ({"model": "sasrec+", "dataset": "{walks}", **TINY}, False),
    "Parquet + columns": (
        {"model": "sasrec+", "dataset": "{parquet}", "data.columns": COLUMNS, **TINY},
        False,
    ),
    "CSV + columns, trained by the CLI": (None, False),
    "baseline, CSV + columns": (
        {"model": "sknn", "dataset": "{csv}", "data.columns": COLUMNS},
        False,
    ),
    "user table (SSE-PT), CSV + columns": (
        {"model": "ssept", "dataset": "{csv}", "data.columns": COLUMNS, **TINY, "user_size": 4},
        False,
    ),
    "ratings read (RLT4Rec), CSV + columns": (
        {"model": "rlt4rec", "dataset": "{csv}", "data.columns": f"{COLUMNS},rating=stars"} | TINY,
        False,
    ),
    "session, predefined split": (
        {"model": "sasrec+", "dataset": "yoochoose", "root": str(SHARED), **TINY}
        | {"data.split": "predefined"},
        True,
    ),
}
FRESH_PROCESS = """
import json, sys
from attnsvm import process
from attnsvm.rec.recommender import Recommender

asked, answers = json.loads(sys.argv[1]), {}
for kind, (run, users, history) in asked["runs"].items():
    model = Recommender.load(run)
    answers[kind] = {"users": model.recommend(users=users, k=asked["k"]).to_dicts()}
    try:
        answers[kind]["history"] = model.recommend(histories=[history], k=asked["k"]).to_dicts()
    except ValueError as refused:  # a model that reads ratings scores no bare history
        answers[kind]["history"] = str(refused)
answers["threads chosen by"] = process.chosen_threads().chosen_by
print(json.dumps(answers))
"""


def shop_log(rows: int = 300) -> pl.DataFrame:
    """A shop's export: text user and item ids, Unix times, ratings."""
    rng = np.random.default_rng(0)
    return pl.DataFrame(
        {
            "uid": [f"u{u}" for u in rng.integers(0, 30, rows)],
            "sku": [f"sku-{i}" for i in rng.integers(0, 25, rows)],
            "ts": np.arange(rows) * 60 + 1_700_000_000,
            "stars": rng.integers(1, 6, rows),
        }
    )


def cli(*arguments) -> str:
    result = CliRunner().invoke(app, [str(a) for a in arguments])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    from train_helpers import write_walks

    folder = tmp_path_factory.mktemp("own_data")
    log = shop_log()
    log.write_parquet(folder / "log.parquet")
    log.write_csv(folder / "log.csv")
    return {
        "walks": str(write_walks(folder / "walks.txt")),
        "parquet": str(folder / "log.parquet"),
        "csv": str(folder / "log.csv"),
        "cache": str(folder / "cache"),
    }


@pytest.fixture(scope="module")
def runs(files, tmp_path_factory):
    """kind → (the run directory to load, the in-process Recommender or None, users, history),
    and what a fresh process loading each of them recommended."""
    folder = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("ATTNSVM_DATA", files["cache"])
        cli("data", "prepare", "--from", files["csv"], "--columns", COLUMNS, "--name", "shop")
        made = {}
        for index, (kind, (settings, needs_shared)) in enumerate(KINDS.items()):
            if needs_shared and SHARED is None:
                continue
            if settings is None:
                run, fitted = folder / f"{index}-cli", None
                options = [f"--set=model.{key}={value}" for key, value in TINY_MODEL.items()]
                options += [f"--set={key}={value}" for key, value in TINY_RUN.items()]
                options += [f"--set=data.columns={COLUMNS}", "--no-progress", "--out", run]
                cli("train", "--model", "sasrec+", "--data", files["csv"], *options)
            else:
                settings = {k: str(v).format(**files) for k, v in settings.items()}
                fitted = Recommender.from_config(**settings).fit(folder / f"{index}-fit")
                run = fitted.save(folder / f"{index}-saved")  # what load reads is the copy
            maps = json.loads((Path(run) / "id_maps.json").read_text())
            users, history = maps["users"][:2], maps["items"][1:4]
            made[kind] = (str(run), fitted, list(map(str, users)), list(map(str, history)))
        spec = {kind: (run, users, history) for kind, (run, _, users, history) in made.items()}
        done = subprocess.run(
            [sys.executable, "-c", FRESH_PROCESS, json.dumps({"k": K, "runs": spec})],
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        yield made, json.loads(done.stdout.splitlines()[-1])


def items_of(rows: list[dict], query: str) -> list[str]:
    return [row["item"] for row in rows if row["query"] == query]


@pytest.mark.parametrize("kind", KINDS)
def test_a_fresh_process_recommends_what_attnsvm_recommend_prints(runs, kind):
    made, fresh = runs
    if kind not in made:
        pytest.skip("needs ../shared/data (set ATTNSVM_SHARED_DATA to point at it)")
    run, fitted, users, history = made[kind]
    answer = fresh[kind]
    for user in users:
        printed = cli("recommend", run, "--user", user, "-k", K).split()
        assert items_of(answer["users"], user) == printed
        assert printed == [str(i) for i in recommend(run, user=user, k=K)]  # the functional API
    if isinstance(answer["history"], str):  # refused: the same one line from the CLI
        refused = CliRunner().invoke(app, ["recommend", run, "--history", " ".join(history)])
        assert refused.exit_code == 1 and refused.output.strip() == f"error: {answer['history']}"
    else:
        printed = cli("recommend", run, "--history", " ".join(history), "-k", K).split()
        assert items_of(answer["history"], "0") == printed
        assert printed == [str(i) for i in recommend(run, history=history, k=K)]
    if fitted is not None:  # the same lists and scores as the object that trained it
        in_process = fitted.recommend(users=users, k=K)
        assert in_process["item"].to_list() == [row["item"] for row in answer["users"]]
        scores = [row["score"] for row in answer["users"]]
        np.testing.assert_allclose(in_process["score"].to_numpy(), scores, rtol=1e-5, atol=1e-6)
    # loading applied the process policy (OMP_NUM_THREADS, set above, pins its count)
    assert fresh["threads chosen by"] == "OMP_NUM_THREADS"
