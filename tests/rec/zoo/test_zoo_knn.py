"""kNN baselines against per-user loop references, and scored by the shared evaluator."""

import math

import numpy as np
import pytest
import torch
from zoo_helpers import one_thread

from attnsvm.rec.data.sequences import EvalTask, Sequences
from attnsvm.rec.eval import evaluate
from attnsvm.rec.models.knn import BASELINES, Popularity, SessionKNN, build_baseline

NUM_ITEMS = 12


@pytest.fixture(autouse=True)
def _single_thread():
    with one_thread():
        yield


def data(seed: int = 0) -> tuple[Sequences, EvalTask]:
    rng = np.random.default_rng(seed)
    train = Sequences.from_lists(
        [rng.integers(1, NUM_ITEMS + 1, size=rng.integers(2, 7)).tolist() for _ in range(15)]
    )
    history = train.select(np.arange(10))
    targets = Sequences.from_lists([[int(rng.integers(1, NUM_ITEMS + 1))] for _ in range(10)])
    empty = Sequences.from_lists([[] for _ in range(10)])
    return train, EvalTask(np.arange(10), history, targets, empty)


def weights(history: list[int], kind: str, lambda_spw: float) -> dict[int, float]:
    n = len(history)
    out = {}
    for p, item in enumerate(history, start=1):  # the latest occurrence wins
        out[item] = {"sknn": 1.0, "vsknn": p / n, "vstan": math.exp((p - n) / lambda_spw)}[kind]
    return out


def reference_scores(model: SessionKNN, train: Sequences, task: EvalTask) -> np.ndarray:
    rows = train.to_lists()
    scores = np.zeros((len(task), NUM_ITEMS + 1))
    for r in range(len(task)):
        history = task.history.row(r).tolist()
        w = weights(history, model.kind, model.lambda_spw)
        sims = []
        for s, session in enumerate(rows):
            if s == task.users[r]:
                sims.append(0.0)
                continue
            shared = set(w) & set(session)
            sims.append(sum(w[i] for i in shared) / math.sqrt(len(w) * len(set(session))))
        order = np.argsort(-np.array(sims), kind="stable")[: model.neighbours]
        for s in order:
            session = rows[s]
            position = {item: p for p, item in enumerate(session, start=1)}
            if model.kind != "vstan":
                for item in set(session):
                    scores[r, item] += sims[s]
                continue
            shared = [i for i in set(session) if i in w]
            if not shared:
                continue
            latest_in_history = {i: p for p, i in enumerate(history, start=1)}
            match = position[max(shared, key=lambda i: latest_in_history[i])]
            for item, p in position.items():
                scores[r, item] += sims[s] * math.exp(-abs(p - match) / model.lambda_inh)
    return scores


@pytest.mark.parametrize("kind", ["sknn", "vsknn", "vstan"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_session_knn_matches_the_loop_reference(kind: str, seed: int) -> None:
    train, task = data(seed)
    # k = all sessions, so ties at the k-th neighbour cannot make the two differ
    model = SessionKNN(kind, neighbours=len(train)).fit(train, NUM_ITEMS)
    got = model.score_function(task)(np.arange(len(task))).numpy()
    np.testing.assert_allclose(got, reference_scores(model, train, task), rtol=1e-5, atol=1e-6)


def test_fewer_neighbours_keep_the_most_similar() -> None:
    train, task = data(0)
    full = SessionKNN("sknn", neighbours=len(train)).fit(train, NUM_ITEMS)
    few = SessionKNN("sknn", neighbours=1).fit(train, NUM_ITEMS)
    rows = np.arange(len(task))
    one, everything = few.score_function(task)(rows), full.score_function(task)(rows)
    assert torch.all(one <= everything + 1e-6)
    assert torch.all((one > 0).sum(1) <= 6)  # one neighbour of at most 6 items


def test_pop_and_knn_are_scored_by_the_shared_evaluator() -> None:
    train, task = data(0)
    pop = Popularity().fit(train, NUM_ITEMS)
    counts = np.bincount(train.items, minlength=NUM_ITEMS + 1)
    np.testing.assert_array_equal(pop.score_function(task)(np.arange(2))[1].numpy(), counts)
    for name in BASELINES:
        model = build_baseline(name).fit(train, NUM_ITEMS)
        result = evaluate(model.score_function(task), task, NUM_ITEMS, ks=(1, 5))
        assert 0.0 <= result.metrics["HR@5"] <= 1.0
    with pytest.raises(ValueError, match="unknown baseline"):
        build_baseline("itemknn")
