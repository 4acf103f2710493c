"""A finished run held in memory, answering many queries in one forward pass.

``Recommender(run_dir)`` loads the run once (``rec.train.runs.load_run``), every user's whole
history from the run's data (``rec.train.bulk.full_history_task``: the histories ``attnsvm
recommend --user`` reads) and the item titles and categories where the data has them (or
those given: ``attnsvm serve --titles``). Then:

- ``resolve(query, field)`` checks a query against the run (known user, known items, ``k``
  within the catalogue) and turns external ids into internal ones; a problem is a
  ``RequestError`` naming the request field, raised before any model work.
- ``resolve_similar(query)`` does the same for an item-to-item query: one query per item, a
  history of that item alone, the item itself excluded.
- ``recommend(resolved)`` scores every resolved query in **one** call of the run's score
  function (``LoadedRun.scores``, the evaluator's exact path; the cosine queries of
  ``/similar`` in one call of ``LoadedRun.item_cosines``), then ranks each row as the
  evaluator does (seen and excluded items at −∞, equal scores lower item id first), so each
  list equals ``attnsvm recommend``'s (``attnsvm similar``'s) for the same input.
- ``explain(resolved, candidates)`` is the lens on one history (``lens.history``).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from attnsvm.errors import InvalidRequest, shown
from attnsvm.lens.extract import LensError, float64_copy
from attnsvm.lens.history import read_history
from attnsvm.rec.data.item_titles import ItemTitles, match_catalogue
from attnsvm.rec.data.sequences import EvalTask, Sequences
from attnsvm.rec.data.titles import run_titles
from attnsvm.rec.eval.ranking import batch_scores, check_no_nan
from attnsvm.rec.eval.topk import topk_lower_id_first
from attnsvm.rec.train.bulk import full_history_task
from attnsvm.rec.train.runs import load_run
from attnsvm.rec.train.scoring import load_interactions
from attnsvm.serve.schemas import Query, SimilarQuery


class RequestError(InvalidRequest):
    """A request the run cannot answer, with the HTTP status and the request field at fault."""

    def __init__(self, status: int, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.status, self.field, self.message = status, field, message


@dataclass(frozen=True)
class Resolved:
    """A validated query in internal ids, ready for a forward pass."""

    user: object  # the external user id, or None for a given history
    items: np.ndarray  # internal item ids of the history, oldest first
    times: np.ndarray | None  # their timestamps (a known user's, where the data has them)
    row: int  # the run's internal user (SSE-PT's table row); -1: unknown
    excluded: np.ndarray  # internal ids never recommended: the history and ``exclude``
    allowed: np.ndarray | None  # internal ids to rank among (``restrict``), or all
    k: int
    skipped: list = field(default_factory=list)  # unknown item ids left out ("skip")
    method: str = "next"  # "next": next-item scores after ``items``; "cosine": like items[0]


class Recommender:
    """One run's model, catalogue, user histories and titles (see the module docstring)."""

    def __init__(self, run_dir: str | Path, titles: ItemTitles | None = None) -> None:
        self.run = load_run(run_dir)
        config = self.run.config
        data = load_interactions(config.data)
        self.histories = full_history_task(self.run, data)
        self.user_ids = data.user_ids
        self.user_row = {str(u): r for r, u in enumerate(data.user_ids.tolist())}
        self.item_index = {str(v): i for i, v in enumerate(self.run.item_ids.tolist()) if i > 0}
        self.num_items = len(self.run.item_ids) - 1
        self.popularity = np.bincount(data.item, minlength=self.num_items + 1)
        self.titles = (
            run_titles(config.data.dataset, config.data.root)
            if titles is None
            else match_catalogue(titles, self.run.item_ids)[0]
        )
        self.extra_inputs = () if self.run.baseline else self.run.model.extra_inputs
        self._model64 = None
        self._model64_lock = threading.Lock()

    # -- describing the run -------------------------------------------------------------------

    def metadata(self) -> dict:
        run, config = self.run, self.run.config
        metrics_file = run.run_dir / "metrics.json"
        metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
        modules = [] if run.baseline else run.model.attention_modules()
        return {
            "run": run.run_dir.name,
            "model": config.model.name,
            "baseline": run.baseline,
            "dataset": config.data.dataset,
            "catalogue_size": self.num_items,
            "users": len(self.user_ids),
            "max_len": None if run.baseline else run.model.config.max_len,
            "extra_inputs": list(self.extra_inputs),
            "attention": [{"layer": i, "heads": m.num_heads} for i, m in enumerate(modules)],
            "test_metrics": metrics.get("test", {}),
            "protocol": metrics.get("protocol"),
            "best_epoch": metrics.get("best_epoch"),
            "titles": bool(self.titles.titles),
            "categories": bool(self.titles.categories),
        }

    def title(self, item: object) -> str | None:
        return self.titles.title(item)

    def category(self, item: object) -> str | None:
        return self.titles.category(item)

    def external_item(self, internal: int) -> object:
        return self.run.item_ids[internal].item()

    def find_items(self, query: str, limit: int) -> list[dict]:
        """Items whose id or title contains ``query`` (case-insensitive), most popular first."""
        needle = query.strip().lower()
        order = np.argsort(-self.popularity[1:], kind="stable") + 1
        found = []
        for internal in order.tolist():
            item = self.external_item(internal)
            title = self.title(item)
            if needle in str(item).lower() or (title and needle in title.lower()):
                found.append({"item": item, "title": title})
                if len(found) == limit:
                    break
        return found

    def find_users(self, query: str, limit: int) -> list[object]:
        needle = query.strip().lower()
        return [u for u in self.user_ids.tolist() if needle in str(u).lower()][:limit]

    # -- validating ---------------------------------------------------------------------------

    def _internal(self, items: list, field: str, skip: bool) -> tuple[np.ndarray, list]:
        """Internal ids of external ``items`` and the unknown ids skipped; an unknown id is a
        422 naming its position unless ``skip``."""
        internal, skipped = [], []
        for position, item in enumerate(items):
            index = self.item_index.get(str(item))
            if index is None:
                if not skip:
                    message = f"unknown item id {shown(item)} (not in the catalogue)"
                    raise RequestError(422, f"{field}[{position}]", message)
                skipped.append(item)
                continue
            internal.append(index)
        return np.array(internal, dtype=np.int64), skipped

    def resolve(self, query: Query, field: str = "") -> Resolved:
        """``query`` checked against the run and put in internal ids (see the module docstring);
        ``field``: the query's place in the request (``requests[3].``) for error messages."""
        skip = query.unknown_items == "skip"
        times = None
        if query.user is not None:
            row = self.user_row.get(str(query.user))
            if row is None:
                raise RequestError(404, f"{field}user", f"unknown user id {shown(query.user)}")
            history = self.histories.history
            span = slice(history.offsets[row], history.offsets[row + 1])
            items = history.items[span]
            times = None if history.times is None else history.times[span]
            model_row = int(self.histories.users[row])
            skipped = []
        else:
            items, skipped = self._internal(query.history, f"{field}history", skip)
            model_row = -1  # a bare history belongs to no row of a user table
            if items.size == 0:
                raise RequestError(
                    422, f"{field}history", "no item of the history is in the catalogue"
                )
            if "timestamps" in self.extra_inputs:
                raise RequestError(
                    422,
                    f"{field}history",
                    f"{self.run.config.model.name} reads event times: ask for a known user",
                )
        exclude, skipped_exclude = self._internal(query.exclude, f"{field}exclude", skip)
        allowed = None
        skipped_restrict = []
        if query.restrict is not None:
            allowed, skipped_restrict = self._internal(query.restrict, f"{field}restrict", skip)
        self._check_k(query.k, field)
        excluded = np.unique(np.concatenate([items, exclude]))
        return Resolved(
            query.user,
            items,
            times,
            model_row,
            excluded,
            allowed,
            query.k,
            skipped + skipped_exclude + skipped_restrict,
        )

    def resolve_similar(self, query: SimilarQuery) -> tuple[list[Resolved], list]:
        """One resolved query per known item of ``query.items`` (a history of that item alone,
        the item itself excluded), and the unknown ids skipped."""
        skip = query.unknown_items == "skip"
        items, skipped = self._internal(query.items, "items", skip)
        items = np.array(list(dict.fromkeys(items.tolist())), dtype=np.int64)  # each item once
        if items.size == 0:
            raise RequestError(422, "items", "no item of items is in the catalogue")
        if query.method == "cosine" and self.run.baseline:
            message = f"{self.run.config.model.name} is a non-neural baseline: use method 'next'"
            raise RequestError(422, "method", message)
        events = {"timestamps": "times", "ratings": "ratings"}
        needed = [events[name] for name in self.extra_inputs if name in events]
        if query.method == "next" and needed:
            model = self.run.config.model.name
            message = f"{model} reads event {needed[0]}: use method 'cosine'"
            raise RequestError(422, "method", message)
        exclude, skipped_exclude = self._internal(query.exclude, "exclude", skip)
        allowed, skipped_restrict = None, []
        if query.restrict is not None:
            allowed, skipped_restrict = self._internal(query.restrict, "restrict", skip)
        self._check_k(query.k, "")
        resolved = [
            Resolved(
                None,
                np.array([item]),
                None,
                -1,  # no user: the unknown-user vector
                np.union1d([item], exclude),
                allowed,
                query.k,
                method=query.method,
            )
            for item in items.tolist()
        ]
        return resolved, skipped + skipped_exclude + skipped_restrict

    def _check_k(self, k: int, field: str) -> None:
        if k > self.num_items:
            raise RequestError(
                422, f"{field}k", f"k={k} exceeds the catalogue ({self.num_items} items)"
            )

    # -- answering ----------------------------------------------------------------------------

    def recommend(self, queries: list[Resolved]) -> list[list[tuple[int, float]]]:
        """``[(internal item, score), …]`` best first for every query, from one forward pass
        (and one cosine product for the queries of method "cosine")."""
        answers: list = [None] * len(queries)
        for method, scores in (("next", self._next_scores), ("cosine", self._cosine_scores)):
            positions = [i for i, query in enumerate(queries) if query.method == method]
            if positions:
                chosen = [queries[i] for i in positions]
                with torch.inference_mode():
                    ranked = self._ranked(scores(chosen), chosen)
                for position, answer in zip(positions, ranked, strict=True):
                    answers[position] = answer
        return answers

    def _next_scores(self, queries: list[Resolved]) -> torch.Tensor:
        lengths = np.array([q.items.size for q in queries], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        users = np.array([q.row for q in queries], dtype=np.int64)
        times = None
        if all(q.times is not None for q in queries):
            times = np.concatenate([q.times for q in queries])
        history = Sequences(offsets, np.concatenate([q.items for q in queries]), users, times)
        nothing = Sequences(np.zeros(len(queries) + 1, np.int64), np.zeros(0, np.int64), users)
        task = EvalTask(users, history, nothing, nothing)
        return batch_scores(self.run.scores(task), np.arange(len(queries)), self.num_items)

    def _cosine_scores(self, queries: list[Resolved]) -> torch.Tensor:
        items = np.array([q.items[0] for q in queries], dtype=np.int64)
        rows = np.arange(len(queries))
        return batch_scores(self.run.item_cosines(items), rows, self.num_items)

    def _ranked(self, scores: torch.Tensor, queries: list[Resolved]) -> list:
        """Each row of ``scores`` ranked for its query: excluded items and those outside its
        ``allowed`` at −∞, equal scores lower id first."""
        rows = np.arange(len(queries))
        scores[:, 0] = -torch.inf
        excluded_rows = np.repeat(rows, [q.excluded.size for q in queries])
        excluded = np.concatenate([q.excluded for q in queries])
        scores[torch.from_numpy(excluded_rows), torch.from_numpy(excluded)] = -torch.inf
        for row, query in enumerate(queries):
            if query.allowed is not None:
                keep = torch.full_like(scores[row], -torch.inf)
                allowed = torch.from_numpy(query.allowed)
                keep[allowed] = scores[row, allowed]
                scores[row] = keep
        values, ids = topk_lower_id_first(scores, max(q.k for q in queries))
        check_no_nan(values[:, 0], rows)
        answers = []
        for row, query in enumerate(queries):
            top = zip(ids[row, : query.k].tolist(), values[row, : query.k].tolist(), strict=True)
            answers.append([(i, float(v)) for i, v in top if i > 0])
        return answers

    def model64(self):
        """The float64 copy of the model the lens reads (made once, on first use)."""
        if self.run.baseline:
            raise LensError(
                f"{self.run.config.model.name} is a non-neural baseline; it has no attention"
            )
        with self._model64_lock:
            if self._model64 is None:
                self._model64 = float64_copy(self.run.model)
        return self._model64

    def explain(self, query: Resolved, candidates: list[int]) -> dict:
        """Every head's reading of ``query``'s history (``lens.history.read_history``), its
        tokens scored toward each internal item of ``candidates``."""
        model64 = self.model64()
        with self._model64_lock:  # reading records attention through hooks on this one copy
            return self._explain(model64, query, candidates)

    def _explain(self, model64, query: Resolved, candidates: list[int]) -> dict:
        max_len = model64.config.max_len
        single = Sequences(np.array([0, query.items.size]), query.items, np.array([query.row]))
        window = single.padded(max_len)[0]
        available = {"users": torch.tensor([query.row])}
        if query.times is not None:
            times = Sequences(single.offsets, single.items, single.users, query.times)
            available["timestamps"] = torch.from_numpy(times.padded_times(max_len))
        extras = model64.extra_kwargs(**available)
        return read_history(model64, window, np.array(candidates), extras).to_dict()
