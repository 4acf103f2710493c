"""``attnsvm serve --titles FILE --title-columns …`` on a run whose data has no titles: the API
answers with the file's titles and categories, the item search finds a title, the explorer page
shows them (headless Chromium, as tests/serve/test_serve_explorer_browser.py drives it), and a
titles file that does not fit the run is one error before the server starts."""

from __future__ import annotations

import subprocess

import httpx
import numpy as np
import polars as pl
import pytest
from serve_helpers import explain_history, start_server
from test_serve_explorer_browser import page  # noqa: F401 (a fixture)
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.rec.config import DataConfig, EvalConfig, ModelChoice, RunConfig, TrainConfig

HISTORY = ["sku-3", "sku-6", "sku-9"]


def title(number: int) -> str:
    return f"Trail shoe {number}"


def category(number: int) -> str:
    return ("running", "hiking")[number % 2]


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """A run trained on a CSV of text ids (nothing beside it has titles) and a products file."""
    from attnsvm.rec.train import train

    folder = tmp_path_factory.mktemp("shop")
    rng = np.random.default_rng(0)
    rows = []
    for user in range(80):
        start = rng.integers(20)
        rows += [(f"u{user}", f"sku-{(start + 3 * step) % 20}", step) for step in range(8)]
    pl.DataFrame(rows, schema=["uid", "sku", "ts"], orient="row").write_csv(folder / "log.csv")
    pl.DataFrame(
        {
            "sku": [f"sku-{i}" for i in range(20)],
            "name": [title(i) for i in range(20)],
            "cat": [category(i) for i in range(20)],
        }
    ).write_csv(folder / "products.csv")
    config = RunConfig(
        model=ModelChoice("sasrec+", {"hidden_size": 8, "ffn_size": 8, "num_blocks": 1}),
        data=DataConfig(dataset=str(folder / "log.csv"), columns="user=uid,item=sku,time=ts"),
        train=TrainConfig(epochs=2, batch_size=32, seed=0),
        eval=EvalConfig(ks=(10,)),
    )
    return train(config, folder / "run", show_progress=False).run_dir, folder


@pytest.fixture(scope="module")
def server(shop):
    run_dir, folder = shop
    titles = [
        "--titles",
        str(folder / "products.csv"),
        "--title-columns",
        "item=sku,title=name,category=cat",
    ]
    process, url = start_server(run_dir, *titles)
    yield url
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


def number(entry: dict) -> int:
    return int(str(entry["item"]).removeprefix("sku-"))


def test_the_api_answers_with_the_given_titles_and_categories(server):
    answer = httpx.post(f"{server}/recommend", json={"user": "u1", "k": 5}).json()
    assert answer["items"] and all(
        (e["title"], e["category"]) == (title(number(e)), category(number(e)))
        for e in answer["items"]
    )
    similar = httpx.get(f"{server}/similar", params={"items": ["sku-4"], "k": 3}).json()
    asked = similar["results"][0]
    assert (asked["title"], asked["category"]) == (title(4), category(4))
    assert all(e["title"] == title(number(e)) for e in asked["items"])
    assert httpx.get(f"{server}/items", params={"query": "shoe 17"}).json() == [
        {"item": "sku-17", "title": title(17)}
    ]
    metadata = httpx.get(f"{server}/metadata").json()
    assert metadata["titles"] and metadata["categories"]


def test_titles_that_do_not_fit_the_run_are_one_error_before_serving(shop, tmp_path):
    run_dir, _ = shop
    pl.DataFrame({"code": [1, 2], "name": ["a", "b"]}).write_csv(tmp_path / "other.csv")
    for titles, message in [
        (["--title-columns", "item=code,title=name"], "title columns go with a titles file"),
        (
            ["--titles", tmp_path / "other.csv", "--title-columns", "item=sku,title=name"],
            "other.csv:1: has no item column 'sku' (header: 'code, name')",
        ),
        (
            ["--titles", tmp_path / "other.csv", "--title-columns", "item=code,title=name"],
            "other.csv: no title is for an item of the data",
        ),
    ]:
        result = CliRunner().invoke(app, ["serve", str(run_dir), "--port", "0", *map(str, titles)])
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert message in result.output


def test_the_explorer_shows_the_titles_and_categories(page, server):  # noqa: F811
    from selenium.webdriver.common.by import By

    recommended = httpx.post(f"{server}/recommend", json={"history": HISTORY, "k": 10}).json()
    rows = explain_history(page, server, HISTORY)
    shown = [
        (
            row.get_attribute("data-item"),
            row.find_element(By.CSS_SELECTOR, "td.title").text,
            row.find_element(By.CSS_SELECTOR, "td.category").text,
        )
        for row in rows
    ]
    assert shown == [
        (e["item"], title(number(e)), category(number(e))) for e in recommended["items"]
    ]
    tokens = page.find_elements(By.CSS_SELECTOR, "#tokens tbody tr")
    assert [row.find_elements(By.TAG_NAME, "td")[2].text for row in tokens] == [
        title(int(item.removeprefix("sku-"))) for item in HISTORY
    ]
