"""Ranking a wide catalogue from bfloat16 estimates (``estimates.Estimates``): the bound holds,
the top-k is the float32 top-k (ties, exclusions, short rows, nearly equal scores), a NaN still
stops the evaluation, and a model's evaluation over a wide catalogue takes this path with the
same metrics as the float32 products."""

import numpy as np
import pytest
import torch
from eval_reference import reference_topk
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsvm.rec.config import EvalConfig, RunConfig
from attnsvm.rec.data.sequences import EvalTask, Sequences
from attnsvm.rec.eval import estimates as estimates_module
from attnsvm.rec.eval import ranking
from attnsvm.rec.eval.estimates import (
    ESTIMATE_BLOCK,
    MAX_HOT_BLOCKS,
    Estimates,
    bfloat16_table,
)
from attnsvm.rec.eval.exclusions import Exclusions
from attnsvm.rec.eval.ranking import ScoreBlock, rank_block
from attnsvm.rec.train import scoring
from attnsvm.rec.train.scoring import build, evaluate_model


def estimates_of(hidden, table, bias=None):
    return Estimates.of(hidden, table, bfloat16_table(table), bias)


def float32_block(hidden, table, bias=None, with_estimates=True):
    def scores(start, stop):
        logits = hidden @ table[start:stop].T
        return logits if bias is None else logits + bias[start:stop]

    estimated = estimates_of(hidden, table, bias) if with_estimates else None
    return ScoreBlock(np.arange(hidden.shape[0]), scores, estimated)


def exclusions_of(exclude, targets):
    def pairs(lists):
        rows = np.repeat(np.arange(len(lists)), [len(x) for x in lists]).astype(np.int64)
        return rows, np.array([i for x in lists for i in x], dtype=np.int64)

    return Exclusions(*pairs(exclude), *pairs(targets))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([1e-3, 1.0, 1e3]),
    st.integers(1, 64),
    st.booleans(),
)
def test_an_estimate_is_within_its_bound_of_the_float64_score(seed, scale, dim, with_bias):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(7, dim, generator=generator) * scale
    table = torch.randn(300, dim, generator=generator) * torch.rand(300, 1, generator=generator)
    bias = torch.randn(300, generator=generator) * scale if with_bias else None
    estimated = estimates_of(hidden, table, bias)
    truth = hidden.double() @ table.double().T + (0 if bias is None else bias.double())
    gap = (estimated.estimate(0, 300).double().T - truth).abs()
    assert (gap <= estimated.bound.double()[:, None] / 2).all()  # with headroom on the bound


@st.composite
def integer_cases(draw):
    """Scores exact in float32 whichever kernel sums them (integers up to 2^23) but rounded by
    bfloat16 (operands past 256), with many ties."""
    num_items = draw(st.integers(40, 400))
    rows, dim = draw(st.integers(1, 9)), draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    magnitude = draw(st.sampled_from([3, 1000]))
    hidden = rng.integers(-magnitude, magnitude + 1, size=(rows, dim))
    table = rng.integers(-magnitude, magnitude + 1, size=(num_items + 1, dim))
    table[rng.random(num_items + 1) < 0.3] = table[0]  # repeated items: ties at every score
    exclude = [
        sorted(set(rng.integers(1, num_items + 1, size=rng.integers(0, 30)))) for _ in range(rows)
    ]
    targets = [sorted(set(rng.integers(1, num_items + 1, size=2))) for _ in range(rows)]
    k = draw(st.integers(1, min(num_items, 40)))
    chunk = draw(st.integers(1, num_items + 1))
    return hidden, table, exclude, targets, k, chunk


@settings(max_examples=150, deadline=None)
@given(integer_cases())
def test_estimated_ranking_is_the_exact_top_k(case):
    hidden, table, exclude, targets, k, chunk = case
    hidden_t, table_t = (
        torch.tensor(hidden, dtype=torch.float32),
        torch.tensor(table, dtype=torch.float32),
    )
    block = float32_block(hidden_t, table_t)
    _, ids = rank_block(block, exclusions_of(exclude, targets), table.shape[0] - 1, k, chunk)
    exact = (hidden @ table.T).astype(np.float64)
    np.testing.assert_array_equal(ids.numpy(), reference_topk(exact, exclude, targets, k))


def inverted_pair() -> tuple[torch.Tensor, torch.Tensor]:
    """Two table rows ``better, worse`` whose float32 scores against ones order them so and whose
    estimates order them the other way, the better one's estimate below even the worse one's
    float32 score."""
    generator = torch.Generator().manual_seed(0)
    rows = 1 + 0.01 * torch.randn(3000, 8, generator=generator)
    exact = rows.sum(dim=1)
    estimate = (torch.ones(1, 8).bfloat16() @ rows.bfloat16().T)[0].float()
    inverted = (
        (exact[:, None] > exact) & (estimate[:, None] < exact) & (estimate[:, None] < estimate)
    )
    better, worse = (int(i) for i in torch.nonzero(inverted)[0])
    return rows[better], rows[worse]


@pytest.mark.parametrize("chunk", [None, 100])
def test_an_item_whose_estimate_falls_behind_is_still_found(chunk):
    """The better item's estimate is below the worse one's estimate and its float32 score: the
    thresholds' bounds (the k-th block maximum less two, the k-th so far less one) keep it,
    whether both share a range or the worse one comes first."""
    better, worse = inverted_pair()
    table = torch.full((301, 8), -1.0)
    table[5], table[200] = worse, better
    _, ids = rank_block(float32_block(torch.ones(1, 8), table), Exclusions.none(), 300, 1, chunk)
    assert ids.tolist() == [[200]]


def test_estimates_score_only_the_candidates_and_give_float32_scores(monkeypatch):
    """On real-valued scores the float32 products never run (every range's candidates come from
    the estimates) and the top-k and its scores are the float32 path's."""
    generator = torch.Generator().manual_seed(0)
    hidden, table = (
        torch.randn(20, 16, generator=generator),
        torch.randn(5001, 16, generator=generator),
    )
    bias = torch.randn(5001, generator=generator)
    exclusions = exclusions_of([[1, 2, 3]] * 20, [[2]] * 20)
    plain_values, plain_ids = rank_block(
        float32_block(hidden, table, bias, with_estimates=False), exclusions, 5000, 10, 512
    )

    def no_float32_range(*args):
        raise AssertionError("a range was scored in float32")

    monkeypatch.setattr(ranking, "range_top", no_float32_range)
    values, ids = rank_block(float32_block(hidden, table, bias), exclusions, 5000, 10, 512)
    torch.testing.assert_close(values, plain_values, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(ids.numpy(), plain_ids.numpy())
    assert not np.isin(ids.numpy(), [1, 3]).any()


def test_nearly_equal_scores_fall_back_to_float32_ranges(monkeypatch):
    """Every item within the bound of the k-th: the estimates admit too many, and the range is
    scored in float32, with the exact result."""
    hidden = torch.ones(3, 4)
    table = torch.ones(6001, 4) + torch.arange(6001)[:, None] * 1e-7
    calls = []
    monkeypatch.setattr(ranking, "range_top", lambda *a: calls.append(a) or plain_top(*a))
    width = (ESTIMATE_BLOCK * MAX_HOT_BLOCKS) + 100  # every block hot: past the limit
    _, ids = rank_block(float32_block(hidden, table), Exclusions.none(), 6000, 5, width)
    assert len(calls) == 2  # the two whole ranges of 2,148 items; the last is narrower
    exact = (hidden.double() @ table.double().T).numpy()
    np.testing.assert_array_equal(ids.numpy(), reference_topk(exact, [[]] * 3, [[]] * 3, 5))


plain_top = ranking.range_top


def test_a_nan_hidden_state_still_stops_the_evaluation():
    hidden = torch.randn(4, 8)
    hidden[2, 3] = float("nan")
    table = torch.randn(301, 8)
    assert estimates_of(hidden, table) is None
    block = ScoreBlock(np.arange(4), lambda a, b: hidden @ table[a:b].T, None)
    values, _ = rank_block(block, Exclusions.none(), 300, 5, 64)
    assert torch.isnan(values[2, 0])


def test_a_wide_catalogue_evaluation_uses_estimates_with_the_same_metrics(monkeypatch):
    """A model over 70,000 items (past ``SCORE_WHOLE_ITEMS``): the evaluation ranks from
    estimates where the CPU has them, and its metrics are the float32 ranges'."""
    num_items = 70_000
    config = RunConfig.from_dict({"model": {"name": "sasrec+", "hidden_size": 16, "num_blocks": 1}})
    model = build(config, num_items).eval()
    with torch.no_grad():  # a trained model's spread: the untrained table is nearly flat
        model.output_embedding().normal_()
    rng = np.random.default_rng(0)
    history = [list(rng.integers(1, num_items + 1, size=rng.integers(1, 30))) for _ in range(40)]
    targets = [[int(rng.integers(1, num_items + 1))] for _ in range(40)]
    task = EvalTask(
        np.arange(40),
        Sequences.from_lists(history),
        Sequences.from_lists(targets),
        Sequences.from_lists(history),
    )
    eval_config = EvalConfig(ks=(1, 10, 50), batch_size=16)
    used = []
    original = estimates_module.Estimates.candidates
    monkeypatch.setattr(
        estimates_module.Estimates,
        "candidates",
        lambda self, *a: used.append(1) or original(self, *a),
    )
    monkeypatch.setattr(scoring, "estimates_available", lambda device: True)
    estimated = evaluate_model(model, task, num_items, eval_config)
    assert used
    monkeypatch.setattr(scoring, "estimates_available", lambda device: False)
    used.clear()
    plain = evaluate_model(model, task, num_items, eval_config)
    assert not used
    assert estimated.metrics == plain.metrics


@pytest.mark.parametrize(
    ("bf16", "amx", "device", "expected"),
    [
        (False, False, "cpu", False),
        (True, False, "cpu", True),
        (False, True, "cpu", True),
        (True, True, "meta", False),
    ],
)
def test_estimates_are_offered_where_the_cpu_computes_bfloat16(
    monkeypatch, bf16, amx, device, expected
):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    assert estimates_module.estimates_available(torch.device(device)) == expected
