"""``read_history``: the lens on one history reads each head as the report's pipeline does."""

import numpy as np
import pytest
import torch

from attnsvm.lens.analysis import analyse_head
from attnsvm.lens.extract import LensError, extract, float64_copy, head_grid
from attnsvm.lens.history import read_history
from attnsvm.lens.scores import counterfactual_scores, linear_scores
from attnsvm.rec.models import build_model

WINDOW = np.array([0, 0, 3, 17, 5, 29, 11, 2])


def _model(name: str = "sasrec"):
    torch.manual_seed(0)
    model = build_model(
        name, 30, hidden_size=16, ffn_size=16, num_blocks=2, num_heads=2, max_len=8, init_std=0.3
    )
    return float64_copy(model)


def test_each_head_agrees_with_the_reports_analysis_of_the_same_sequence():
    model64 = _model()
    candidates = np.array([4, 21, 9])
    reading = read_history(model64, WINDOW, candidates)
    assert reading.tokens == WINDOW[WINDOW > 0].tolist()
    item_seq = torch.from_numpy(WINDOW)[None]
    views = extract(model64, item_seq, head_grid(model64, None, None))
    assert [(h.layer, h.head) for h in reading.heads] == [(v.layer, v.head) for v in views]
    columns = np.flatnonzero(WINDOW)
    for head, view in zip(reading.heads, views, strict=True):
        np.testing.assert_allclose(head.attention, view.attention[0, columns])
        assert head.selected == int(np.argmax(view.attention[0])) - columns[0]
        for c, target in enumerate(candidates):
            one = (model64, item_seq, np.array([target]), view.layer, view.head)
            scores = {"linear": linear_scores(*one), "counterfactual": counterfactual_scores(*one)}
            analysis = analyse_head(view, scores)
            pairs, frobenius = analysis.pairs, analysis.solutions["selected"]["frobenius"]
            neighbours = np.flatnonzero(frobenius.neighbours(pairs, WINDOW[None].shape)[0])
            assert head.neighbours == (neighbours - columns[0]).tolist()
            for kind, values in scores.items():
                np.testing.assert_allclose(head.scores[kind][c], values[0, columns])
                assert head.optimal[kind][c] == analysis.optimal[kind][0] - columns[0]
                assert head.classes[kind][c] == analysis.classes[kind][0]


def test_a_single_item_history_has_no_rival():
    reading = read_history(_model(), np.array([0] * 7 + [5]), np.array([1, 2]))
    for head in reading.heads:
        assert head.selected == 0 and head.svm == "none" and head.neighbours == []
        assert head.attention == pytest.approx([1.0])
        assert head.classes["counterfactual"] == ["global", "global"]


def test_bert4rec_is_read_at_its_mask_token():
    model64 = _model("bert4rec")
    reading = read_history(model64, WINDOW, np.array([4]))
    assert reading.tokens[-1] == model64.num_items + 1  # the mask token the model predicts at
    assert reading.tokens[:-1] == WINDOW[WINDOW > 0].tolist()
    assert all(len(h.scores["counterfactual"][0]) == len(reading.tokens) for h in reading.heads)


def test_no_candidate_is_an_error():
    with pytest.raises(LensError, match="no candidate"):
        read_history(_model(), WINDOW, np.array([], dtype=np.int64))
