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
  process ranks a shard and the top-k lists are gathered in user order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import torch

from attnsvm.rec.config import ConfigError, DataConfig, EvalConfig, RunConfig
from attnsvm.rec.data.interactions import Interactions
from attnsvm.rec.data.sequences import EvalTask
from attnsvm.rec.data.splits import Split, leave_one_out, session_split, temporal_split
from attnsvm.rec.eval.metrics import metrics_from_topk
from attnsvm.rec.eval.ranking import EvalResult, protocol_label, rank_topk, trim_padding
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


def score_function(
    model: SequentialRecommender, task: EvalTask, device: torch.device, bf16: bool = False
) -> Callable[[np.ndarray], torch.Tensor]:
    """``rows → (len(rows), num_items + 1)`` next-item scores after each row's history."""
    max_len = model.config.max_len
    history = task.history
    columns = {
        "timestamps": (history.times, history.padded_times),
        "ratings": (history.ratings, history.padded_ratings),
    }

    def forward(windows: np.ndarray, rows: np.ndarray) -> torch.Tensor:
        width = windows.shape[1]
        available = {"users": torch.from_numpy(task.users[rows])}
        for name in model.extra_inputs:  # only what the model reads: padding costs time
            if name in columns and columns[name][0] is not None:
                available[name] = torch.from_numpy(columns[name][1](max_len, rows)[:, -width:])
        extras = {k: v.to(device) for k, v in model.extra_kwargs(**available).items()}
        with autocast(device, bf16):
            return model.score_last(torch.from_numpy(windows).to(device), **extras).float()

    def score(rows: np.ndarray) -> torch.Tensor:
        windows = history.padded(max_len, rows)
        if not model.padding_free:
            return forward(windows, rows)
        groups = min(SCORE_LENGTH_GROUPS, len(rows) // SCORE_GROUP_ROWS)
        if groups < 2:
            return forward(trim_padding(windows), rows)
        order = np.argsort((windows != 0).sum(axis=1), kind="stable")
        pieces = np.array_split(order, groups)
        scores = [forward(trim_padding(windows[piece]), rows[piece]) for piece in pieces]
        return torch.cat(scores)[torch.from_numpy(np.argsort(order, kind="stable"))]

    return score


def evaluate_model(
    model: SequentialRecommender,
    task: EvalTask,
    num_items: int,
    eval_config: EvalConfig,
    *,
    popularity: np.ndarray | None = None,
    context: distributed.Context | None = None,
    bf16: bool = False,
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
    )


def evaluate_scores(
    score_for: Callable[[EvalTask], Callable[[np.ndarray], torch.Tensor]],
    task: EvalTask,
    num_items: int,
    eval_config: EvalConfig,
    *,
    popularity: np.ndarray | None = None,
    context: distributed.Context | None = None,
) -> EvalResult:
    """Full-ranking metrics of ``score_for(task)`` (a ``rows → scores`` function for a task);
    under DDP each process ranks a shard and the top-k lists are gathered in user order, so the
    metrics equal a single process's."""
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
    )
    topk = distributed.gather_rows(topk, len(task), context)
    metrics, per_user = metrics_from_topk(
        topk, task.targets, ks, num_items=num_items, item_popularity=popularity
    )
    return EvalResult(metrics, per_user, protocol_label(eval_config.exclude_seen, task), task.users)
