"""Non-neural baselines of the protocol study (Latifi, Jannach & Ferraro 2022): pop and session kNN.

Every baseline is ``fit(train, num_items)`` on the training ``Sequences`` (each user's training
sequence is one "session") and then ``score_function(task)``: the ``rows → (len(rows),
num_items + 1)`` tensor the evaluator takes, so the same evaluator ranks it, seen filter and tie
rule included. Everything is sparse-matrix algebra over a batch of users; no loop over users.

- ``pop``: training popularity, the same list for everyone.
- ``sknn``: cosine similarity ``|h ∩ s| / √(|h| |s|)`` between the user's history h and every
  training sequence s; the k most similar (the user's own excluded) vote for their items,
  weighted by similarity.
- ``vsknn``: as sknn, with the history's items weighted by recency, ``w = p / n`` for position
  p of n (VSKNN's linear decay), in the similarity ``Σ_{i ∈ h ∩ s} w_i / √(|h| |s|)``.
- ``vstan``: sequence-aware neighbourhoods (STAN): history positions decay as
  ``exp((p − n) / λ_spw)``, and inside a neighbour each item votes with
  ``exp(−|q − m| / λ_inh)`` where q is its position and m the position of the neighbour's match,
  the most recent history item it shares. STAN's time decay of neighbours needs session start
  times, which leave-one-out sequences do not carry, so it is not applied.

Defaults are untuned (the study tunes k, λ by 100 random-search iterations per dataset).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from attnsvm.rec.data.sequences import EvalTask, Sequences

KINDS = ("sknn", "vsknn", "vstan")


def _positions(seqs: Sequences) -> tuple[np.ndarray, np.ndarray]:
    """Row and 1-based position of every stored item."""
    row = np.repeat(np.arange(len(seqs)), seqs.lengths)
    return row, np.arange(seqs.items.size) - seqs.offsets[row] + 1


def _matrix(row, item, value, shape) -> sp.csr_matrix:
    """CSR with duplicates (an item repeated in a row) resolved to the row's latest value."""
    order = np.lexsort((value, item, row))
    row, item, value = row[order], item[order], value[order]
    last = np.ones(row.size, dtype=bool)
    last[:-1] = (row[1:] != row[:-1]) | (item[1:] != item[:-1])
    return sp.csr_matrix((value[last], (row[last], item[last])), shape=shape)


class Popularity:
    name = "pop"

    def fit(self, train: Sequences, num_items: int) -> Popularity:
        counts = np.bincount(train.items, minlength=num_items + 1).astype(np.float32)
        self.scores = torch.from_numpy(counts)
        return self

    def score_function(self, task: EvalTask):
        return lambda rows: self.scores.expand(len(rows), -1).clone()


@dataclass
class SessionKNN:
    kind: str = "sknn"
    neighbours: int = 100
    lambda_spw: float = 2.0  # vstan: decay of history positions
    lambda_inh: float = 2.0  # vstan: decay of neighbour items away from the match

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.neighbours < 1:
            raise ValueError(f"neighbours must be ≥ 1, got {self.neighbours}")

    @property
    def name(self) -> str:
        return self.kind

    def fit(self, train: Sequences, num_items: int) -> SessionKNN:
        self.num_items = num_items
        row, position = _positions(train)
        shape = (len(train), num_items + 1)
        self.position = _matrix(row, train.items, position.astype(np.float64), shape)
        self.binary = self.position.copy()
        self.binary.data[:] = 1.0
        self.sizes = np.asarray(self.binary.sum(axis=1)).ravel()
        self.row_of_user = np.full(int(train.users.max(initial=-1)) + 1, -1, dtype=np.int64)
        self.row_of_user[train.users] = np.arange(len(train))
        return self

    def _query(self, history: Sequences) -> tuple[sp.csr_matrix, np.ndarray]:
        """History weights (rows × items + 1) and each row's latest position per item."""
        row, position = _positions(history)
        shape = (len(history), self.num_items + 1)
        latest = _matrix(row, history.items, position.astype(np.float64), shape)
        weights = latest.copy()
        row_of_entry = np.repeat(np.arange(shape[0]), np.diff(latest.indptr))
        n = history.lengths[row_of_entry].astype(np.float64)
        if self.kind == "sknn":
            weights.data[:] = 1.0
        elif self.kind == "vsknn":
            weights.data = latest.data / n
        else:
            weights.data = np.exp((latest.data - n) / self.lambda_spw)
        return weights, latest.toarray()

    def score_function(self, task: EvalTask):
        def score(rows: np.ndarray) -> torch.Tensor:
            history = task.history.select(rows)
            weights, latest = self._query(history)
            query_sizes = np.maximum(np.diff(weights.indptr), 1)
            similarity = (weights @ self.binary.T).toarray()
            similarity /= np.sqrt(np.outer(query_sizes, np.maximum(self.sizes, 1)))
            users = np.asarray(task.users[rows], dtype=np.int64)
            known = (users >= 0) & (users < self.row_of_user.size)
            own = np.where(known, self.row_of_user[np.where(known, users, 0)], -1)
            has_own = own >= 0
            similarity[np.flatnonzero(has_own), own[has_own]] = 0.0
            k = min(self.neighbours, similarity.shape[1])
            top = np.argpartition(-similarity, k - 1, axis=1)[:, :k]
            top_sim = np.take_along_axis(similarity, top, axis=1)
            pair_query = np.repeat(np.arange(len(rows)), k)
            if self.kind != "vstan":
                votes = sp.csr_matrix(
                    (top_sim.ravel(), (pair_query, top.ravel())), shape=similarity.shape
                )
                scores = (votes @ self.binary).toarray()
            else:
                scores = self._stan_votes(latest, pair_query, top.ravel(), top_sim.ravel())
            return torch.from_numpy(scores.astype(np.float32))

        return score

    def _stan_votes(self, latest, pair_query, neighbour, similarity) -> np.ndarray:
        """Scores from each (query, neighbour) pair, items weighted by distance to the match."""
        rows = self.position[neighbour]  # (pairs × items + 1), values: position in neighbour
        counts = np.diff(rows.indptr)
        entry_pair = np.repeat(np.arange(neighbour.size), counts)
        history_position = latest[pair_query[entry_pair], rows.indices]
        # the match is the shared item the query saw last: largest history position per pair
        best = np.zeros(neighbour.size)
        np.maximum.at(best, entry_pair, history_position)
        is_match = (history_position == best[entry_pair]) & (history_position > 0)
        match = np.zeros(neighbour.size)
        np.maximum.at(match, entry_pair[is_match], rows.data[is_match])
        vote = similarity[entry_pair] * np.exp(
            -np.abs(rows.data - match[entry_pair]) / self.lambda_inh
        )
        vote[best[entry_pair] == 0] = 0.0
        shape = (latest.shape[0], self.num_items + 1)
        return sp.csr_matrix((vote, (pair_query[entry_pair], rows.indices)), shape=shape).toarray()


BASELINES = {
    "pop": (Popularity, "non-neural: training popularity"),
    "sknn": (lambda: SessionKNN("sknn"), "non-neural: sequence kNN, cosine (Latifi 2022)"),
    "vsknn": (lambda: SessionKNN("vsknn"), "non-neural: kNN with linearly decayed history"),
    "vstan": (lambda: SessionKNN("vstan"), "non-neural: sequence- and position-aware kNN"),
}


#: A fitted or unfitted baseline (both have ``fit`` and ``score_function``).
Baseline = Popularity | SessionKNN


def baseline_fields(name: str) -> dict[str, type]:
    """The settings a baseline takes (``neighbours``, the decays), by name, with their types."""
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r} (known: {', '.join(BASELINES)})")
    if name == "pop":
        return {}
    fields = {"neighbours": int, "lambda_spw": float, "lambda_inh": float}
    return fields if name == "vstan" else {"neighbours": int}


def build_baseline(name: str, **settings):
    """The baseline ``name`` with ``settings`` (see :func:`baseline_fields`), not yet fitted."""
    known = baseline_fields(name)
    unknown = sorted(set(settings) - set(known))
    if unknown:
        raise ValueError(
            f"baseline {name!r} has no setting {unknown[0]!r} (settings: "
            f"{', '.join(known) or 'none'})"
        )
    return Popularity() if name == "pop" else SessionKNN(name, **settings)
