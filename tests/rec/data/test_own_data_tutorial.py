"""The README's "Your own data" tutorial, end to end on a generated CSV: prepare it under a name,
read its statistics and drops, train a tiny model, recommend, write a lens report; the same file
with another separator, gzipped and as Parquet; a wrong mapping gets one error naming the column."""

import gzip

import numpy as np
import polars as pl
import pytest
from cli_helpers import TINY_TRAINING
from typer.testing import CliRunner

from attnsvm.cli.main import app

runner = CliRunner()


def interaction_log(rows: int = 400) -> pl.DataFrame:
    """A shop's export: text ids, Unix times, a quoted comment holding the separator, and two
    rows without an item (dropped, and said so)."""
    rng = np.random.default_rng(0)
    frame = pl.DataFrame(
        {
            "uid": [f"u{u}" for u in rng.integers(0, 40, rows)],
            "sku": [f"sku-{i}" for i in rng.integers(0, 30, rows)],
            "ts": np.arange(rows) * 60 + 1_700_000_000,
            "stars": rng.integers(1, 6, rows),
            "comment": ["fine, thanks; really"] * rows,
        }
    )
    return frame.with_columns(
        pl.when(pl.arange(0, rows) < 2).then(None).otherwise(pl.col("sku")).alias("sku")
    )


def write_variant(frame: pl.DataFrame, folder, variant: str):
    """The log as a CSV with a header, with ';' between fields, gzipped, or as Parquet."""
    if variant == "parquet":
        path = folder / "log.parquet"
        frame.write_parquet(path)
        return path, []
    separator = ";" if variant == "semicolon" else ","
    text = frame.write_csv(separator=separator, quote_style="non_numeric")
    if variant == "gzip":
        path = folder / "log.csv.gz"
        path.write_bytes(gzip.compress(text.encode()))
        return path, []
    path = folder / "log.csv"
    path.write_text(text)
    return path, ["--separator", ";"] if variant == "semicolon" else []


def invoke(*arguments) -> str:
    result = runner.invoke(app, [str(a) for a in arguments])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("variant", ["header", "semicolon", "gzip", "parquet"])
def test_the_tutorial_from_a_raw_file_to_a_prepared_table(tmp_path, variant):
    path, options = write_variant(interaction_log(), tmp_path, variant)
    cache = ["--cache-dir", tmp_path / "cache"]
    mapping = ["--columns", "user=uid,item=sku,time=ts,rating=stars"]
    out = invoke("data", "prepare", "--from", path, *mapping, *options, "--name", "shop", *cache)
    assert "read 400 rows" in out and "kept 398" in out and "dropped 2 no item" in out
    out = invoke("data", "stats", "shop", *cache)
    assert "398" in out and "dropped 2 no item" in out


def test_the_tutorial_trains_recommends_and_explains(tmp_path, monkeypatch):
    path, _ = write_variant(interaction_log(), tmp_path, "header")
    monkeypatch.setenv("ATTNSVM_DATA", str(tmp_path / "cache"))
    invoke("data", "prepare", "--from", path, "--columns", "user=uid,item=sku,time=ts",
           "--name", "shop")  # fmt: skip
    out = invoke("train", "--data", "shop", *TINY_TRAINING, "--out", tmp_path / "run")
    assert "NDCG@10" in out
    out = invoke("recommend", tmp_path / "run", "--user", "u3", "-k", "3")
    assert "sku-" in out
    out = invoke("lens", tmp_path / "run", "--sequences", "4", "--out", tmp_path / "lens")
    assert out.strip().endswith("report.html")
    # the same mapping in the run config, read straight from the file: no prepare step
    columns = "data.columns=user=uid,item=sku,time=ts"
    out = invoke(
        "train", "--data", path, *TINY_TRAINING, "--set", columns, "--out", tmp_path / "direct"
    )
    assert "NDCG@10" in out


def test_a_wrong_mapping_is_one_error_naming_the_column_and_the_columns(tmp_path):
    path, _ = write_variant(interaction_log(), tmp_path, "header")
    result = runner.invoke(
        app,
        ["data", "prepare", "--from", str(path), "--columns", "user=uid,item=product",
         "--name", "shop", "--cache-dir", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code != 0 and "Traceback" not in result.output
    message = result.output.strip()
    assert len(message.splitlines()) == 1, message
    assert "'product'" in message and "uid, sku, ts, stars, comment" in message
    result = runner.invoke(app, ["train", "--data", str(path), "--set", "data.columns=user=uid"])
    assert result.exit_code != 0 and "must name the user and item columns" in result.output
