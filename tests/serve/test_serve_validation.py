"""Every malformed request to the real server gets a 4xx naming the field, never a 500."""

from __future__ import annotations

import json

import httpx
import pytest

LONG_HISTORY = ["1"] * 2001
BIG_BATCH = [{"user": 100}] * 257

# (name, path, body: a JSON-able value or raw bytes, status, field, words in the message)
CASES = [
    ("k is text", "/recommend", {"user": 100, "k": "ten"}, 422, "k", "valid integer"),
    ("k is a float", "/recommend", {"user": 100, "k": 2.5}, 422, "k", "valid integer"),
    ("k is a boolean", "/recommend", {"user": 100, "k": True}, 422, "k", "valid integer"),
    ("k is negative", "/recommend", {"user": 100, "k": -3}, 422, "k", "greater than or equal to 1"),
    ("k is zero", "/recommend", {"user": 100, "k": 0}, 422, "k", "greater than or equal to 1"),
    ("k is huge", "/recommend", {"user": 100, "k": 10**12}, 422, "k", "less than or equal to 1000"),
    ("k exceeds the catalogue", "/recommend", {"user": 100, "k": 31}, 422, "k", "30 items"),
    ("history is empty", "/recommend", {"history": []}, 422, "history", "at least 1 item"),
    ("history too long", "/recommend", {"history": LONG_HISTORY}, 422, "history", "at most 2000"),
    ("history is a string", "/recommend", {"history": "1 4 7"}, 422, "history", "valid list"),
    ("history holds null", "/recommend", {"history": ["1", None]}, 422, "history[1]", "valid"),
    ("history holds a list", "/recommend", {"history": [[1]]}, 422, "history[0]", "valid"),
    ("unknown item", "/recommend", {"history": ["1", "999"]}, 422, "history[1]", "'999'"),
    ("unknown user", "/recommend", {"user": "nobody"}, 404, "user", "'nobody'"),
    ("user is an object", "/recommend", {"user": {"id": 1}}, 422, "user", "valid"),
    ("neither user nor history", "/recommend", {"k": 3}, 422, "body", "exactly one"),
    ("both user and history", "/recommend", {"user": 100, "history": ["1"]}, 422, "body", "one"),
    ("unknown field", "/recommend", {"user": 100, "top": 3}, 422, "top", "not permitted"),
    ("unknown excluded", "/recommend", {"user": 100, "exclude": [77]}, 422, "exclude[0]", "77"),
    ("empty restrict", "/recommend", {"user": 100, "restrict": []}, 422, "restrict", "at least"),
    ("bad unknown_items", "/recommend", {"user": 100, "unknown_items": "drop"}, 422,
     "unknown_items", "'error' or 'skip'"),
    ("invalid JSON", "/recommend", b'{"user": 100,', 400, "body", "not valid JSON"),
    ("empty body", "/recommend", b"", 422, "body", "JSON object is required"),
    ("a JSON array", "/recommend", [{"user": 100}], 422, "body", "JSON object is required"),
    ("body over the limit", "/recommend", b"{" + b" " * (1 << 20) + b"}", 413, "body",
     "exceeds the limit"),
    ("batch is empty", "/recommend/batch", {"requests": []}, 422, "requests", "at least 1"),
    ("batch is too large", "/recommend/batch", {"requests": BIG_BATCH}, 422, "requests",
     "at most 256"),
    ("batch entry has bad k", "/recommend/batch", {"requests": [{"user": 100}, {"user": 100,
     "k": -1}]}, 422, "requests[1].k", "greater than or equal to 1"),
    ("batch entry has an unknown user", "/recommend/batch",
     {"requests": [{"user": 100}, {"user": 5}]}, 404, "requests[1].user", "5"),
    ("batch entry has an unknown item", "/recommend/batch",
     {"requests": [{"history": ["1", "2", "x"]}]}, 422, "requests[0].history[2]", "'x'"),
    ("explain k over its limit", "/explain", {"user": 100, "k": 21}, 422, "k",
     "less than or equal to 20"),
]  # fmt: skip


def send(url: str, body, content_type: str = "application/json") -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(url, content=content, headers={"Content-Type": content_type}, timeout=30)


@pytest.mark.parametrize(("name", "path", "body", "status", "field", "words"), CASES)
def test_a_malformed_request_is_refused_naming_the_field(
    server, name, path, body, status, field, words
):
    answer = send(f"{server}{path}", body)
    assert answer.status_code == status, answer.text
    problem = answer.json()
    assert problem["errors"][0]["field"] == field
    assert problem["detail"].startswith(f"{field}: ")
    assert words in problem["detail"], problem["detail"]


def test_the_table_has_at_least_twenty_requests():
    assert len(CASES) >= 20


def test_a_body_not_sent_as_json_is_a_415(server):
    answer = send(f"{server}/recommend", b'{"user": 100}', "text/plain")
    assert answer.status_code == 415
    assert answer.json()["detail"] == (
        "body: send a JSON body (Content-Type: application/json), not text/plain"
    )


def test_a_wrong_method_and_a_wrong_path_are_405_and_404(server):
    assert httpx.get(f"{server}/recommend").status_code == 405
    missing = httpx.get(f"{server}/recommendations")
    assert missing.status_code == 404 and missing.json()["errors"][0]["field"] == "/recommendations"


def test_bad_query_parameters_name_the_parameter(server):
    answer = httpx.get(f"{server}/items", params={"limit": "lots"})
    assert answer.status_code == 422
    assert answer.json()["detail"].startswith("query.limit: ")


def test_the_server_is_still_well_after_all_of_that(server):
    assert httpx.post(f"{server}/recommend", json={"user": 100}).status_code == 200


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("port", 70000),
        ("workers", 0),
        ("max_batch", 0),
        ("max_wait_ms", float("nan")),
        ("threads", 0),
    ],
)
def test_serve_options_out_of_range_are_refused_by_name(field, value):
    """The library's ranges, which the CLI's serve options take too."""
    from attnsvm.cli.options import OPTION_RANGES
    from attnsvm.errors import InvalidRequest
    from attnsvm.serve.server import RANGES, ServeOptions

    with pytest.raises(InvalidRequest, match=f"^{field} must lie in"):
        ServeOptions(**{field: value}).check()
    ServeOptions().check()
    assert OPTION_RANGES["serve --port"] is RANGES["port"] is OPTION_RANGES["explore --port"]
