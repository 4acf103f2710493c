"""From a run's config to its split and model, and from a model to full-ranking metrics.

These are the pieces the trainer, the baselines, finished runs (``runs.py``) and benchmarks all
share, so none of them imports another's internals:

- ``load_interactions(data)``: the configured dataset as a run reads it (a file through its
  column mapping), for training and for every reader of a finished run's users alike.
- ``load_split(data)``: the configured split of the configured dataset (``data.split``:
  leave-one-out, temporal, session or predefined; ``attnsvm.rec.data.splits`` has their rules).
- ``build(config, split)``: the run's model, initialised from ``train.seed``. Its config is the
  one owner of the window length: ``data.max_len`` is applied here, once, and everything after
  reads ``model.config.max_len``.
- ``score_function`` / ``evaluate_model`` / ``evaluate_scores``: a model (or any ``rows →
  scores`` function) ranked against the full catalogue by the shared evaluator; under DDP each
  process ranks a shard and the top-k lists are gathered in user order. A model's scores reach
  the ranker as blocks (``ModelScores``): its length groups, a range of items at a time.
- ``validation_task``: the users a run validates on every epoch (a seeded sample once users ×
  items passes ``eval.valid_max_scores``); ``ranking_progress``: the ranker's progress as a task
  of the trainer's progress bar, in users/s.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator

import numpy as np
import torch
from rich.progress import Progress, TaskID

from attnsvm.rec.config import ConfigError, DataConfig, EvalConfig, RunConfig
from attnsvm.rec.data.interactions import Interactions
from attnsvm.rec.data.sequences import EvalTask
from attnsvm.rec.data.splits import Split, leave_one_out, session_split, temporal_split
from attnsvm.rec.eval.estimates import Estimates, bfloat16_table, estimates_available
from attnsvm.rec.eval.metrics import metrics_from_topk
from attnsvm.rec.eval.ranking import (
    SCORE_WHOLE_ITEMS,
    EvalResult,
    ScoreBlock,
    protocol_label,
    rank_topk,
    trim_padding,
)
from attnsvm.rec.models import MODELS, SequentialRecommender, resolve
from attnsvm.rec.train import distributed


def load_interactions(data: DataConfig) -> Interactions:
    """``data.dataset`` (a name, or a file read through ``data.columns`` where given): the one
    way a run's data is read, so a finished run finds its users as training found them."""
    from attnsvm.rec.data.datasets import load_dataset

    return load_dataset(data.dataset, root=data.root, layout=data.layout())


def load_split(data: DataConfig) -> Split:
    """``data.dataset`` split as ``data.split`` says."""
    if data.split == "predefined":
        from attnsvm.rec.data.sessions import load_predefined_split

        return load_predefined_split(
            data.dataset, data.root, data.valid_fraction, data.unseen_policy
        )
    interactions = load_interactions(data)
    if data.split == "temporal":
        test_cut = 1.0 - data.test_fraction
        return temporal_split(
            interactions, test_cut - data.valid_fraction, test_cut, data.unseen_policy
        )
    if data.split == "session":
        return session_split(
            interactions, data.valid_fraction, data.test_fraction, data.unseen_policy
        )
    return leave_one_out(interactions)


def seed_everything(seed: int) -> None:
    import random

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def build(config: RunConfig, num_items: int, num_users: int = 0) -> SequentialRecommender:
    """The run's model, initialised from ``train.seed``, with ``data.max_len`` as its window;
    a model with a user table (SSE-PT) gets ``num_users`` rows and one built from item features
    (SRT) reads them from the run's dataset, unless the config sets them."""
    overrides = dict(config.model.overrides)
    name = resolve(config.model.name)[0]
    fields = {f.name for f in dataclasses.fields(MODELS[name].config_class)}
    # sizes and sources the data decides, unless the config sets them: a user table's rows
    # (SSE-PT), the catalogue whose item features build the item table (SRT)
    from_data = {
        "num_users": num_users,
        "features_dataset": config.data.dataset,
        "features_root": config.data.root,
    }
    for key, value in from_data.items():
        if key in fields and key not in overrides:
            overrides[key] = value
    if config.data.max_len is not None:
        overrides["max_len"] = config.data.max_len
    name, model_config, _ = resolve(config.model.name, **overrides)
    seed_everything(config.train.seed)
    return MODELS[name].model_class(num_items, model_config)


def check_inputs_available(model: SequentialRecommender, split: Split, dataset: str) -> None:
    """Refuse, before any training, a model that reads timestamps or ratings the data lacks."""
    columns = {"timestamps": split.train.times, "ratings": split.train.ratings}
    for name in model.extra_inputs:
        if name in columns and columns[name] is None:
            example = (
                "ml-100k, ml-latest-small or yoochoose"
                if name == "timestamps"
                else ("ml-100k or ml-latest-small")
            )
            raise ConfigError(
                f"model {type(model).__name__} needs event {name} and dataset {dataset!r} has "
                f"none (use one with {name}, e.g. {example})"
            )


def subtask(task: EvalTask, rows: np.ndarray) -> EvalTask:
    return EvalTask(
        task.users[rows],
        task.history.select(rows),
        task.targets.select(rows),
        task.exclude.select(rows),
    )


def autocast(device: torch.device, enabled: bool):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=enabled)


#: a padding-free model scores a batch in up to this many groups of similar history length,
#: each cut to its own longest row: a batch of 64 ML-1M users padded to its longest (200) is
#: about half padding, and the groups cut most of it
SCORE_LENGTH_GROUPS = 4
#: rows per group below which splitting a batch costs more than the padding it saves
SCORE_GROUP_ROWS = 8
#: items whose logits one matrix product computes where a block is scored in ranges of the
#: catalogue (``ranking.item_ranges``), each written in place into the range's buffer: a block
#: of hidden states times a few thousand items ran faster here than times tens of thousands
SCORE_TILE_ITEMS = 4096


class ModelScores:
    """A model's next-item scores after each row's history in ``task``, as the evaluator ranks
    them.

    Called, ``rows → (len(rows), num_items + 1)`` scores in the order of ``rows``. ``blocks(rows)``
    gives the ranker the same scores without that reordering (``ranking.ScoreBlock``): one block
    per length group, in the group's own row order, and, for a model whose scores are its last
    hidden state times the output table (plus bias), each block scored a range of items at a
    time from its hidden states, by the same operations as ``score_last``.
    """

    def __init__(
        self, model: SequentialRecommender, task: EvalTask, device: torch.device, bf16: bool
    ) -> None:
        self.model, self.task, self.device, self.bf16 = model, task, device, bf16
        self.table_bf16: tuple[torch.Tensor, float] | None = None  # made once, where estimated
        # scored as the base class scores: logits(last_hidden(scoring_input(window)))
        self.by_hidden = (
            type(model).score_last is SequentialRecommender.score_last
            and type(model).logits is SequentialRecommender.logits
        )

    def _groups(self, rows: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """``(positions in rows, windows)`` of each length group, its windows cut to its longest
        row (a padding-free model); one group of every row otherwise."""
        windows = self.task.history.padded(self.model.config.max_len, rows)
        everything = np.arange(rows.size)
        if not self.model.padding_free:
            return [(everything, windows)]
        groups = min(SCORE_LENGTH_GROUPS, rows.size // SCORE_GROUP_ROWS)
        if groups < 2:
            return [(everything, trim_padding(windows))]
        order = np.argsort((windows != 0).sum(axis=1), kind="stable")
        return [(part, trim_padding(windows[part])) for part in np.array_split(order, groups)]

    def _inputs(
        self, rows: np.ndarray, windows: np.ndarray
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        history, width = self.task.history, windows.shape[1]
        columns = {
            "timestamps": (history.times, history.padded_times),
            "ratings": (history.ratings, history.padded_ratings),
        }
        available = {"users": torch.from_numpy(self.task.users[rows])}
        for name in self.model.extra_inputs:  # only what the model reads: padding costs time
            if name in columns and columns[name][0] is not None:
                padded = columns[name][1](self.model.config.max_len, rows)
                available[name] = torch.from_numpy(padded[:, -width:])
        extras = self.model.extra_kwargs(**available)
        device = self.device
        return torch.from_numpy(windows).to(device), {k: v.to(device) for k, v in extras.items()}

    def _score_last(self, rows: np.ndarray, windows: np.ndarray) -> torch.Tensor:
        windows_t, extras = self._inputs(rows, windows)
        with autocast(self.device, self.bf16):
            return self.model.score_last(windows_t, **extras).float()

    def _by_range(self, positions: np.ndarray, rows: np.ndarray, windows: np.ndarray) -> ScoreBlock:
        """The block of ``positions`` (rows ``rows``) scored by ``(start, stop) → scores of
        items start..stop − 1``: ``logits`` of the rows' last hidden states. The whole catalogue
        is scored by ``logits``'s own expression, so its scores are ``score_last``'s to the bit;
        a range of it (a large catalogue) by products of ``SCORE_TILE_ITEMS`` items written into
        one buffer (float32 operands; under bf16 autocast by the expression on the range), and a
        float32 catalogue wider than ``SCORE_WHOLE_ITEMS`` is ranked from bfloat16 estimates
        where the CPU computes them natively (``estimates``: the same top-k)."""
        model = self.model
        windows_t, extras = self._inputs(rows, windows)
        with torch.inference_mode(), autocast(self.device, self.bf16):  # scores for ranking
            model.check_input(windows_t)
            hidden = model.last_hidden(model.scoring_input(windows_t), **extras)
            table, bias = model.output_embedding(), model.output_bias()
        one_dtype = hidden.dtype == table.dtype and (bias is None or bias.dtype == table.dtype)

        @torch.inference_mode()
        def scores(start: int, stop: int) -> torch.Tensor:
            whole = start == 0 and stop == table.shape[0]
            if whole or self.bf16 or not one_dtype:
                with autocast(self.device, self.bf16):
                    logits = hidden @ table[start:stop].T
                    if bias is not None:
                        logits = logits + bias[start:stop]
                    if start == 0:
                        logits[:, 0] = float("-inf")
                    return logits.float()
            logits = hidden.new_empty((hidden.shape[0], stop - start))
            for tile in range(start, stop, SCORE_TILE_ITEMS):
                end = min(tile + SCORE_TILE_ITEMS, stop)
                torch.mm(hidden, table[tile:end].T, out=logits[:, tile - start : end - start])
            if bias is not None:
                logits += bias[start:stop]
            if start == 0:
                logits[:, 0] = float("-inf")
            return logits.float()

        estimated = None
        wide = table.shape[0] > SCORE_WHOLE_ITEMS and estimates_available(self.device)
        if wide and one_dtype and table.dtype == torch.float32 and not self.bf16:
            if self.table_bf16 is None:
                self.table_bf16 = bfloat16_table(table)
            estimated = Estimates.of(hidden, table, self.table_bf16, bias)
        return ScoreBlock(positions, scores, estimated)

    def __call__(self, rows: np.ndarray) -> torch.Tensor:
        groups = self._groups(rows)
        if len(groups) == 1:
            return self._score_last(rows, groups[0][1])
        out = None
        for positions, windows in groups:
            scores = self._score_last(rows[positions], windows)
            if out is None:
                out = scores.new_empty((rows.size, scores.shape[1]))
            out[torch.from_numpy(positions).to(out.device)] = scores
        return out

    def blocks(self, rows: np.ndarray) -> Iterator[ScoreBlock]:
        """The scores of ``rows`` as the ranker reads them: a block per length group, each
        computed when the ranker reaches it."""
        for positions, windows in self._groups(rows):
            if self.by_hidden:
                yield self._by_range(positions, rows[positions], windows)
            else:
                scores = self._score_last(rows[positions], windows)
                yield ScoreBlock(positions, lambda start, stop, s=scores: s[:, start:stop])


def score_function(
    model: SequentialRecommender, task: EvalTask, device: torch.device, bf16: bool = False
) -> ModelScores:
    """``rows → (len(rows), num_items + 1)`` next-item scores after each row's history (with
    the blocks the ranker reads, ``ModelScores``)."""
    return ModelScores(model, task, device, bf16)


def evaluate_model(
    model: SequentialRecommender,
    task: EvalTask,
    num_items: int,
    eval_config: EvalConfig,
    *,
    popularity: np.ndarray | None = None,
    context: distributed.Context | None = None,
    bf16: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> EvalResult:
    """Full-ranking metrics of a neural model (see :func:`evaluate_scores`)."""
    context = context or distributed.Context()
    model.eval()
    return evaluate_scores(
        lambda local: score_function(model, local, context.device, bf16),
        task,
        num_items,
        eval_config,
        popularity=popularity,
        context=context,
        progress=progress,
    )


def evaluate_scores(
    score_for: Callable[[EvalTask], Callable[[np.ndarray], torch.Tensor]],
    task: EvalTask,
    num_items: int,
    eval_config: EvalConfig,
    *,
    popularity: np.ndarray | None = None,
    context: distributed.Context | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> EvalResult:
    """Full-ranking metrics of ``score_for(task)`` (a ``rows → scores`` function for a task);
    under DDP each process ranks a shard and the top-k lists are gathered in user order, so the
    metrics equal a single process's. ``progress(done, total)`` follows this process's users
    (``ranking_progress`` shows it)."""
    context = context or distributed.Context()
    ks = tuple(sorted(eval_config.ks))
    part = distributed.shard(len(task), context)
    local = subtask(task, np.arange(part.start, part.stop, dtype=np.int64))
    topk = rank_topk(
        score_for(local),
        local,
        num_items,
        max(ks),
        batch_size=eval_config.batch_size,
        exclude_seen=eval_config.exclude_seen,
        progress=progress,
    )
    topk = distributed.gather_rows(topk, len(task), context)
    metrics, per_user = metrics_from_topk(
        topk, task.targets, ks, num_items=num_items, item_popularity=popularity
    )
    return EvalResult(metrics, per_user, protocol_label(eval_config.exclude_seen, task), task.users)


def ranking_progress(progress: Progress, description: str) -> Callable[[int, int], None]:
    """A ranker's ``progress(done, total)`` shown as a task of ``progress`` (the trainer's rich
    ``Progress``: fields ``rate``, ``unit`` and ``note``; nothing shows where it is disabled):
    users ranked, users/s, removed once every user is ranked."""
    start = time.perf_counter()
    task: TaskID | None = None

    def update(done: int, total: int) -> None:
        nonlocal task
        if task is None:
            task = progress.add_task(description, total=total, rate=0.0, unit="users", note="")
        rate = done / max(time.perf_counter() - start, 1e-9)
        progress.update(task, completed=done, rate=rate)
        if done >= total:
            progress.remove_task(task)

    return update


def validation_task(
    task: EvalTask, eval_config: EvalConfig, num_items: int, seed: int
) -> tuple[EvalTask, str | None]:
    """The users a run ranks every epoch to validate, and, where the run chose to sample them
    itself, a line saying so.

    ``eval.valid_users`` users where set; else every user while users × items stays within
    ``eval.valid_max_scores``, and past it as many as it allows (at least one). A sample is
    fixed by ``seed``, the same every epoch and in every process.
    """
    count = eval_config.valid_users
    automatic = count is None and eval_config.valid_max_scores is not None
    if automatic and len(task) * num_items > eval_config.valid_max_scores:
        count = max(1, eval_config.valid_max_scores // num_items)
    if count is None or count >= len(task):
        return task, None
    rng = np.random.default_rng(seed)
    sample = subtask(task, np.sort(rng.choice(len(task), size=count, replace=False)))
    if not automatic:
        return sample, None
    return sample, (
        f"validation: a fixed sample of {count:,} of {len(task):,} users every epoch "
        f"({len(task):,} users × {num_items:,} items exceed eval.valid_max_scores = "
        f"{eval_config.valid_max_scores:,}; eval.valid_users sets the sample size); the test "
        "ranks every user"
    )
