"""``recommend_all``: every user's top-k in one Parquet table, the evaluator's lists exactly."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.errors import InvalidRequest
from attnsvm.rec.eval.ranking import rank_topk
from attnsvm.rec.train.bulk import recommend_all
from attnsvm.rec.train.runs import open_run, recommend


def lists(table: pl.DataFrame) -> dict[str, list[str]]:
    grouped = table.sort(["user", "rank"]).group_by("user", maintain_order=True).agg("item")
    return {str(u): [str(i) for i in items] for u, items in grouped.iter_rows()}


def test_test_histories_give_the_evaluators_top_k(trained_run, tmp_path):
    result = recommend_all(trained_run, tmp_path / "recs.parquet", k=5, histories="test")
    opened = open_run(trained_run, "test")
    run, task = opened.run, opened.task
    config = run.config.eval
    expected = rank_topk(
        run.scores(task),
        task,
        opened.data.num_items,
        5,
        batch_size=config.batch_size,
        exclude_seen=config.exclude_seen,
    )
    table = pl.read_parquet(result.path)
    assert result.users == len(task) and table.columns == ["user", "rank", "item", "score"]
    got = lists(table)
    for row, user in enumerate(run.user_ids[task.users].tolist()):
        assert got[str(user)] == [str(run.item_ids[i]) for i in expected[row]]


def test_full_histories_give_what_recommend_gives(trained_run, tmp_path):
    out = tmp_path / "recs.parquet"
    calls = []
    result = recommend_all(trained_run, out, k=4, progress=lambda *a: calls.append(a))
    got = lists(pl.read_parquet(out))
    assert result.users == len(got) == 120
    assert calls[-1] == (120, 120)
    for user in ["100", "103", "150", "219"]:
        assert got[user] == [str(i) for i in recommend(trained_run, user=user, k=4)]
    scores = pl.read_parquet(out).filter(pl.col("user") == 100)["score"].to_numpy()
    assert np.all(np.diff(scores) <= 0)


def test_the_batch_size_changes_nothing(trained_run, tmp_path):
    one = recommend_all(trained_run, tmp_path / "a.parquet", k=3, batch_size=7)
    other = recommend_all(trained_run, tmp_path / "b.parquet", k=3, batch_size=1000)
    a, b = pl.read_parquet(one.path), pl.read_parquet(other.path)
    assert a.drop("score").equals(b.drop("score"))
    np.testing.assert_allclose(a["score"].to_numpy(), b["score"].to_numpy(), atol=1e-6)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"out": "recs.csv"}, "must be a .parquet file"),
        ({"k": 0}, "k=0 must be ≥ 1"),
        ({"k": 31}, "exceeds the catalogue"),
        ({"histories": "train"}, "histories must be one of full, test, valid"),
    ],
)
def test_bad_requests_are_refused_and_write_nothing(trained_run, tmp_path, arguments, message):
    options = {"out": "recs.parquet", "k": 5, **arguments}
    with pytest.raises(InvalidRequest, match=message):
        recommend_all(trained_run, tmp_path / options.pop("out"), **options)
    assert list(tmp_path.iterdir()) == []


def test_the_command_writes_the_table(trained_run, tmp_path):
    out = tmp_path / "recs.parquet"
    runner = CliRunner()
    result = runner.invoke(
        app, ["recommend", str(trained_run), "--all", "--out", str(out), "-k", "3"]
    )
    assert result.exit_code == 0, result.output
    assert "top 3 for 120 users" in result.output
    assert pl.read_parquet(out).height == 360
    missing = runner.invoke(app, ["recommend", str(trained_run), "--all"])
    assert missing.exit_code == 1 and "--all needs --out" in missing.output
