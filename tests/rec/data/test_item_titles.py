"""Item titles and categories of one's own: read alike from CSV, TSV, gzip, Parquet and
DataFrames through a mapping; kept with a prepared table (``data prepare --titles``,
``prepare_frame(titles=…)``) and replaced with it by ``--force``; found for a prepared name from
any folder (never the current one, which a ``movies.dat`` planted there would otherwise answer);
shown by ``recommend`` (Python and CLI) and the lens report; bad titles are one error naming
the file and what is wrong."""

from __future__ import annotations

import gzip

import numpy as np
import pandas as pd
import polars as pl
import pytest
from cli_helpers import TINY_TRAINING
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.errors import InvalidRequest
from attnsvm.rec.data import prepare_frame, read_item_titles
from attnsvm.rec.data.datasets import prepared_path
from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.item_titles import TITLES_FILE, ItemTitles
from attnsvm.rec.recommender import Recommender

runner = CliRunner()
MAPPING = "item=sku,title=name,category=cat"


def catalogue(items: int = 30) -> pl.DataFrame:
    """A product export: text ids, titles holding the CSV separator and quotes, a category
    missing for every fifth item, and one row without a title (skipped)."""
    return pl.DataFrame(
        {
            "sku": [f"sku-{i}" for i in range(items)],
            "name": [None if i == 3 else f'Shoe {i}, "size" {40 + i}' for i in range(items)],
            "cat": [None if i % 5 == 0 else ("shoes", "boots")[i % 2] for i in range(items)],
            "price": np.arange(items) * 1.5,
        }
    )


def interactions(rows: int = 400) -> pl.DataFrame:
    rng = np.random.default_rng(0)
    return pl.DataFrame(
        {
            "uid": [f"u{u}" for u in rng.integers(0, 40, rows)],
            "sku": [f"sku-{i}" for i in rng.integers(0, 30, rows)],
            "ts": np.arange(rows) * 60 + 1_700_000_000,
        }
    )


def invoke(*arguments) -> str:
    result = runner.invoke(app, [str(a) for a in arguments])
    assert result.exit_code == 0, result.output
    return result.output


def refused(*arguments) -> str:
    result = runner.invoke(app, [str(a) for a in arguments])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def test_titles_read_alike_from_every_file_format_and_dataframe(tmp_path):
    table = catalogue()
    table.write_csv(tmp_path / "products.csv")
    table.write_csv(tmp_path / "products.tsv", separator="\t")
    (tmp_path / "products.csv.gz").write_bytes(gzip.compress(table.write_csv().encode()))
    table.write_parquet(tmp_path / "products.parquet")
    sources = [tmp_path / f"products.{s}" for s in ("csv", "tsv", "csv.gz", "parquet")]
    sources += [table, table.to_pandas(), table.to_arrow()]
    expected = read_item_titles(sources[0], MAPPING)
    assert len(expected.titles) == 29 and "sku-3" not in expected.titles  # no title: skipped
    assert expected.title("sku-7") == 'Shoe 7, "size" 47' and expected.category("sku-7") == "boots"
    assert expected.category("sku-10") is None
    for source in sources[1:]:
        titles = read_item_titles(source, {"item": "sku", "title": "name", "category": "cat"})
        assert (titles.titles, titles.categories) == (expected.titles, expected.categories)
    # ids are typed as the data's are: integers read back plainly, a leading zero kept
    numbered = read_item_titles(
        pd.DataFrame({"id": ["7", "8"], "t": ["a", "b"]}), "item=id,title=t"
    )
    assert numbered.titles == {"7": "a", "8": "b"}
    zeros = read_item_titles(pd.DataFrame({"id": ["007", "7"], "t": ["a", "b"]}), "item=id,title=t")
    assert zeros.titles == {"007": "a", "7": "b"}
    # the copy a prepared table keeps reads back the same
    expected.save(tmp_path / TITLES_FILE)
    again = read_item_titles(tmp_path / TITLES_FILE)
    assert (again.titles, again.categories) == (expected.titles, expected.categories)


def test_bad_titles_name_the_file_and_what_is_wrong(tmp_path):
    path = tmp_path / "products.csv"
    path.write_text("sku,name\nsku-1,Red\nsku-2,Blue\nsku-1,Green\n")
    with pytest.raises(DataFormatError, match=r"products\.csv:4: item 'sku-1' has a second title"):
        read_item_titles(path, "item=sku,title=name")
    with pytest.raises(
        DataFormatError, match=r"has no title column 'label' \(header: 'sku, name'\)"
    ):
        read_item_titles(path, "item=sku,title=label")
    with pytest.raises(DataFormatError, match="give its columns, item=…,title=…"):
        read_item_titles(path)  # a table with a header, read as 'id<TAB>title' lines
    with pytest.raises(InvalidRequest, match="ROLE one of item, title, category"):
        read_item_titles(path, "item=sku,name=name")
    with pytest.raises(InvalidRequest, match="must name the item and title columns"):
        read_item_titles(path, "item=sku")
    with pytest.raises(InvalidRequest, match="needs its columns"):
        read_item_titles(catalogue())


def test_prepare_keeps_the_titles_and_force_replaces_them_with_the_table(tmp_path):
    interactions().write_csv(tmp_path / "log.csv")
    catalogue().write_csv(tmp_path / "products.csv")
    cache = ["--cache-dir", tmp_path / "cache"]
    own = ["--from", tmp_path / "log.csv", "--columns", "user=uid,item=sku,time=ts"]
    titles = ["--titles", tmp_path / "products.csv", "--title-columns", MAPPING]
    out = invoke("data", "prepare", *own, "--name", "shop", *titles, *cache)
    assert "titles: 29 of 30 items (23 with a category)" in out
    assert "titles: 29 of 30 items" in invoke("data", "stats", "shop", *cache)
    folder = prepared_path("shop", tmp_path / "cache").parent
    assert ItemTitles.load(folder / TITLES_FILE).title("sku-7") == 'Shoe 7, "size" 47'

    invoke("data", "prepare", *own, "--name", "shop", "--force", *cache)  # without titles now
    assert not (folder / TITLES_FILE).exists()
    assert "titles:" not in invoke("data", "stats", "shop", *cache)

    pl.DataFrame({"sku": [1, 2], "name": ["a", "b"]}).write_csv(tmp_path / "numbered.csv")
    other = ["--titles", tmp_path / "numbered.csv", "--title-columns", "item=sku,title=name"]
    line = refused("data", "prepare", *own, "--name", "shop", "--force", *other, *cache)
    assert "numbered.csv: no title is for an item of the data" in line and "'sku-" in line
    line = refused("data", "prepare", *own, "--name", "x", "--title-columns", MAPPING, *cache)
    assert "--title-columns goes with --titles FILE" in line
    line = refused("data", "prepare", "ml-100k", "--from", tmp_path, *titles, *cache)
    assert "--titles and --force go with your own table" in line


def test_a_prepared_names_titles_show_from_any_folder_in_recommend_and_the_lens(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("ATTNSVM_DATA", str(tmp_path / "cache"))
    mapping = {"user": "uid", "item": "sku", "time": "ts"}
    prepare_frame(
        "shop", interactions().to_pandas(), mapping, titles=read_item_titles(catalogue(), MAPPING)
    )
    invoke("train", "--data", "shop", *TINY_TRAINING, "--out", tmp_path / "run")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # a MovieLens file in the current folder, where a name's titles used to be looked for
    (elsewhere / "movies.dat").write_text("".join(f"{i}::Wrong {i}::Drama\n" for i in range(30)))
    monkeypatch.chdir(elsewhere)

    ranked = Recommender.load(tmp_path / "run").recommend(users=["u3"], k=5)
    for item, title, category in ranked.select("item", "title", "category").iter_rows():
        number = int(item.removeprefix("sku-"))
        assert title == (None if number == 3 else f'Shoe {number}, "size" {40 + number}')
        assert category == (None if number % 5 == 0 else ("shoes", "boots")[number % 2])
    shown = invoke("recommend", tmp_path / "run", "--user", "u3", "-k", "5", "--table")
    assert "title" in shown and "Shoe" in shown and "Wrong" not in shown
    given = read_item_titles(pd.DataFrame({"sku": ["sku-1"], "t": ["Given"]}), "item=sku,title=t")
    assert Recommender.load(tmp_path / "run", titles=given).recommend(
        histories=[["sku-2"]], k=30
    ).filter(pl.col("item") == "sku-1")["title"].to_list() == ["Given"]

    report = invoke("lens", tmp_path / "run", "--sequences", "4", "--out", tmp_path / "lens")
    page = (tmp_path / "lens" / "report.html").read_text()
    assert report.strip().endswith("report.html") and "Shoe " in page and "Wrong" not in page
