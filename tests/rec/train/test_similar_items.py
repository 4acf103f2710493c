"""Item-to-item (``similar_items``, ``attnsvm similar``) against a brute-force loop over the
catalogue scored by the model itself, for both methods; and the exclude / restrict filters of
``recommend``, ``similar_items``, ``attnsvm recommend`` (one user, and ``--all``) and ``attnsvm
similar``."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.rec.recommender import Recommender
from attnsvm.rec.train.runs import load_run

K = 6
ITEMS = ["1", "4", "17", "30"]


@pytest.fixture(scope="module")
def model(trained_run) -> Recommender:
    return Recommender.load(trained_run)


def cli(*arguments) -> str:
    result = CliRunner().invoke(app, [str(a) for a in arguments])
    assert result.exit_code == 0, result.output
    return result.output


def cli_error(*arguments) -> str:
    result = CliRunner().invoke(app, [str(a) for a in arguments])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    return result.output.strip()


def brute_force(run_dir, item: str, method: str) -> list[tuple[str, float]]:
    """Every other item with its score, best first (equal scores lower id first), one at a
    time: the model's next-item scores after a window holding ``item`` alone, or the cosine of
    the two items' output embeddings."""
    run = load_run(run_dir)
    net, ids = run.model, [str(i) for i in run.item_ids.tolist()]
    query = ids.index(item)
    window = torch.zeros(1, net.config.max_len, dtype=torch.long)
    window[0, -1] = query
    with torch.inference_mode():
        after = net.score_last(window)[0].double()
        table = net.output_embedding().double()
    scored = []
    for other in range(1, len(ids)):
        if other == query:
            continue
        if method == "next":
            score = after[other].item()
        else:
            a, b = table[query], table[other]
            score = (a @ b / (a.norm() * b.norm())).item()
        scored.append((other, score))
    scored.sort(key=lambda pair: (-pair[1], pair[0]))
    return [(ids[other], score) for other, score in scored]


def lists(table: pl.DataFrame) -> dict[str, list[str]]:
    return {
        str(query): rows["item"].to_list()
        for (query,), rows in table.group_by("query", maintain_order=True)
    }


@pytest.mark.parametrize("method", ["next", "cosine"])
def test_similar_items_equal_a_brute_force_loop(model, trained_run, method):
    table = model.similar_items(ITEMS, k=K, method=method)
    assert table.columns == ["query", "rank", "item", "score", "title", "category"]
    for item in ITEMS:
        expected = brute_force(trained_run, item, method)[:K]
        mine = table.filter(pl.col("query") == item)
        assert mine["item"].to_list() == [other for other, _ in expected]
        assert mine["rank"].to_list() == list(range(1, K + 1))
        np.testing.assert_allclose(mine["score"], [s for _, s in expected], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("method", ["next", "cosine"])
def test_similar_items_filters_are_the_brute_force_list_filtered(model, trained_run, method):
    exclude, restrict = ["2", "5", "8"], [str(i) for i in range(1, 31, 2)] + ["2"]
    table = model.similar_items(ITEMS, k=K, method=method, exclude=exclude, restrict=restrict)
    for item in ITEMS:
        every = [other for other, _ in brute_force(trained_run, item, method)]
        expected = [o for o in every if o in restrict and o not in exclude][:K]
        assert lists(table)[item] == expected
        assert item not in lists(table)[item]  # never the item itself, even when allowed


def test_attnsvm_similar_prints_what_similar_items_gives(model, trained_run):
    for method in ("next", "cosine"):
        table = model.similar_items(["4", "17"], k=3, method=method, exclude=["7"])
        options = ["-k", "3", "--method", method, "--exclude", "7"]
        printed = cli("similar", trained_run, "4", "17", *options)
        assert printed.splitlines() == [f"{q}: {' '.join(i)}" for q, i in lists(table).items()]
    among = model.similar_items(["4"], k=5, restrict=["10", "13", "16"])["item"].to_list()
    printed = cli("similar", trained_run, "4", "-k", "5", "--restrict", "10 13 16")
    assert printed.strip() == f"4: {' '.join(among)}" and len(among) == 3  # all there is


def test_recommend_filters_are_the_full_ranking_filtered(model, trained_run):
    exclude, restrict = ["3", "6"], [str(i) for i in range(1, 31, 3)] + ["3"]
    every = lists(model.recommend(users=["100", "117"], k=30))
    filtered = lists(model.recommend(users=["100", "117"], k=4, exclude=exclude, restrict=restrict))
    for user in ("100", "117"):
        assert filtered[user] == [i for i in every[user] if i in restrict and i not in exclude][:4]
        options = ["-k", 4, "--exclude", " ".join(exclude), "--restrict", " ".join(restrict)]
        printed = cli("recommend", trained_run, "--user", user, *options)
        assert printed.split() == filtered[user]
    history = model.recommend(histories=[["1", "4"]], k=3, exclude=["7", "10"])
    assert not {"1", "4", "7", "10"} & set(history["item"])
    printed = cli("recommend", trained_run, "--history", "1 4", "-k", 3, "--exclude", "7 10")
    assert printed.split() == history["item"].to_list()


def test_recommend_all_takes_the_filters(model, trained_run, tmp_path):
    restrict = ["2", "5", "11", "14", "20", "26", "29"]
    out = tmp_path / "recs.parquet"
    filters = ["--restrict", " ".join(restrict), "--exclude", "5"]
    cli("recommend", trained_run, "--all", "--out", out, "-k", 3, *filters)
    table = pl.read_parquet(out).with_columns(pl.col("user", "item").cast(str))
    assert set(table["item"]) <= set(restrict) - {"5"}
    users = [str(u) for u in range(100, 220)]
    expected = model.recommend(users=users, k=3, restrict=restrict, exclude=["5"])
    assert lists(table.rename({"user": "query"})) == lists(expected)


def test_mistakes_are_one_clear_error(model, trained_run, walks, tmp_path):
    with pytest.raises(ValueError, match=r"unknown item id\(s\) 999 \(not in"):
        model.similar_items(["4", "999"])
    with pytest.raises(ValueError, match=r"unknown item id\(s\) 998 in exclude"):
        model.similar_items(["4"], exclude=["998"])
    with pytest.raises(ValueError, match=r"unknown item id\(s\) 997 in restrict"):
        model.recommend(users=["100"], restrict=["1", "997"])
    with pytest.raises(ValueError, match="restrict is empty"):
        model.recommend(users=["100"], restrict=[])
    with pytest.raises(ValueError, match="method must be one of next, cosine, got 'dot'"):
        model.similar_items(["4"], method="dot")
    with pytest.raises(ValueError, match="items is empty"):
        model.similar_items([])
    assert "unknown item id(s) 999 (not in" in cli_error("similar", trained_run, "999")
    message = cli_error("recommend", trained_run, "--user", "100", "--restrict", "1 996")
    assert "unknown item id(s) 996 in restrict" in message
    # a non-neural baseline ranks by its own scores, and has no embeddings to compare
    popular = Recommender.from_config(model="pop", dataset=str(walks)).fit(tmp_path / "pop")
    assert "4" not in popular.similar_items(["4"], k=5)["item"].to_list()
    with pytest.raises(ValueError, match="non-neural baseline: it has no item embeddings"):
        popular.similar_items(["4"], method="cosine")
