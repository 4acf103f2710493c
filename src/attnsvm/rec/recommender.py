"""``Recommender``: the object API beside the functional one — fit, recommend, save, load.

A ``Recommender`` is a run directory held in memory: the model (or a refitted baseline), its id
maps, the data's user histories and item titles are loaded once, so ``recommend`` for a
thousand users is one batched ranking, not a thousand loads. It ranks exactly as ``attnsvm
recommend`` and the evaluator do (``LoadedRun.scores``; equal scores keep the lower item id).

>>> from attnsvm.rec.recommender import Recommender                    # doctest: +SKIP
>>> model = Recommender.from_config(model="sasrec+", dataset="ml-100k", root="../shared/data",
...                                 epochs=20)                          # doctest: +SKIP
>>> model.fit("runs/sasrec-ml100k")                                     # doctest: +SKIP
>>> model.recommend(users=["1", "2"], k=5)          # a polars table    # doctest: +SKIP
>>> model.recommend(histories=[["50", "172", "181"]], k=5)              # doctest: +SKIP
>>> Recommender.load("runs/sasrec-ml100k").recommend(users=["1"])      # doctest: +SKIP
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from attnsvm.errors import InvalidRequest
from attnsvm.rec.config import RunConfig, apply_overrides, validate
from attnsvm.rec.data.sequences import EvalTask, Sequences
from attnsvm.rec.eval.ranking import ranked_batches
from attnsvm.rec.train.bulk import full_history_task
from attnsvm.rec.train.runs import LoadedRun, load_run

#: ``from_config`` keywords that are run-config keys, by section (any other goes to the model)
_SHORTCUTS = {
    "dataset": "data.dataset",
    "root": "data.root",
    "max_len": "data.max_len",
    "epochs": "train.epochs",
    "lr": "train.lr",
    "batch_size": "train.batch_size",
    "seed": "train.seed",
}


class Recommender:
    """A trained recommender in memory; ``fit`` trains one, ``load`` reads a finished run."""

    def __init__(self, config: RunConfig) -> None:
        validate(config)
        self.config = config
        self._run: LoadedRun | None = None

    @classmethod
    def from_config(cls, config: RunConfig | str | Path | None = None, **settings: Any):
        """An unfitted recommender from a ``RunConfig``, a config file, or keywords: ``model``
        (a name), the shortcuts ``dataset``, ``root``, ``max_len``, ``epochs``, ``lr``,
        ``batch_size``, ``seed``, and dotted keys as ``--set`` takes them (``"loss.name"``);
        any other keyword is a model field (``hidden_size=128``)."""
        from attnsvm.rec.config import load_config

        if config is None:
            config = RunConfig()
        elif not isinstance(config, RunConfig):
            config = load_config(config)
        assignments = [] if "model" not in settings else [f"model={settings.pop('model')}"]
        for key, value in settings.items():
            key = _SHORTCUTS.get(key, key if "." in key else f"model.{key}")
            assignments.append(f"{key}={'none' if value is None else value}")
        return cls(apply_overrides(config, assignments) if assignments else config)

    @classmethod
    def load(cls, run_dir: str | Path) -> Recommender:
        """A finished run, loaded once (weights, id maps, the data's histories)."""
        run = load_run(run_dir)
        recommender = cls(run.config)
        recommender._attach(run)
        return recommender

    def fit(self, run_dir: str | Path | None = None, *, show_progress: bool = False):
        """Train on the config's data into ``run_dir`` (``runs/…`` by default); returns self."""
        from attnsvm.rec.train.trainer import train

        result = train(self.config, run_dir, show_progress=show_progress)
        self._attach(load_run(result.run_dir))
        return self

    def save(self, run_dir: str | Path) -> Path:
        """Copy the run directory to ``run_dir`` (which must not exist); ``load`` reads it."""
        source = self._loaded().run_dir
        target = Path(run_dir)
        if target.exists():
            raise FileExistsError(f"{target}: already exists; choose another folder")
        shutil.copytree(source, target)
        return target

    @property
    def run_dir(self) -> Path:
        return self._loaded().run_dir

    def recommend(
        self,
        users: list | None = None,
        histories: list[list] | None = None,
        k: int = 10,
        *,
        exclude_seen: bool = True,
    ):
        """Top-``k`` items for each of ``users`` (external ids, after their whole history in
        the data) or each of ``histories`` (lists of external item ids, oldest first): a polars
        table ``query``, ``rank``, ``item``, ``score``, ``title`` (where the data has titles),
        ``query`` being the user id or the history's index."""
        import polars as pl

        run = self._loaded()
        if (users is None) == (histories is None):
            raise InvalidRequest("give exactly one of users or histories")
        task, queries = (
            self._user_task(users) if users is not None else self._history_task(histories)
        )
        num_items = len(run.item_ids) - 1
        if not 1 <= k <= num_items:
            raise InvalidRequest(f"k must lie in 1..{num_items}, got {k}")
        ids = np.zeros((len(task), k), dtype=np.int64)
        values = np.zeros((len(task), k), dtype=np.float32)
        for rows, batch_ids, batch_values in ranked_batches(
            run.scores(task),
            task,
            num_items,
            k,
            batch_size=run.config.eval.batch_size,
            exclude_seen=exclude_seen,
        ):
            ids[rows] = batch_ids.numpy()
            values[rows] = batch_values.float().numpy()
        keep = ids.ravel() > 0  # fewer than k rankable items: a shorter list
        items = run.item_ids[ids.ravel()[keep]]
        return pl.DataFrame(
            {
                "query": np.repeat(np.asarray(queries, dtype=object), k)[keep].astype(str),
                "rank": np.tile(np.arange(1, k + 1, dtype=np.int32), len(task))[keep],
                "item": items.astype(str),
                "score": values.ravel()[keep],
                "title": [self._titles.get(str(item)) for item in items],
            }
        )

    # -- loading once ---------------------------------------------------------------------

    def _attach(self, run: LoadedRun) -> None:
        from attnsvm.rec.data.datasets import load_dataset
        from attnsvm.rec.data.titles import find_titles, read_titles

        data = run.config.data
        self.config, self._run = run.config, run
        self._everyone = full_history_task(run, load_dataset(data.dataset, root=data.root))
        self._row = {str(u): r for r, u in enumerate(run.user_ids.tolist())}
        titles = find_titles(data.dataset, data.root)
        self._titles = read_titles(titles) if titles is not None else {}

    def _loaded(self) -> LoadedRun:
        if self._run is None:
            raise RuntimeError("this Recommender is not fitted: call fit() or Recommender.load()")
        return self._run

    def _user_task(self, users: list) -> tuple[EvalTask, list]:
        unknown = [u for u in users if str(u) not in self._row]
        if unknown:
            raise InvalidRequest(f"unknown user id(s) {', '.join(map(str, unknown[:5]))}")
        rows = np.array([self._row[str(u)] for u in users], dtype=np.int64)
        everyone = self._everyone
        task = EvalTask(
            everyone.users[rows],
            everyone.history.select(rows),
            everyone.targets.select(rows),
            everyone.exclude.select(rows),
        )
        return task, list(users)

    def _history_task(self, histories: list[list]) -> tuple[EvalTask, list]:
        run = self._loaded()
        if any(len(h) == 0 for h in histories):
            raise InvalidRequest("a history is empty")
        internal = [run.internal_items(list(h)) for h in histories]
        users = np.full(len(internal), -1, dtype=np.int64)  # no user: the unknown-user vector
        history = Sequences.from_lists([h.tolist() for h in internal], users=users.tolist())
        seen = Sequences.from_lists([np.unique(h).tolist() for h in internal], users.tolist())
        nothing = Sequences.from_lists([[] for _ in internal], users.tolist())
        if "timestamps" in getattr(run.model, "extra_inputs", ()):
            raise InvalidRequest(
                f"{type(run.model).__name__} needs event times: recommend for users of the data"
            )
        return EvalTask(users, history, nothing, seen), list(range(len(histories)))
