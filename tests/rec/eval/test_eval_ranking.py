"""Full ranking: brute-force reference with forced ties, the tie rule, exclusion, errors, I/O."""

import json

import numpy as np
import pytest
import torch
from eval_reference import reference_metrics, reference_topk
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsvm.rec.data.sequences import EvalTask, Sequences
from attnsvm.rec.eval import EvalResult, evaluate, rank_topk


def make_task(history, targets, exclude=None):
    history, targets = Sequences.from_lists(history), Sequences.from_lists(targets)
    exclude = history if exclude is None else Sequences.from_lists(exclude)
    return EvalTask(np.arange(len(history)), history, targets, exclude)


def matrix_score_fn(scores, calls=None):
    """A model that is a fixed score matrix; records each batch's rows when ``calls`` is a list."""
    scores = torch.as_tensor(scores)

    def score_fn(rows):
        if calls is not None:
            calls.append(rows.copy())
        return scores[torch.from_numpy(rows)].clone()

    return score_fn


@st.composite
def ranking_cases(draw):
    num_items = draw(st.integers(1, 30))
    n_users = draw(st.integers(1, 8))
    tied = draw(st.booleans())  # few distinct values: ties everywhere, also at the boundary
    values = st.integers(-2, 2).map(float) if tied else st.floats(-1e3, 1e3, width=32)
    values = st.one_of(values, st.just(float("-inf")), st.just(float("inf")))
    scores = [draw(st.lists(values, min_size=num_items + 1, max_size=num_items + 1))]
    scores += [
        draw(st.lists(values, min_size=num_items + 1, max_size=num_items + 1))
        for _ in range(n_users - 1)
    ]
    item = st.integers(1, num_items)
    exclude = [draw(st.lists(item, max_size=num_items, unique=True)) for _ in range(n_users)]
    targets = [draw(st.lists(item, min_size=1, max_size=3)) for _ in range(n_users)]
    k = draw(st.integers(1, num_items))
    batch_size = draw(st.integers(1, n_users + 1))
    return np.array(scores, dtype=np.float32), exclude, targets, k, batch_size


@settings(max_examples=200)
@given(ranking_cases(), st.booleans())
def test_rank_topk_matches_brute_force(case, exclude_seen):
    scores, exclude, targets, k, batch_size = case
    task = make_task(exclude, targets)
    num_items = scores.shape[1] - 1
    got = rank_topk(
        matrix_score_fn(scores),
        task,
        num_items,
        k,
        batch_size=batch_size,
        exclude_seen=exclude_seen,
    )
    expected = reference_topk(scores, exclude, targets, k, exclude_seen)
    np.testing.assert_array_equal(got, expected)


def test_ties_rank_lower_item_id_first_also_at_the_topk_boundary():
    num_items = 5000
    scores = torch.zeros(3, num_items + 1)
    scores[1, 4000:] = 1.0  # 1,001 items tied above a sea of tied zeros
    scores[2] = (
        num_items - torch.arange(num_items + 1, dtype=torch.float32)
    ) // 7  # blocks of 7 ties
    task = make_task([[], [], []], [[1], [1], [1]])
    got = rank_topk(lambda rows: scores[torch.from_numpy(rows)].clone(), task, num_items, 20)
    assert got[0].tolist() == list(range(1, 21))
    assert got[1].tolist() == list(range(4000, 4020))
    # row 2 is decreasing in the id, with ties in groups; id 0 is padding and never listed
    expected = sorted(range(1, num_items + 1), key=lambda i: (-float(scores[2, i]), i))[:20]
    assert got[2].tolist() == expected


@pytest.mark.parametrize(("num_items", "k"), [(4, 1), (9, 3), (32, 20), (99, 3), (999, 20)])
def test_all_equal_scores_list_the_lowest_ids(num_items, k):
    # torch.topk alone returns e.g. [2] for 5 equal scores and k=1: not the lowest id
    task = make_task([[]], [[1]])
    got = rank_topk(lambda rows: torch.zeros(1, num_items + 1), task, num_items, k)
    assert got[0].tolist() == list(range(1, k + 1))


def test_seen_items_are_excluded_but_own_targets_stay_rankable():
    scores = np.array([[9.0, 5, 4, 3, 2, 1]] * 2)
    task = make_task([[1, 2, 3], [1, 2, 3]], [[2], [5]])
    np.testing.assert_array_equal(
        rank_topk(matrix_score_fn(scores), task, 5, 3), [[2, 4, 5], [4, 5, 0]]
    )
    kept = rank_topk(matrix_score_fn(scores), task, 5, 3, exclude_seen=False)
    np.testing.assert_array_equal(kept, [[1, 2, 3], [1, 2, 3]])


def test_exclude_row_is_used_as_given_not_recomputed_from_history():
    scores = np.array([[0.0, 3, 2, 1]])
    task = make_task([[1]], [[3]], exclude=[[2]])
    np.testing.assert_array_equal(rank_topk(matrix_score_fn(scores), task, 3, 2), [[1, 3]])


def test_scores_arrive_in_batches_never_all_users_at_once():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(10, 8)).astype(np.float32)
    calls = []
    task = make_task([[]] * 10, [[1]] * 10)
    rank_topk(matrix_score_fn(scores, calls), task, 7, 3, batch_size=4)
    assert [c.tolist() for c in calls] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_integer_and_half_precision_scores_are_ranked():
    task = make_task([[], []], [[1], [2]])
    ints = torch.tensor([[0, 1, 3, 2], [0, 5, 5, 5]])
    np.testing.assert_array_equal(
        rank_topk(lambda r: ints[r].clone(), task, 3, 3), [[2, 3, 1], [1, 2, 3]]
    )
    half = ints.to(torch.bfloat16)
    np.testing.assert_array_equal(
        rank_topk(lambda r: half[r].clone(), task, 3, 2), [[2, 3], [1, 2]]
    )


@pytest.mark.parametrize(
    ("score_fn", "message"),
    [
        (lambda rows: torch.zeros(len(rows), 3), r"score_fn returned \(1, 3\); expected \(1, 4\)"),
        (lambda rows: np.zeros((len(rows), 4)), r"score_fn returned ndarray"),
        (lambda rows: torch.full((len(rows), 4), torch.nan), "NaN scores for task rows 0"),
    ],
)
def test_bad_score_functions_get_a_clear_error(score_fn, message):
    with pytest.raises(ValueError, match=message):
        rank_topk(score_fn, make_task([[1]], [[2]]), 3, 2)


def test_bad_arguments_get_a_clear_error():
    task = make_task([[1]], [[9]])
    zeros = matrix_score_fn(np.zeros((1, 4)))
    with pytest.raises(ValueError, match=r"EvalTask.targets holds item id 9, but the catalogue"):
        rank_topk(zeros, task, 3, 2)
    with pytest.raises(ValueError, match=r"k=5 must be in 1\.\.num_items=3"):
        rank_topk(zeros, make_task([[1]], [[2]]), 3, 5)


def test_evaluate_matches_reference_and_labels_the_protocol():
    rng = np.random.default_rng(1)
    num_items, n_users = 40, 25
    scores = rng.integers(0, 6, size=(n_users, num_items + 1)).astype(np.float32)
    history = [
        rng.choice(np.arange(1, num_items + 1), 10, replace=False).tolist() for _ in range(n_users)
    ]
    targets = [[int(rng.integers(1, num_items + 1))] for _ in range(n_users)]
    popularity = rng.integers(0, 100, size=num_items + 1).astype(np.float64)
    result = evaluate(
        matrix_score_fn(scores),
        make_task(history, targets),
        num_items,
        (1, 10),
        batch_size=7,
        item_popularity=popularity,
    )
    assert result.protocol == "full ranking, seen items excluded"
    topk = reference_topk(scores, history, targets, 10)
    for name, values in reference_metrics(topk, targets, (1, 10)).items():
        np.testing.assert_allclose(result.per_user[name], values)
    assert result.metrics["coverage@10"] == len(np.unique(topk)) / num_items
    assert result.metrics["popularity@1"] == pytest.approx(popularity[topk[:, 0]].mean())
    np.testing.assert_array_equal(result.users, np.arange(n_users))
    kept = evaluate(
        matrix_score_fn(scores), make_task(history, targets), num_items, (1,), exclude_seen=False
    )
    assert kept.protocol == "full ranking, seen items kept"


def test_a_perfect_model_scores_one():
    num_items = 50
    targets = [[i] for i in range(1, num_items + 1)]
    scores = np.eye(num_items + 1, dtype=np.float32)[1:]
    result = evaluate(matrix_score_fn(scores), make_task([[]] * num_items, targets), num_items)
    assert all(
        result.metrics[f"{m}@{k}"] == 1.0
        for m in ("HR", "NDCG", "MRR", "Recall")
        for k in (1, 5, 10, 20)
    )


def test_save_load_round_trip_leaves_no_temporary_files(tmp_path):
    rng = np.random.default_rng(2)
    scores = rng.normal(size=(6, 21)).astype(np.float32)
    result = evaluate(matrix_score_fn(scores), make_task([[1, 2]] * 6, [[3]] * 6), 20, (1, 5))
    path = tmp_path / "test_metrics.json"
    result.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test_metrics.json", "test_metrics.npz"]
    loaded = EvalResult.load(path)
    assert loaded.metrics == result.metrics
    assert loaded.protocol == result.protocol
    np.testing.assert_array_equal(loaded.users, result.users)
    assert list(loaded.per_user) == list(result.per_user)
    for name, values in result.per_user.items():
        np.testing.assert_array_equal(loaded.per_user[name], values)
    on_disk = json.loads(path.read_text())
    assert on_disk == {"protocol": result.protocol, "num_users": 6, "metrics": result.metrics}


def test_a_failed_save_keeps_the_previous_file(tmp_path, monkeypatch):
    result = evaluate(matrix_score_fn(np.ones((2, 4))), make_task([[], []], [[1], [2]]), 3, (1,))
    path = tmp_path / "m.json"
    result.save(path)
    before = path.read_text()

    def broken_dumps(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(json, "dumps", broken_dumps)
    with pytest.raises(RuntimeError, match="disk full"):
        result.save(path)
    assert path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "m.npz"]


def test_loading_a_foreign_json_names_the_file(tmp_path):
    result = evaluate(matrix_score_fn(np.ones((2, 4))), make_task([[], []], [[1], [2]]), 3, (1,))
    path = tmp_path / "m.json"
    result.save(path)
    path.write_text('{"metrics": {}}')
    with pytest.raises(ValueError, match=r"m\.json: not a saved evaluation result"):
        EvalResult.load(path)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_scores_on_the_gpu_rank_like_on_the_cpu():
    rng = np.random.default_rng(3)
    scores = torch.from_numpy(rng.integers(0, 4, size=(30, 51)).astype(np.float32))
    task = make_task([rng.choice(50, 5, replace=False) + 1 for _ in range(30)], [[1]] * 30)
    on_cpu = rank_topk(lambda rows: scores[rows].clone(), task, 50, 10, batch_size=8)
    gpu_scores = scores.cuda()
    on_gpu = rank_topk(lambda rows: gpu_scores[rows].clone(), task, 50, 10, batch_size=8)
    np.testing.assert_array_equal(on_gpu, on_cpu)
