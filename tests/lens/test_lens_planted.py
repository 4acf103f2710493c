"""Planted structure: a 1-layer, 1-head SASRec attends to the trigger, and the lens finds it."""

import pytest
from tests.lens.planted import planted_run


@pytest.mark.slow  # ~6 minutes on the shared 2-core machine (about 1 minute unloaded)
def test_lens_finds_the_planted_trigger(tmp_path):
    result = planted_run(tmp_path, users=1500, items=80, length=12, triggers=8, max_gap=3,
                         hidden=16, epochs=20, sequences=200)
    assert result["test"]["HR@10"] >= 0.9
    assert result["attention_on_trigger"] >= 0.9
    assert result["counterfactual_optimal_is_trigger"] >= 0.9
    curve = [row["nuclear"] for row in result["epochs"]]
    assert curve[-1] > curve[0] + 0.3
