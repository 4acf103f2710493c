"""Using a finished run directory: load it, evaluate it again, recommend from it.

Recommendations speak external ids both ways: a user id or a history of item ids as they appear
in the data file in, item ids out. The run's ``id_maps.json`` translates; the data are read
again (``scoring.load_interactions``, as training read them) only to find a user's history.
Loading a run applies the process policy unless the caller chose (``attnsvm.process``). A run
trained on a DataFrame keeps its table in its own folder (``KEPT_DATA``) and reads it from there
wherever the folder is moved or copied.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from attnsvm.errors import InvalidRequest, cut, shown
from attnsvm.process import configure_unless_chosen
from attnsvm.rec.config import RunConfig, load_config, save_config
from attnsvm.rec.data.sequences import EvalTask, Sequences
from attnsvm.rec.data.splits import Split
from attnsvm.rec.eval.ranking import EvalResult, batch_scores
from attnsvm.rec.eval.sampled import sampled_evaluate
from attnsvm.rec.models import MODELS, SequentialRecommender
from attnsvm.rec.models.knn import Baseline
from attnsvm.rec.train.baselines import fit_baseline
from attnsvm.rec.train.checkpoint import (
    WEIGHTS,
    RunDirError,
    check_weights_fit,
    finished_run,
    load_weights,
    read_id_maps,
    read_model_info,
)
from attnsvm.rec.train.scoring import evaluate_scores, load_interactions, load_split, score_function

ScoreFn = Callable[[np.ndarray], torch.Tensor]
#: a run's own copy of its table (``interactions.npz`` in the prepared folder ``data/``, with
#: its meta.json and titles), where ``Recommender.fit`` keeps a DataFrame it trained on
KEPT_DATA = Path("data") / "interactions.npz"


@dataclass(frozen=True)
class LoadedRun:
    run_dir: Path
    config: RunConfig
    model: SequentialRecommender | Baseline  # best weights in eval mode, or a refitted baseline
    item_ids: np.ndarray  # external id of internal item i (index 0 = padding placeholder)
    user_ids: np.ndarray  # external id of internal user u

    @property
    def baseline(self) -> bool:
        return not isinstance(self.model, SequentialRecommender)

    @property
    def num_items(self) -> int:
        return len(self.item_ids) - 1

    def scores(self, task: EvalTask) -> ScoreFn:
        """``rows → (len(rows), num_items + 1)`` next-item scores of the run's model after each
        row's history, exactly as the evaluator ranks them (a baseline scores its own way)."""
        if self.baseline:
            return self.model.score_function(task)
        return score_function(self.model, task, torch.device("cpu"))

    def item_cosines(self, items: np.ndarray) -> ScoreFn:
        """``rows → (len(rows), num_items + 1)`` cosine similarity of internal item
        ``items[row]``'s embedding with every item's, in the table next-item logits are dot
        products with (``output_embedding``)."""
        if self.baseline:
            raise InvalidRequest(
                f"{self.config.model.name} is a non-neural baseline: it has no item embeddings "
                "to compare (use method 'next')"
            )
        with torch.inference_mode():
            table = torch.nn.functional.normalize(self.model.output_embedding().float(), dim=1)
        return lambda rows: table[torch.from_numpy(items[rows])] @ table.T

    def internal_items(self, external: list, role: str = "") -> np.ndarray:
        """Internal ids of external item ids (compared as text); unknown ids are an error naming
        them (and ``role``, the list they came in, where given)."""
        index = self._item_index
        unknown = [item for item in external if str(item) not in index]
        if unknown:
            listed = ", ".join(cut(str(item)) for item in unknown[:5])
            where = f" in {role}" if role else ""
            raise InvalidRequest(
                f"unknown item id(s) {listed}{where} (not in this run's catalogue)"
            )
        return np.array([index[str(item)] for item in external], dtype=np.int64)

    @cached_property  # a frozen dataclass still has a __dict__ to cache in
    def _item_index(self) -> dict[str, int]:
        return {str(item): i for i, item in enumerate(self.item_ids.tolist()) if i > 0}

    def allowed_items(
        self, exclude: list | None = None, restrict: list | None = None
    ) -> np.ndarray | None:
        """The items a ranking may return, as a boolean mask over internal ids: those of
        ``restrict`` (a whitelist; every item when None) less those of ``exclude`` (a
        blacklist); None when neither is given. External ids, checked as ``internal_items``."""
        if not exclude and restrict is None:
            return None
        if restrict is not None and len(restrict) == 0:
            raise InvalidRequest("restrict is empty: give the items to recommend among")
        allowed = np.full(self.num_items + 1, restrict is None)
        if restrict is not None:
            allowed[self.internal_items(list(restrict), "restrict")] = True
        allowed[self.internal_items(list(exclude or ()), "exclude")] = False
        allowed[0] = False  # the padding id
        return allowed


def only_allowed(score: ScoreFn, allowed: np.ndarray | None) -> ScoreFn:
    """``score`` with every item outside ``allowed`` (``LoadedRun.allowed_items``) at −∞, so a
    ranking never returns it; ``score`` itself where there is no filter."""
    if allowed is None:
        return score
    blocked = torch.from_numpy(~allowed)
    return lambda rows: batch_scores(score, rows, blocked.numel() - 1).masked_fill(
        blocked, -torch.inf
    )


def load_model(folder: str | Path) -> SequentialRecommender:
    """The neural model saved in a run folder, finished or still training (``.incomplete``), in
    eval mode: built from ``model.json``, which holds the sizes the data gave it (catalogue,
    users), so it needs no data and no config overrides."""
    folder = Path(folder)
    info = read_model_info(folder)
    spec = MODELS.get(info["model"])
    try:
        if spec is None:
            raise ValueError(f"unknown model {shown(info['model'])}")
        config = spec.config_class.from_dict(info["model_config"])
        with torch.device("meta"):  # shapes only, checked against the weights' before building
            shapes = spec.model_class(info["num_items"], config)
    except (TypeError, ValueError) as error:
        raise RunDirError(f"{folder / 'model.json'}: damaged ({cut(str(error))})") from None
    check_weights_fit(shapes, folder / WEIGHTS)
    model = spec.model_class(info["num_items"], config)
    load_weights(model, folder / WEIGHTS)
    return model.eval()


def keep_data(run_dir: Path, prepared: Path) -> None:
    """Move the prepared table folder ``prepared`` into the finished run ``run_dir`` as its own
    data (``KEPT_DATA``) and point the run's config.json at it."""
    os.replace(prepared, run_dir / KEPT_DATA.parent)
    config = load_config(run_dir / "config.json")
    save_config(_reading_kept_data(config, run_dir / KEPT_DATA), run_dir / "config.json")


def _reading_kept_data(config: RunConfig, kept: Path) -> RunConfig:
    return replace(config, data=replace(config.data, dataset=str(kept.resolve())))


def run_config(path: Path) -> RunConfig:
    """The config of the finished run at ``path``, reading the run's own copy of its data where
    it keeps one (``KEPT_DATA``): the copy beside the config, wherever the run was moved."""
    config = load_config(path / "config.json")
    kept = path / KEPT_DATA
    return _reading_kept_data(config, kept) if kept.is_file() else config


def load_run(run_dir: str | Path) -> LoadedRun:
    """Model (best checkpoint; a baseline refitted on the run's data), config and id maps."""
    configure_unless_chosen()
    path = finished_run(run_dir)
    config = run_config(path)
    if read_model_info(path).get("baseline"):
        model = fit_baseline(config, load_split(config.data))
        maps = read_id_maps(path)
    else:
        model = load_model(path)
        maps = read_id_maps(path, model.num_items)
    return LoadedRun(path, config, model, np.array(maps["items"]), np.array(maps["users"]))


@dataclass(frozen=True)
class RunOnSplit:
    """A finished run and the ``test`` or ``valid`` task of its data, loaded once for any
    number of evaluations."""

    run: LoadedRun
    data: Split
    split: str

    @property
    def task(self) -> EvalTask:
        return getattr(self.data, self.split)

    @cached_property  # full ranking and sampled metrics both use it
    def popularity(self) -> np.ndarray:
        return np.bincount(self.data.train.items, minlength=self.data.num_items + 1)

    def full_ranking(self) -> EvalResult:
        return evaluate_scores(
            self.run.scores,
            self.task,
            self.data.num_items,
            self.run.config.eval,
            popularity=self.popularity,
        )

    def sampled(self, n_negatives: int, sampler: str = "uniform") -> EvalResult:
        """The legacy sampled protocol (see :func:`sampled_evaluate_run`)."""
        run, task = self.run, self.task
        return sampled_evaluate(
            run.scores(task),
            task,
            self.data.num_items,
            n_negatives,
            sampler,
            seed=run.config.train.seed,
            ks=run.config.eval.ks,
            item_popularity=self.popularity,
            batch_size=run.config.eval.batch_size,
        )


def open_run(run_dir: str | Path, split: str = "test") -> RunOnSplit:
    """Load a finished run and its data's ``split``, checking that they still match."""
    if split not in ("test", "valid"):
        raise InvalidRequest(f"split must be 'test' or 'valid', got {shown(split)}")
    run = load_run(run_dir)
    data = load_split(run.config.data)
    if not run.baseline and data.num_items != run.model.num_items:
        raise RunDirError(
            f"{run.run_dir}: the data now has {data.num_items} items, "
            f"the model {run.model.num_items}"
        )
    return RunOnSplit(run, data, split)


def evaluate_run(run_dir: str | Path, split: str = "test") -> EvalResult:
    """Full-ranking metrics of the run's best checkpoint on its data's ``test`` or ``valid``."""
    return open_run(run_dir, split).full_ranking()


def sampled_evaluate_run(
    run_dir: str | Path, n_negatives: int, sampler: str = "uniform", split: str = "test"
) -> EvalResult:
    """The legacy sampled protocol on the run's best checkpoint, for comparing with papers that
    report it: each target ranked among ``n_negatives`` items drawn per user (never one the user
    has seen, never the target), metrics labelled ``(sampled: N sampler)``. Negatives are drawn
    with the run's seed, so a run configured with the same sampling reproduces its numbers."""
    return open_run(run_dir, split).sampled(n_negatives, sampler)


@dataclass(frozen=True)
class UserHistory:
    items: list  # external item ids, oldest first
    times: np.ndarray | None  # their timestamps, if the data has them
    internal_user: int
    ratings: np.ndarray | None = None  # their ratings, if the data has them


def user_history(run: LoadedRun, user: object) -> UserHistory:
    """The user's whole history in the run's data (train, validation and test items)."""
    data = load_interactions(run.config.data)
    rows = {str(u): r for r, u in enumerate(data.user_ids.tolist())}
    if str(user) not in rows:
        raise InvalidRequest(f"unknown user id {cut(str(user))} (not in {run.config.data.dataset})")
    row = rows[str(user)]
    sequences = data.to_sequences()
    span = slice(sequences.offsets[row], sequences.offsets[row + 1])
    times = None if sequences.times is None else sequences.times[span]
    ratings = None if sequences.ratings is None else sequences.ratings[span]
    return UserHistory(data.item_ids[sequences.items[span]].tolist(), times, row, ratings)


def _next_item_scores(run: LoadedRun, internal: np.ndarray, known: UserHistory) -> torch.Tensor:
    """``(num_items + 1,)`` scores of the item after ``internal`` (the user's internal items),
    through the same scoring path as evaluation."""
    user = np.array([known.internal_user])
    offsets = np.array([0, internal.size])
    history = Sequences(offsets, internal, user, known.times, known.ratings)
    nothing = Sequences(np.zeros(2, dtype=np.int64), np.zeros(0, dtype=np.int64), user)
    return run.scores(EvalTask(user, history, nothing, nothing))(np.array([0]))[0]


def recommend(
    run_dir: str | Path, user: object = None, history: list | None = None, k: int = 10
) -> list:
    """Top-k external item ids after ``history`` (or user ``user``'s history), seen excluded.

    A model with a user table (SSE-PT) reads ``user``'s row; for a bare ``history`` it uses its
    "unknown user" vector. A time-aware model (STRec) needs ``user``: a bare history has no times.
    """
    if (user is None) == (history is None):
        raise InvalidRequest("give exactly one of user or history")
    run = load_run(run_dir)
    # a bare history belongs to no row of the user table: -1 selects the unknown-user vector
    known = user_history(run, user) if user is not None else UserHistory(list(history), None, -1)
    if not known.items:
        raise InvalidRequest("the history is empty")
    needed = {"timestamps": ("times", known.times), "ratings": ("ratings", known.ratings)}
    for name, (what, values) in needed.items():
        if not run.baseline and name in run.model.extra_inputs and values is None:
            raise InvalidRequest(
                f"{type(run.model).__name__} needs event {what}: recommend for a --user of the "
                "data, not a bare --history"
            )
    internal = run.internal_items(known.items)
    num_items = len(run.item_ids) - 1
    if not 1 <= k <= num_items - len(set(internal.tolist())):
        raise InvalidRequest(f"k must lie in 1..{num_items - len(set(internal.tolist()))}")
    with torch.inference_mode():
        scores = _next_item_scores(run, internal, known)
        scores[torch.from_numpy(internal)] = -torch.inf
        scores[0] = -torch.inf  # the padding id: a baseline scores it like an item
        # stable: equal scores keep the lower item id first, as in evaluation
        order = torch.sort(scores, descending=True, stable=True).indices[:k]
    return run.item_ids[order.numpy()].tolist()
