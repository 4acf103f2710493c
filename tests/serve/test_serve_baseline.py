"""A non-neural baseline served: the same lists as ``attnsvm recommend``, and no attention."""

from __future__ import annotations

import httpx
import pytest
from serve_helpers import start_server

from attnsvm.rec.config import DataConfig, EvalConfig, ModelChoice, RunConfig
from attnsvm.rec.train.runs import load_run, recommend


@pytest.fixture(scope="module")
def baseline_server(served_run, tmp_path_factory):
    from attnsvm.rec.train import train

    data = load_run(served_run).config.data
    config = RunConfig(
        model=ModelChoice("vsknn", {}),
        data=DataConfig(dataset=data.dataset, max_len=data.max_len),
        eval=EvalConfig(ks=(1, 10)),
    )
    run_dir = train(config, tmp_path_factory.mktemp("baseline") / "vsknn", show_progress=False)
    process, url = start_server(run_dir.run_dir)
    yield url, run_dir.run_dir
    process.terminate()
    process.wait(timeout=20)


@pytest.mark.parametrize("query", [{"user": "100"}, {"user": "150"}, {"history": ["1", "4"]}])
def test_a_baseline_answers_as_recommend_does(baseline_server, query):
    url, run_dir = baseline_server
    answer = httpx.post(f"{url}/recommend", json={**query, "k": 6}).json()
    expected = recommend(run_dir, **query, k=6)
    assert [entry["item"] for entry in answer["items"]] == expected
    assert 0 not in expected  # the padding id is never an item


def test_a_baseline_has_no_attention_to_explain(baseline_server):
    url, _ = baseline_server
    assert httpx.get(f"{url}/metadata").json()["attention"] == []
    answer = httpx.post(f"{url}/explain", json={"user": "100"})
    assert answer.status_code == 422
    assert answer.json()["detail"] == "run: vsknn is a non-neural baseline; it has no attention"
