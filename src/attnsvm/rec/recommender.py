"""``Recommender``: the object API beside the functional one — fit, recommend, save, load.

A ``Recommender`` is a run directory held in memory: the model (or a refitted baseline), its id
maps and item titles (and categories) are loaded once, the data's user histories on the first
``users=`` query (read as training read them, ``scoring.load_interactions``), so ``recommend``
for a thousand users is one batched ranking, not a thousand loads. It ranks exactly as the
evaluator does (``LoadedRun.scores``; equal scores keep the lower item id), and ``attnsvm
recommend`` and ``attnsvm similar`` are this class from the command line. Like the CLI, ``fit``
and ``load`` set the process's threads unless the caller chose (``attnsvm.process``).

The dataset may be a DataFrame (pandas, polars, a pyarrow Table) with a column mapping:
``fit`` stores it as a prepared table (``datasets.prepare_frame``), trains on it and keeps it
in the run directory (``runs.KEPT_DATA``, with the titles given), so ``load`` needs nothing
else, wherever the run directory is copied.

>>> from attnsvm.rec.recommender import Recommender                    # doctest: +SKIP
>>> model = Recommender.from_config(model="sasrec+", dataset="ml-100k", root="../shared/data",
...                                 epochs=20)                          # doctest: +SKIP
>>> model.fit("runs/sasrec-ml100k")                                     # doctest: +SKIP
>>> model.recommend(users=["1", "2"], k=5)          # a polars table    # doctest: +SKIP
>>> model.recommend(histories=[["50", "172", "181"]], k=5, exclude=["100"])  # doctest: +SKIP
>>> model.similar_items(items=["50"], k=5, method="cosine")             # doctest: +SKIP
>>> Recommender.load("runs/sasrec-ml100k").recommend(users=["1"])      # doctest: +SKIP
>>> shop = Recommender.from_config(model="sasrec+", dataset=df, epochs=20,
...     columns={"user": "customer_id", "item": "sku", "time": "ts"},
...     titles=read_item_titles(products, "item=sku,title=name"))     # doctest: +SKIP
>>> shop.fit("runs/shop").recommend(users=["c1"])                   # doctest: +SKIP
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from attnsvm.errors import InvalidRequest, cut, shown
from attnsvm.rec.config import RunConfig, apply_overrides, validate
from attnsvm.rec.data.errors import NotATable
from attnsvm.rec.data.item_titles import ItemTitles, match_catalogue
from attnsvm.rec.data.sequences import EvalTask, Sequences
from attnsvm.rec.data.titles import run_titles
from attnsvm.rec.eval.ranking import ranked_batches
from attnsvm.rec.train.bulk import full_history_task
from attnsvm.rec.train.runs import LoadedRun, ScoreFn, keep_data, load_run, only_allowed
from attnsvm.rec.train.scoring import load_interactions

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
#: how ``similar_items`` scores items like a given one
SIMILARITY = ("next", "cosine")
#: what each extra model input is called in a message
_EVENT_FIELDS = {"timestamps": "times", "ratings": "ratings"}
#: the name a DataFrame is prepared under, and the config's dataset until ``fit`` stores it
FRAME_NAME = "dataframe"


@dataclass(frozen=True)
class _Frame:
    """A DataFrame given as the dataset, stored by ``fit``."""

    table: object  # a pandas or polars DataFrame, or a pyarrow Table
    columns: str | dict
    titles: ItemTitles | None

    @classmethod
    def given(cls, table: object, columns: object, titles: object) -> _Frame:
        """The frame, checked before any training: its kind, its mapping, the titles' type."""
        from attnsvm.rec.data.frames import column_mapping, table_kind

        try:
            table_kind(table)
        except NotATable as error:
            raise NotATable(
                f"dataset is a name or a file path (text), or a table: {error}"
            ) from None
        if columns is None:
            raise InvalidRequest(
                "a DataFrame dataset needs columns={'user': …, 'item': …} (time and rating "
                "optional), as read_frame takes them"
            )
        column_mapping(columns)
        if titles is not None and not isinstance(titles, ItemTitles):
            raise InvalidRequest(
                "titles is what read_item_titles(file_or_table, columns) returns, not "
                f"{type(titles).__name__}"
            )
        return cls(table, columns, titles)


class Recommender:
    """A trained recommender in memory; ``fit`` trains one, ``load`` reads a finished run."""

    def __init__(self, config: RunConfig) -> None:
        validate(config)
        self.config = config
        self._run: LoadedRun | None = None
        self._frame: _Frame | None = None

    @classmethod
    def from_config(cls, config: RunConfig | str | Path | None = None, **settings: Any):
        """An unfitted recommender from a ``RunConfig``, a config file, or keywords: ``model``
        (a name), the shortcuts ``dataset``, ``root``, ``max_len``, ``epochs``, ``lr``,
        ``batch_size``, ``seed``, and dotted keys as ``--set`` takes them (``"loss.name"``);
        any other keyword is a model field (``hidden_size=128``).

        ``dataset`` is a name, a file, or a DataFrame (pandas, polars, a pyarrow Table);
        ``columns`` maps a DataFrame's or a file's columns to the roles (a dict or
        ``"user=uid,item=sku,time=ts"``, as ``read_frame`` takes it), and ``titles`` (what
        ``read_item_titles`` returns) gives a DataFrame's items titles. Anything else as the
        dataset is one error naming what is accepted."""
        from attnsvm.rec.config import load_config

        if config is None:
            config = RunConfig()
        elif not isinstance(config, RunConfig):
            config = load_config(config)
        frame = None
        if not isinstance(settings.get("dataset", ""), str | Path):
            frame = _Frame.given(
                settings.pop("dataset"), settings.pop("columns", None), settings.pop("titles", None)
            )
            settings["dataset"] = FRAME_NAME
        elif "titles" in settings:
            raise InvalidRequest(
                "titles= goes with a DataFrame dataset: give a prepared name's titles to "
                "prepare_frame or `attnsvm data prepare --titles`, or any run's to "
                "Recommender.load(run_dir, titles=…)"
            )
        elif "columns" in settings:  # a file's mapping: the run config's data.columns
            settings["data.columns"] = _mapping_text(settings.pop("columns"))
        assignments = [] if "model" not in settings else [f"model={settings.pop('model')}"]
        for key, value in settings.items():
            key = _SHORTCUTS.get(key, key if "." in key else f"model.{key}")
            assignments.append(f"{key}={'none' if value is None else value}")
        recommender = cls(apply_overrides(config, assignments) if assignments else config)
        recommender._frame = frame
        return recommender

    @classmethod
    def load(cls, run_dir: str | Path, titles: ItemTitles | None = None) -> Recommender:
        """A finished run, loaded once (weights, id maps; the data's histories when needed);
        ``titles`` (``read_item_titles``) instead of those found beside its data."""
        run = load_run(run_dir)
        recommender = cls(run.config)
        recommender._attach(run, titles)
        return recommender

    def fit(self, run_dir: str | Path | None = None, *, show_progress: bool = False):
        """Train on the config's data into ``run_dir`` (``runs/…`` by default); returns self.
        A DataFrame dataset is stored in the run directory (module docstring)."""
        from attnsvm.rec.train.trainer import train

        if self._frame is not None:
            return self._fit_frame(run_dir, show_progress)
        result = train(self.config, run_dir, show_progress=show_progress)
        self._attach(load_run(result.run_dir))
        return self

    def _fit_frame(self, run_dir: str | Path | None, show_progress: bool):
        """Prepare the DataFrame into a folder beside the run directory, train on it, then move
        it into the finished run (``runs.keep_data``), which reads it from there on."""
        from attnsvm.rec.data.datasets import prepare_frame
        from attnsvm.rec.train.checkpoint import RunDirError, default_run_dir
        from attnsvm.rec.train.trainer import train

        final = Path(run_dir) if run_dir is not None else default_run_dir(self.config)
        if final.exists():  # refused before the frame is read, as train() would after
            raise RunDirError(f"{final}: run directory already exists; choose another folder")
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".data"))
        try:
            frame = self._frame
            table = prepare_frame(
                FRAME_NAME, frame.table, frame.columns, staging, titles=frame.titles
            )
            config = replace(self.config, data=replace(self.config.data, dataset=str(table)))
            result = train(config, final, show_progress=show_progress)
            keep_data(result.run_dir, table.parent)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
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
        exclude: list | None = None,
        restrict: list | None = None,
    ):
        """Top-``k`` items for each of ``users`` (external ids, after their whole history in
        the data) or each of ``histories`` (lists of external item ids, oldest first): a polars
        table ``query``, ``rank``, ``item``, ``score``, ``title`` and ``category`` (where the
        data has them, else null), ``query`` being the user id or the history's index.
        ``exclude`` (never these items) and ``restrict`` (only these) filter every list, as the
        server's fields of those names."""
        run = self._loaded()
        if (users is None) == (histories is None):
            raise InvalidRequest("give exactly one of users or histories")
        if users is not None:
            task, queries = self._user_task(users)
        else:
            self._check_bare_history("recommend for users of the data")
            task, queries = self._history_task(histories)
        score = only_allowed(run.scores(task), run.allowed_items(exclude, restrict))
        return self._ranked(task, queries, score, k, exclude_seen)

    def similar_items(
        self,
        items: list,
        k: int = 10,
        *,
        method: str = "next",
        exclude: list | None = None,
        restrict: list | None = None,
    ):
        """Top-``k`` items like each of ``items`` (external ids), never the item itself: a
        polars table as ``recommend``'s, ``query`` being the item. ``method="next"``: the
        model's next-item scores after a history of that one item (what it recommends to
        someone who just saw it); ``"cosine"``: the cosine of the items' embeddings (the table
        next-item logits are dot products with). ``exclude`` and ``restrict`` as in
        ``recommend``."""
        run = self._loaded()
        if method not in SIMILARITY:
            raise InvalidRequest(
                f"method must be one of {', '.join(SIMILARITY)}, got {shown(method)}"
            )
        if len(items) == 0:
            raise InvalidRequest("items is empty: give the items to find similar ones for")
        items = list(dict.fromkeys(str(item) for item in items))  # one list per distinct id
        task, _ = self._history_task([[item] for item in items])  # the item itself is seen
        if method == "next":
            self._check_bare_history("method 'next' scores a bare history; use method 'cosine'")
            score = run.scores(task)
        else:
            score = run.item_cosines(task.history.items)
        allowed = run.allowed_items(exclude, restrict)
        return self._ranked(task, items, only_allowed(score, allowed), k, True)

    # -- loading once ---------------------------------------------------------------------

    def _attach(self, run: LoadedRun, titles: ItemTitles | None = None) -> None:
        self.config, self._run = run.config, run
        self.__dict__.pop("_everyone", None)  # another run's histories, if fit again
        data = run.config.data
        self._titles = (
            run_titles(data.dataset, data.root)
            if titles is None
            else match_catalogue(titles, run.item_ids)[0]
        )

    @cached_property
    def _everyone(self) -> tuple[EvalTask, dict[str, int]]:
        """Every user of the data after their whole history, and each user id's row."""
        run = self._loaded()
        data = load_interactions(run.config.data)
        rows = {str(u): r for r, u in enumerate(data.user_ids.tolist())}
        return full_history_task(run, data), rows

    def _loaded(self) -> LoadedRun:
        if self._run is None:
            raise RuntimeError("this Recommender is not fitted: call fit() or Recommender.load()")
        return self._run

    # -- queries as tasks, ranked as the evaluator ranks --------------------------------------

    def _ranked(self, task: EvalTask, queries: list, score: ScoreFn, k: int, exclude_seen: bool):
        import polars as pl

        run = self._loaded()
        if not 1 <= k <= run.num_items:
            raise InvalidRequest(f"k must lie in 1..{run.num_items}, got {k}")
        ids = np.zeros((len(task), k), dtype=np.int64)
        values = np.zeros((len(task), k), dtype=np.float32)
        for rows, batch_ids, batch_values in ranked_batches(
            score,
            task,
            run.num_items,
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
                "title": [self._titles.title(item) for item in items],
                "category": [self._titles.category(item) for item in items],
            },
            schema_overrides={"title": pl.String, "category": pl.String},
        )

    def _user_task(self, users: list) -> tuple[EvalTask, list]:
        everyone, row_of = self._everyone
        unknown = [u for u in users if str(u) not in row_of]
        if unknown:
            listed = ", ".join(cut(str(u)) for u in unknown[:5])
            dataset = self._loaded().config.data.dataset
            raise InvalidRequest(f"unknown user id {listed} (not in {dataset})")
        rows = np.array([row_of[str(u)] for u in users], dtype=np.int64)
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
        return EvalTask(users, history, nothing, seen), list(range(len(histories)))

    def _check_bare_history(self, advice: str) -> None:
        """A model that reads event times or ratings cannot score a history that has none."""
        run = self._loaded()
        for name in getattr(run.model, "extra_inputs", ()):
            if name in _EVENT_FIELDS:
                model = type(run.model).__name__
                raise InvalidRequest(f"{model} needs event {_EVENT_FIELDS[name]}: {advice}")


def _mapping_text(columns: object) -> str:
    """A file's column mapping as ``data.columns`` holds it: ``"user=uid,item=sku"``."""
    if isinstance(columns, dict):
        return ",".join(f"{role}={column}" for role, column in columns.items())
    return str(columns)
