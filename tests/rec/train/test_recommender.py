"""The object API: fit, recommend (users and histories), save and load, the same lists as
``recommend`` and the evaluator's ranking."""

from __future__ import annotations

import polars as pl
import pytest
import torch
from train_helpers import tiny_config

from attnsvm.rec.recommender import Recommender
from attnsvm.rec.train.runs import recommend


@pytest.fixture(scope="module")
def fitted(tmp_path_factory, walks_module):
    torch.set_num_threads(1)
    model = Recommender.from_config(tiny_config(walks_module, epochs=2))
    return model.fit(tmp_path_factory.mktemp("api") / "run")


@pytest.fixture(scope="module")
def walks_module(tmp_path_factory):
    from train_helpers import write_walks

    return write_walks(tmp_path_factory.mktemp("data") / "walks.txt")


def test_users_get_the_lists_recommend_gives(fitted):
    table = fitted.recommend(users=["100", "117", 105], k=5)
    assert table.columns == ["query", "rank", "item", "score", "title", "category"]
    for user in ("100", "117", "105"):
        mine = table.filter(pl.col("query") == user).sort("rank")["item"].to_list()
        assert mine == [str(i) for i in recommend(fitted.run_dir, user=user, k=5)]
        scores = table.filter(pl.col("query") == user)["score"].to_list()
        assert scores == sorted(scores, reverse=True)


def test_histories_get_the_lists_recommend_gives(fitted):
    histories = [["1", "4", "7"], ["30", "3"]]
    table = fitted.recommend(histories=histories, k=4)
    for index, history in enumerate(histories):
        mine = table.filter(pl.col("query") == str(index))["item"].to_list()
        assert mine == [str(i) for i in recommend(fitted.run_dir, history=history, k=4)]


def test_save_and_load_give_the_same_recommendations(fitted, tmp_path):
    saved = fitted.save(tmp_path / "copy")
    loaded = Recommender.load(saved)
    assert loaded.recommend(users=["101"], k=6).equals(fitted.recommend(users=["101"], k=6))
    with pytest.raises(FileExistsError):
        fitted.save(saved)


def test_keywords_build_the_config(walks_module):
    model = Recommender.from_config(
        model="sasrec", dataset=str(walks_module), epochs=3, hidden_size=16, **{"loss.name": "bce"}
    )
    config = model.config
    assert config.model.name == "sasrec" and config.model.overrides["hidden_size"] == 16
    assert config.train.epochs == 3 and config.loss.name == "bce"


def test_mistakes_are_clear(fitted, walks_module):
    with pytest.raises(RuntimeError, match="not fitted"):
        Recommender.from_config(tiny_config(walks_module)).recommend(users=["100"])
    with pytest.raises(ValueError, match="unknown user"):
        fitted.recommend(users=["nobody"])
    with pytest.raises(ValueError, match="exactly one of"):
        fitted.recommend(k=3)
    with pytest.raises(ValueError, match="unknown item"):
        fitted.recommend(histories=[["999"]])
    with pytest.raises(ValueError, match="k must lie"):
        fitted.recommend(users=["100"], k=0)
