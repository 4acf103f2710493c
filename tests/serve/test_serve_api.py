"""The real server (``attnsvm serve`` on a loopback port) answers as ``attnsvm recommend`` does."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from attnsvm.cli.main import app
from attnsvm.rec.train.runs import load_run, recommend, user_history

USERS = ["100", "101", "117", "219"]
HISTORIES = [["1"], ["1", "4", "7"], ["30", "3", "6", "9", "12"], [str(i) for i in range(1, 26)]]


def items_of(answer: dict) -> list[str]:
    return [str(entry["item"]) for entry in answer["items"]]


def cli_recommend(run_dir, *arguments: str) -> list[str]:
    result = CliRunner().invoke(app, ["recommend", str(run_dir), *arguments])
    assert result.exit_code == 0, result.output
    return result.output.split()


@pytest.mark.parametrize("user", USERS)
def test_a_known_user_gets_what_attnsvm_recommend_prints(server, served_run, user):
    answer = httpx.post(f"{server}/recommend", json={"user": int(user), "k": 7}).json()
    assert items_of(answer) == cli_recommend(served_run, "--user", user, "-k", "7")
    assert answer["user"] == int(user)
    assert all(entry["title"].startswith("Film number ") for entry in answer["items"])
    scores = [entry["score"] for entry in answer["items"]]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("history", HISTORIES)
def test_a_history_gets_what_attnsvm_recommend_prints(server, served_run, history):
    answer = httpx.post(f"{server}/recommend", json={"history": history, "k": 5}).json()
    assert items_of(answer) == cli_recommend(served_run, "--history", " ".join(history), "-k", "5")
    assert answer["history_length"] == len(history)
    assert not set(items_of(answer)) & set(history)  # seen items are excluded


def test_a_batch_answers_each_query_in_order(server, served_run):
    queries = [{"user": u, "k": 4} for u in USERS] + [{"history": h, "k": 5} for h in HISTORIES]
    answer = httpx.post(f"{server}/recommend/batch", json={"requests": queries})
    assert answer.status_code == 200
    results = answer.json()["results"]
    assert len(results) == len(queries)
    for query, result in zip(queries, results, strict=True):
        expected = (
            recommend(served_run, user=query["user"], k=query["k"])
            if "user" in query
            else recommend(served_run, history=query["history"], k=query["k"])
        )
        assert items_of(result) == list(map(str, expected))


def test_exclude_and_restrict_shape_the_list(server, served_run):
    full = items_of(httpx.post(f"{server}/recommend", json={"user": "100", "k": 10}).json())
    excluded = httpx.post(
        f"{server}/recommend", json={"user": "100", "k": 8, "exclude": full[:2]}
    ).json()
    assert items_of(excluded) == full[2:10]
    seen = [str(item) for item in user_history(load_run(served_run), "100").items]
    allowed = [full[5], full[1], seen[0], full[3]]  # a seen item stays excluded
    restricted = httpx.post(
        f"{server}/recommend", json={"user": "100", "k": 10, "restrict": allowed}
    ).json()
    assert items_of(restricted) == [full[1], full[3], full[5]]  # fewer than k: only these rank


def test_unknown_items_are_skipped_and_reported_when_asked(server, served_run):
    answer = httpx.post(
        f"{server}/recommend",
        json={"history": ["1", "nope", "4", 999], "k": 5, "unknown_items": "skip"},
    ).json()
    assert answer["skipped_items"] == ["nope", 999]
    assert items_of(answer) == list(map(str, recommend(served_run, history=["1", "4"], k=5)))


def test_concurrent_requests_share_forward_passes_and_get_their_own_answers(server, served_run):
    before = httpx.get(f"{server}/health").json()["batches"]
    histories = [[str(1 + (start + 3 * s) % 30) for s in range(4)] for start in range(24)]
    expected = [list(map(str, recommend(served_run, history=h, k=5))) for h in histories]

    def ask(history):
        return items_of(httpx.post(f"{server}/recommend", json={"history": history, "k": 5}).json())

    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(ask, histories))
    assert answers == expected
    after = httpx.get(f"{server}/health").json()["batches"]
    passes = after["batches"] - before["batches"]
    assert after["queries"] - before["queries"] == len(histories)
    assert passes < len(histories)  # some requests shared a forward pass
    assert after["largest"] > 1


def test_metadata_health_items_users_and_openapi(server):
    meta = httpx.get(f"{server}/metadata").json()
    assert meta["model"] == "sasrec+"
    assert meta["catalogue_size"] == 30 and meta["users"] == 120
    assert meta["attention"] == [{"layer": 0, "heads": 2}, {"layer": 1, "heads": 2}]
    assert 0 < meta["test_metrics"]["NDCG@10"] <= 1
    assert meta["limits"]["batch"] == 256 and meta["micro_batching"]["on"] is True
    assert httpx.get(f"{server}/health").json()["status"] == "ok"
    found = httpx.get(f"{server}/items", params={"query": "(1975)"}).json()
    assert found == [{"item": 5, "title": "Film number 5 (1975)"}]
    assert httpx.get(f"{server}/users", params={"query": "10", "limit": 3}).json() == [
        100,
        101,
        102,
    ]
    schema = httpx.get(f"{server}/openapi.json").json()
    assert {"/recommend", "/recommend/batch", "/explain", "/metadata"} <= set(schema["paths"])


def test_explain_matches_recommend_and_reads_every_head(server):
    body = {"history": ["3", "6", "9", "12", "15"], "k": 4}
    recommended = httpx.post(f"{server}/recommend", json=body).json()
    answer = httpx.post(f"{server}/explain", json=body).json()
    assert answer["items"] == recommended["items"]
    reading = answer["reading"]
    assert [t["item"] for t in reading["tokens"]] == [3, 6, 9, 12, 15]
    assert reading["candidates"] == [entry["item"] for entry in answer["items"]]
    assert [(h["layer"], h["head"]) for h in reading["heads"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for head in reading["heads"]:
        attention = np.array(head["attention"])
        assert attention.sum() == pytest.approx(1.0)
        assert head["selected"] == int(np.argmax(attention))
        for kind in ("linear", "counterfactual"):
            scores = np.array(head["scores"][kind], dtype=float)
            assert scores.shape == (4, 5)
            assert head["optimal"][kind] == np.argmax(scores, axis=1).tolist()
            for optimal, verdict in zip(head["optimal"][kind], head["classes"][kind], strict=True):
                assert (verdict == "global") == (optimal == head["selected"])
        assert head["svm"] in ("hard", "soft") and head["selected"] not in head["neighbours"]
