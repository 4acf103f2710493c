"""Planted structure: a 1-layer, 1-head SASRec attends to the trigger, and the lens finds it.

Two models on the same kind of data. The standard SASRec block (with its FFN) maps the trigger
to its target partly through the FFN, which the linear score's direct path leaves out, so its
linear fraction is measured, not asserted (0.5–0.7); the FFN-free SASRec (``ffn_size = 0``:
attention, LayerNorms and the tied output embedding, the linear head of the Att-SVM theory) is
where the linear score is the model's own readout, and there both scores must find the trigger.
``benchmarks/lens_planted.py`` runs both at full size on more sequences.
"""

from tests.lens.planted import planted_run

SMALL = {
    "users": 1000,
    "items": 60,
    "length": 8,
    "triggers": 8,
    "max_gap": 3,
    "hidden": 16,
    "epochs": 40,
    "sequences": 100,
}
# the FFN-free model needs more data to attend to the trigger in ≥ 90 % (87 % at SMALL size)
LINEAR_HEAD = {
    "users": 3000,
    "items": 200,
    "length": 20,
    "triggers": 16,
    "max_gap": 4,
    "hidden": 32,
    "epochs": 30,
    "sequences": 100,
    "ffn": False,
}


def test_lens_finds_the_planted_trigger(tmp_path):
    result = planted_run(tmp_path, **SMALL)
    assert result["attention_on_trigger"] >= 0.9
    assert result["counterfactual_optimal_is_trigger"] >= 0.9
    curve = [row["nuclear"] for row in result["epochs"]]
    assert [row["epoch"] for row in result["epochs"]] == list(range(SMALL["epochs"] + 1))
    assert curve[-1] > curve[0] + 0.3
    assert result["report"].is_file()
    # the plain verdict names what was planted: one trigger item, at a varying position
    verdict = result["verdict"]
    assert verdict["pattern"] == "trigger", verdict["sentence"]
    assert verdict["sentence"].startswith("head 0.0 attends mostly to a single 'trigger' item")
    assert "Verdict" in result["report"].read_text()


def test_lens_linear_score_finds_the_trigger_of_a_linear_head_model(tmp_path):
    result = planted_run(tmp_path, **LINEAR_HEAD)
    assert result["attention_on_trigger"] >= 0.9
    assert result["linear_optimal_is_trigger"] >= 0.9
    assert result["counterfactual_optimal_is_trigger"] >= 0.9
    for norm in ("frobenius", "nuclear"):
        curve = [row[norm] for row in result["epochs"]]
        assert curve[-1] > curve[0] + 0.15, (norm, curve)
