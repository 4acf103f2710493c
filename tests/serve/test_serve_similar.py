"""``GET|POST /similar`` on the real server answers as ``attnsvm similar`` prints (itself checked
against a brute-force loop in tests/rec/train/test_similar_items.py), with titles, filters and
one clear 4xx per mistake."""

from __future__ import annotations

import httpx
import pytest
from typer.testing import CliRunner

from attnsvm.cli.main import app


def cli_similar(run_dir, *arguments: str) -> dict[str, list[str]]:
    result = CliRunner().invoke(app, ["similar", str(run_dir), *arguments])
    assert result.exit_code == 0, result.output
    lines = [line.split(":") for line in result.output.strip().splitlines()]
    return {item: items.split() for item, items in lines}


def lists(answer: dict) -> dict[str, list[str]]:
    return {str(r["item"]): [str(e["item"]) for e in r["items"]] for r in answer["results"]}


@pytest.mark.parametrize("method", ["next", "cosine"])
def test_similar_items_are_what_attnsvm_similar_prints(server, served_run, method):
    answer = httpx.post(f"{server}/similar", json={"items": ["1", 4], "k": 5, "method": method})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert lists(body) == cli_similar(served_run, "1", "4", "-k", "5", "--method", method)
    first = body["results"][0]
    assert first["item"] == 1 and first["title"] == "Film number 1 (1971)"
    assert all(entry["title"].startswith("Film number ") for entry in first["items"])
    scores = [entry["score"] for entry in first["items"]]
    assert scores == sorted(scores, reverse=True)
    by_url = httpx.get(f"{server}/similar", params={"items": ["1", "4"], "k": 5, "method": method})
    assert by_url.status_code == 200 and lists(by_url.json()) == lists(body)


def test_next_is_the_recommendation_after_the_item_alone(server):
    similar = httpx.post(f"{server}/similar", json={"items": ["7"], "k": 6}).json()
    after = httpx.post(f"{server}/recommend", json={"history": ["7"], "k": 6}).json()
    assert lists(similar)["7"] == [str(entry["item"]) for entry in after["items"]]


def test_filters_and_skipped_items_are_as_for_users(server, served_run):
    query = {"items": ["10", "nope"], "k": 4, "exclude": ["13"], "unknown_items": "skip"}
    query["restrict"] = ["10", "13", "16", "19", "22", 25]
    answer = httpx.post(f"{server}/similar", json=query).json()
    expected = cli_similar(
        served_run, "10", "-k", "4", "--exclude", "13", "--restrict", "10 13 16 19 22 25"
    )
    assert lists(answer) == expected and set(expected["10"]) <= {"16", "19", "22", "25"}
    assert answer["skipped_items"] == ["nope"]


@pytest.mark.parametrize(
    ("request_", "status", "field", "says"),
    [
        ({"items": ["1", "nope"]}, 422, "items[1]", "unknown item id 'nope'"),
        ({"items": []}, 422, "items", "at least 1 item"),
        ({"items": ["1"], "method": "dot"}, 422, "method", "'next' or 'cosine'"),
        ({"items": ["1"], "k": 31}, 422, "k", "exceeds the catalogue (30 items)"),
        ({"items": ["1"], "exclude": ["999"]}, 422, "exclude[0]", "unknown item id '999'"),
        ({"items": ["1"], "restrict": []}, 422, "restrict", "at least 1 item"),
        ({"item": "1"}, 422, "item", "Extra inputs are not permitted"),
    ],
)
def test_a_mistake_is_one_4xx_naming_the_field(server, request_, status, field, says):
    answer = httpx.post(f"{server}/similar", json=request_)
    assert answer.status_code == status
    fields = {error["field"]: error["message"] for error in answer.json()["errors"]}
    assert field in fields and says in fields[field], fields


def test_a_bad_query_string_names_the_parameter(server):
    answer = httpx.get(f"{server}/similar", params={"items": "1", "k": "lots"})
    assert answer.status_code == 422 and answer.json()["detail"].startswith("query.k: ")
    assert httpx.get(f"{server}/similar").json()["detail"] == "query.items: Field required"


def test_what_a_run_cannot_score_is_refused_naming_the_method(tmp_path):
    from attnsvm.rec.recommender import Recommender
    from attnsvm.serve.engine import Recommender as Service
    from attnsvm.serve.engine import RequestError
    from attnsvm.serve.schemas import SimilarQuery

    rows = ["user,item,time"]  # walks of step 3, one event a minute
    rows += [
        f"u{u},{(u + 3 * s) % 20 + 1},{60 * (20 * u + s)}" for u in range(30) for s in range(6)
    ]
    (tmp_path / "timed.csv").write_text("\n".join(rows) + "\n")
    tiny = {"hidden_size": 8, "ffn_size": 8, "num_blocks": 1, "num_heads": 1, "epochs": 1}
    timed = {
        "dataset": str(tmp_path / "timed.csv"),
        "data.columns": "user=user,item=item,time=time",
    }
    strec = Recommender.from_config(model="strec", **timed, **tiny).fit(tmp_path / "strec")
    popular = Recommender.from_config(model="pop", **timed).fit(tmp_path / "pop")
    with pytest.raises(ValueError, match=r"STRec needs event times: .* use method 'cosine'"):
        strec.similar_items(["1"])
    assert "1" not in strec.similar_items(["1"], k=3, method="cosine")["item"].to_list()
    refusals = [
        (strec.run_dir, "next", "strec reads event times: use method 'cosine'"),
        (popular.run_dir, "cosine", "pop is a non-neural baseline: use method 'next'"),
    ]
    for run_dir, method, message in refusals:
        with pytest.raises(RequestError) as refused:
            Service(run_dir).resolve_similar(SimilarQuery(items=["1"], method=method))
        answer = (refused.value.status, refused.value.field, refused.value.message)
        assert answer == (422, "method", message)
