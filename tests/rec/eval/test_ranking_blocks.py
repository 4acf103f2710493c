"""Ranking by score blocks and item ranges: the brute-force reference's top-k, wide rows through
the block-maxima pre-selection, and the evaluation path from before blocks, bit for bit."""

import itertools

import numpy as np
import pytest
import torch
from eval_reference import reference_topk
from hypothesis import given, settings
from hypothesis import strategies as st
from previous_ranking import previous_rank_topk, previous_score_function
from rich.progress import Progress

from attnsvm.rec.config import ConfigError, EvalConfig, RunConfig, apply_overrides
from attnsvm.rec.data.sequences import EvalTask, Sequences
from attnsvm.rec.eval import ranking
from attnsvm.rec.eval.metrics import metrics_from_topk
from attnsvm.rec.eval.ranking import ScoreBlock, item_ranges, rank_topk
from attnsvm.rec.eval.topk import TOPK_BLOCK, topk_lower_id_first
from attnsvm.rec.models import MODELS, resolve
from attnsvm.rec.train import scoring
from attnsvm.rec.train.scoring import (
    evaluate_model,
    ranking_progress,
    score_function,
    validation_task,
)


def make_task(history, targets, exclude=None):
    history, targets = Sequences.from_lists(history), Sequences.from_lists(targets)
    exclude = history if exclude is None else Sequences.from_lists(exclude)
    return EvalTask(np.arange(len(history)), history, targets, exclude)


class BlockedScores:
    """A fixed score matrix handed to the ranker in blocks: each batch's rows in a shuffled
    order, cut into pieces, each piece's scores read range by range."""

    def __init__(self, scores: np.ndarray, seed: int) -> None:
        self.scores = torch.as_tensor(scores)
        self.rng = np.random.default_rng(seed)

    def __call__(self, rows: np.ndarray) -> torch.Tensor:
        return self.scores[torch.from_numpy(rows)].clone()

    def blocks(self, rows: np.ndarray):
        order = self.rng.permutation(rows.size)
        for part in np.array_split(order, self.rng.integers(1, rows.size + 1)):
            mine = self.scores[torch.from_numpy(rows[part])]
            yield ScoreBlock(part, lambda start, stop, s=mine: s[:, start:stop].clone())


@st.composite
def ranking_cases(draw):
    num_items = draw(st.integers(1, 40))
    n_users = draw(st.integers(1, 8))
    tied = draw(st.booleans())
    values = st.integers(-2, 2).map(float) if tied else st.floats(-1e3, 1e3, width=32)
    values = st.one_of(values, st.just(float("-inf")), st.just(float("inf")))
    row = st.lists(values, min_size=num_items + 1, max_size=num_items + 1)
    scores = [draw(row) for _ in range(n_users)]
    item = st.integers(1, num_items)
    exclude = [draw(st.lists(item, max_size=num_items, unique=True)) for _ in range(n_users)]
    targets = [draw(st.lists(item, min_size=1, max_size=3)) for _ in range(n_users)]
    k = draw(st.integers(1, num_items))
    batch_size = draw(st.integers(1, n_users + 1))
    item_chunk = draw(st.none() | st.integers(1, num_items + 1))
    return np.array(scores, dtype=np.float32), exclude, targets, k, batch_size, item_chunk


@settings(max_examples=200)
@given(ranking_cases(), st.booleans(), st.booleans(), st.integers(0, 2**32 - 1))
def test_blocks_and_item_ranges_rank_as_the_brute_force(case, exclude_seen, blocked, seed):
    scores, exclude, targets, k, batch_size, item_chunk = case
    score_fn = BlockedScores(scores, seed) if blocked else BlockedScores(scores, seed).__call__
    got = rank_topk(
        score_fn,
        make_task(exclude, targets),
        scores.shape[1] - 1,
        k,
        batch_size=batch_size,
        exclude_seen=exclude_seen,
        item_chunk=item_chunk,
    )
    np.testing.assert_array_equal(got, reference_topk(scores, exclude, targets, k, exclude_seen))


def sorted_reference(scores: np.ndarray, k: int) -> np.ndarray:
    """Each row's k best columns by (score desc, column asc), 0 where the score is -inf."""
    columns = np.arange(scores.shape[1])
    out = np.zeros((len(scores), k), dtype=np.int64)
    for r, row in enumerate(scores):
        best = np.lexsort((columns, -row))[:k]
        out[r] = np.where(row[best] == -np.inf, 0, best)
    return out


@pytest.mark.parametrize("k", [1, 10, 30])
@pytest.mark.parametrize("kind", ["distinct", "few values", "planted ties", "mostly -inf"])
def test_wide_rows_pre_selected_by_block_maxima_keep_the_exact_order(k, kind):
    """Rows of 9,000 columns go through the block maxima (``_top_by_blocks``): ties across
    blocks at the k-th score, everywhere, or within -inf rows leave the result exact."""
    rng = np.random.default_rng(k)
    width = 9000
    assert width >= 4 * TOPK_BLOCK * (k + 1)
    if kind == "distinct":
        scores = rng.normal(size=(12, width)).astype(np.float32)
    elif kind == "few values":
        scores = rng.integers(-3, 4, size=(12, width)).astype(np.float32)
    elif kind == "planted ties":
        scores = rng.normal(size=(12, width)).astype(np.float32)
        for row in scores:  # the k-th best value again in other blocks, before and after it
            kth = np.sort(row)[-k]
            row[rng.choice(width, 5, replace=False)] = kth
    else:
        scores = np.full((12, width), -np.inf, dtype=np.float32)
        for row in scores:
            row[rng.choice(width, k // 2, replace=False)] = rng.normal(size=k // 2)
    values, ids = topk_lower_id_first(torch.from_numpy(scores), k)
    expected = sorted_reference(scores, k)
    np.testing.assert_array_equal(ids.numpy(), expected)
    np.testing.assert_array_equal(
        values.numpy(), np.take_along_axis(scores, np.maximum(expected, 0), 1)
    )


def test_nan_in_a_later_item_range_is_reported():
    scores = np.zeros((3, 50), dtype=np.float32)
    scores[1, 40] = np.nan
    with pytest.raises(ValueError, match="NaN scores for task rows 1"):
        rank_topk(BlockedScores(scores, 0), make_task([[], [], []], [[1]] * 3), 49, 5, item_chunk=8)


def test_a_block_of_the_wrong_shape_gets_a_clear_error():
    class Short:
        def blocks(self, rows):
            yield ScoreBlock(np.arange(rows.size), lambda start, stop: torch.zeros(rows.size, 2))

    with pytest.raises(ValueError, match=r"score block returned \(1, 2\) for items 0\.\.3"):
        rank_topk(Short(), make_task([[]], [[1]]), 3, 2)


def test_item_ranges_cover_the_catalogue_whole_or_in_aligned_ranges():
    assert item_ranges(512, 54_542) == [(0, 54_543)]  # the largest catalogue here: whole
    assert len(item_ranges(116, 277_000)) > 1  # a wide catalogue in ranges below 2**25 scores
    ranges = item_ranges(128, 1_000_000)
    assert ranges[0] == (0, ranking.SCORE_RANGE_ELEMENTS // 128) and ranges[-1][1] == 1_000_001
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert all((stop - start) % ranking.SCORE_RANGE_ALIGN == 0 for start, stop in ranges[:-1])
    assert item_ranges(4, 10, item_chunk=4) == [(0, 4), (4, 8), (8, 11)]
    with pytest.raises(ValueError, match="item_chunk=0 must be >= 1"):
        item_ranges(4, 10, item_chunk=0)


def test_progress_counts_every_row_once_and_leaves_no_task():
    calls = []
    task = make_task([[1]] * 7, [[2]] * 7)
    score_fn = BlockedScores(np.ones((7, 4)), 1)
    rank_topk(score_fn, task, 3, 2, batch_size=3, progress=lambda *a: calls.append(a))
    assert [total for _, total in calls] == [7] * len(calls)
    assert [done for done, _ in calls] == sorted({done for done, _ in calls})
    assert calls[-1] == (7, 7)
    with Progress(disable=True) as progress:
        rank_topk(score_fn, task, 3, 2, batch_size=3, progress=ranking_progress(progress, "test"))
        assert not progress.tasks


# -- a model's scores: blocks and ranges against the previous path ---------------------------


def real_shaped_task(users: int, items: int, seed: int = 0) -> EvalTask:
    """Histories as logs have them: power-law item popularity, lengths from 1 to beyond the
    window, seen items excluded, one target each."""
    rng = np.random.default_rng(seed)
    lengths = np.minimum(rng.geometric(1 / 40, size=users), 300)
    popularity = 1.0 / np.arange(1, items + 1) ** 0.8
    flat = rng.choice(np.arange(1, items + 1), size=lengths.sum(), p=popularity / popularity.sum())
    users_ids = np.arange(users)
    history = Sequences(np.concatenate([[0], np.cumsum(lengths)]), flat, users_ids)
    targets = Sequences(np.arange(users + 1), rng.integers(1, items + 1, size=users), users_ids)
    return EvalTask(users_ids, history, targets, history)


def random_model(name: str, items: int):
    name, config, _ = resolve(name, hidden_size=32, num_blocks=1, max_len=50)
    torch.manual_seed(0)
    return MODELS[name].model_class(items, config).eval()


@pytest.mark.parametrize(
    ("name", "bf16", "exclude_seen"),
    [
        ("sasrec+", False, True),  # padding-free: four length groups a batch
        ("sasrec+", True, True),
        ("sasrec+", False, False),
        ("bert4rec", False, True),  # one block a batch
    ],
)
def test_model_rankings_equal_the_previous_path_bit_for_bit(name, bf16, exclude_seen):
    items = 3000
    task = real_shaped_task(700, items)
    model = random_model(name, items)
    cpu = torch.device("cpu")
    before = previous_rank_topk(
        previous_score_function(model, task, cpu, bf16), task, items, 20, 256, exclude_seen
    )
    config = EvalConfig(ks=(1, 10, 20), batch_size=256, exclude_seen=exclude_seen)
    now = evaluate_model(model, task, items, config, bf16=bf16)
    got = rank_topk(
        score_function(model, task, cpu, bf16), task, items, 20, batch_size=256,
        exclude_seen=exclude_seen,
    )  # fmt: skip
    np.testing.assert_array_equal(got, before)
    metrics, _ = metrics_from_topk(before, task.targets, (1, 10, 20), num_items=items)
    assert now.metrics == metrics


def test_ml100k_rankings_equal_the_previous_path_bit_for_bit(shared_data):
    from attnsvm.rec.data.datasets import load_dataset
    from attnsvm.rec.data.splits import leave_one_out

    split = leave_one_out(load_dataset("ml-100k", root=shared_data))
    model = random_model("sasrec+", split.num_items)
    cpu = torch.device("cpu")
    for task in (split.valid, split.test):
        before = previous_rank_topk(
            previous_score_function(model, task, cpu), task, split.num_items, 20, 512
        )
        got = rank_topk(score_function(model, task, cpu), task, split.num_items, 20, batch_size=512)
        np.testing.assert_array_equal(got, before)


def test_called_scores_equal_the_previous_and_ranges_the_whole(monkeypatch):
    """Called, the scores are the previous path's in row order, bit for bit; scored in ranges
    (a large catalogue), a block's scores are the whole catalogue's up to float rounding."""
    items = 9000
    task = real_shaped_task(64, items, seed=1)
    model = random_model("sasrec+", items)
    cpu = torch.device("cpu")
    rows = np.arange(64)[::-1].copy()
    scores = score_function(model, task, cpu)
    previous = previous_score_function(model, task, cpu)(rows)
    assert torch.equal(scores(rows), previous)
    monkeypatch.setattr(ranking, "SCORE_WHOLE_ELEMENTS", 0)
    monkeypatch.setattr(scoring, "SCORE_TILE_ITEMS", 1000)
    for block in scores.blocks(rows):
        pieces = [block.scores(a, b) for a, b in item_ranges(len(block.positions), items, 2500)]
        expected = previous[torch.from_numpy(block.positions)]
        torch.testing.assert_close(torch.cat(pieces, dim=1), expected, rtol=1e-5, atol=1e-5)


def test_validation_samples_users_only_past_the_score_budget():
    task = real_shaped_task(500, 50)
    every, note = validation_task(task, EvalConfig(valid_max_scores=500 * 50), 50, seed=3)
    assert every is task and note is None
    sample, note = validation_task(task, EvalConfig(valid_max_scores=100 * 50 + 7), 50, seed=3)
    assert len(sample) == 100 and np.all(np.diff(sample.users) > 0)
    assert note.startswith("validation: a fixed sample of 100 of 500 users every epoch")
    again, _ = validation_task(task, EvalConfig(valid_max_scores=100 * 50 + 7), 50, seed=3)
    np.testing.assert_array_equal(again.users, sample.users)  # fixed by the seed
    chosen, note = validation_task(task, EvalConfig(valid_users=40, valid_max_scores=1), 50, 3)
    assert len(chosen) == 40 and note is None  # the user's own count: nothing to say
    everyone, _ = validation_task(task, EvalConfig(valid_max_scores=None), 50, seed=3)
    assert everyone is task
    for value, expected in (("none", None), ("5000000000", 5 * 10**9)):
        config = apply_overrides(RunConfig(), [f"eval.valid_max_scores={value}"])
        assert config.eval.valid_max_scores == expected
    with pytest.raises(ConfigError, match=r"eval\.valid_max_scores must lie in"):
        apply_overrides(RunConfig(), ["eval.valid_max_scores=0"])
