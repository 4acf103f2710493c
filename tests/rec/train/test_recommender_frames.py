"""A DataFrame as the dataset of ``Recommender.from_config`` (pandas, polars and a pyarrow Table,
ISO-8601 times, text ids): fit → save → the original run deleted → load in a fresh process →
recommend, with the lists and titles ``attnsvm recommend`` prints for the saved copy; and a
wrong object, a missing mapping or misplaced titles are one error before anything trains
(where ``from_config(dataset=df)`` used to fail later on a file name made of the frame's text)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.errors import InvalidRequest
from attnsvm.rec.data import read_item_titles
from attnsvm.rec.data.errors import NotATable
from attnsvm.rec.recommender import Recommender
from attnsvm.rec.train.runs import KEPT_DATA

TINY = {
    "hidden_size": 8,
    "ffn_size": 8,
    "num_blocks": 1,
    "num_heads": 1,
    "max_len": 6,
    "epochs": 1,
    "batch_size": 16,
    "train.steps_per_epoch": 2,
    "eval.ks": "[10]",
}
COLUMNS = {"user": "customer_id", "item": "sku", "time": "ts"}
K = 4
START = datetime(2024, 1, 1, tzinfo=UTC)
FRESH_PROCESS = """
import json, sys
from attnsvm.rec.recommender import Recommender

run, users, history, k = json.loads(sys.argv[1])
model = Recommender.load(run)
print(json.dumps({
    "users": model.recommend(users=users, k=k).to_dicts(),
    "history": model.recommend(histories=[history], k=k).to_dicts(),
}))
"""


def shop_export(kind: str, rows: int = 300):
    """Text customer and item ids and ISO-8601 times (with a zone, without one, or as datetimes)
    in the given kind of table."""
    rng = np.random.default_rng(1)
    moments = [START + timedelta(minutes=7 * row) for row in range(rows)]
    columns = {
        "customer_id": [f"c{u}" for u in rng.integers(0, 30, rows)],
        "sku": [f"sku-{i}" for i in rng.integers(0, 25, rows)],
    }
    if kind == "pandas":  # ISO text with a zone, the commonest export
        return pd.DataFrame(columns | {"ts": [m.strftime("%Y-%m-%dT%H:%M:%SZ") for m in moments]})
    if kind == "polars":  # a native datetime column
        return pl.DataFrame(columns | {"ts": moments})
    return pa.table(columns | {"ts": [m.strftime("%Y-%m-%d %H:%M:%S") for m in moments]})


def products() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "sku": [f"sku-{i}" for i in range(25)],
            "name": [f"Product number {i}" for i in range(25)],
            "cat": ["shoes" if i % 2 else "hats" for i in range(25)],
        }
    )


def cli(*arguments) -> str:
    result = CliRunner().invoke(app, [str(a) for a in arguments])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("kind", ["pandas", "polars", "pyarrow"])
def test_a_dataframe_fits_saves_and_loads_anywhere_as_attnsvm_recommend_reads_it(kind, tmp_path):
    titles = read_item_titles(products(), "item=sku,title=name,category=cat")
    fitted = Recommender.from_config(
        model="sasrec+", dataset=shop_export(kind), columns=COLUMNS, titles=titles, **TINY
    ).fit(tmp_path / "fit")
    kept = tmp_path / "fit" / KEPT_DATA
    assert kept.is_file() and (kept.parent / "item_titles.parquet").is_file()
    assert json.loads((tmp_path / "fit" / "config.json").read_text())["data"]["dataset"] == str(
        kept.resolve()
    )
    assert not list(tmp_path.glob(".fit.*")), "the staging folder is removed"
    saved = fitted.save(tmp_path / "saved")
    in_process = fitted.recommend(users=["c1", "c2"], k=K)
    shutil.rmtree(tmp_path / "fit")  # the copy must hold everything load needs

    maps = json.loads((saved / "id_maps.json").read_text())
    users, history = ["c1", "c2"], [str(i) for i in maps["items"][1:4]]
    done = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, json.dumps([str(saved), users, history, K])],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        cwd=tmp_path.parent,  # another folder: nothing is read relative to where fit ran
    )
    assert done.returncode == 0, done.stderr[-3000:]
    fresh = json.loads(done.stdout.splitlines()[-1])
    assert [row["item"] for row in fresh["users"]] == in_process["item"].to_list()
    for user in users:
        printed = cli("recommend", saved, "--user", user, "-k", K).split()
        assert [row["item"] for row in fresh["users"] if row["query"] == user] == printed
    printed = cli("recommend", saved, "--history", " ".join(history), "-k", K).split()
    assert [row["item"] for row in fresh["history"]] == printed
    for row in fresh["users"]:  # the titles given to from_config, read back from the copy
        number = int(row["item"].removeprefix("sku-"))
        assert row["title"] == f"Product number {number}"
        assert row["category"] == ("shoes" if number % 2 else "hats")
    shown = cli("recommend", saved, "--user", "c1", "-k", K, "--table")
    assert fresh["users"][0]["title"] in shown and "category" in shown


def test_a_wrong_object_or_mapping_is_one_error_before_anything_trains():
    with pytest.raises(NotATable, match="a pandas DataFrame, a polars DataFrame or a pyarrow"):
        Recommender.from_config(model="sasrec+", dataset=[["c1", "sku-1"]], columns=COLUMNS)
    with pytest.raises(NotATable, match=r"call \.collect\(\) on it first"):
        Recommender.from_config(model="sasrec+", dataset=pl.LazyFrame(), columns=COLUMNS)
    with pytest.raises(InvalidRequest, match="needs columns="):
        Recommender.from_config(model="sasrec+", dataset=shop_export("polars"))
    with pytest.raises(InvalidRequest, match="must name the user and item columns"):
        Recommender.from_config(model="sasrec+", dataset=shop_export("polars"), columns="time=ts")
    with pytest.raises(InvalidRequest, match="read_item_titles"):
        Recommender.from_config(
            model="sasrec+", dataset=shop_export("polars"), columns=COLUMNS, titles={"1": "a"}
        )
    with pytest.raises(InvalidRequest, match="titles= goes with a DataFrame dataset"):
        Recommender.from_config(model="sasrec+", dataset="shop.csv", titles=products())


def test_columns_with_a_file_dataset_are_its_data_columns():
    model = Recommender.from_config(model="sasrec+", dataset="shop.csv", columns=COLUMNS)
    assert model.config.data.columns == "user=customer_id,item=sku,time=ts"
    assert model.config.data.dataset == "shop.csv"
