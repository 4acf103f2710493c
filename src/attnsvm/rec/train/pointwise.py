"""``train_pointwise(config)``: train a pointwise model and judge it by LogLoss, F1 and AUC.

The data, model, batches, optimiser step, losses and auxiliary terms are the trainer's own
(``load_split``, ``build``, ``TrainingLoop.train_step``): nothing here changes how a step is
made. What differs is the judge. Each stage's events are labelled (``eval/pointwise.py``:
``rating ≥ model.config.like_threshold``) and the model scores each (history, candidate) pair
(``score_pairs``: the candidate appended to the last ``max_len − 1`` events of the row's
history, with their ratings). After every epoch the validation LogLoss is measured; the weights
of the best epoch are kept, training stops after ``train.patience`` epochs without a better one
(once ``train.min_steps`` optimiser steps have run), and those weights are scored on the test
events.

A model is pointwise if it has ``score_pairs`` and a ``like_threshold`` (``nstransformer``).
Without a configured ``loss``, the main next-item loss is off (``loss.scale = 0``): the model's
``pointwise`` auxiliary term is the whole objective. ``prior_LogLoss`` is the LogLoss of the
constant prediction at the training events' liked rate, the floor any model must beat.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnsvm._atomic import write_json
from attnsvm.rec.config import ConfigError, RunConfig, save_config, validate
from attnsvm.rec.data.sequences import EvalTask
from attnsvm.rec.eval.pointwise import LabelledEvents, labelled_events, log_loss, pointwise_metrics
from attnsvm.rec.eval.ranking import trim_padding
from attnsvm.rec.models import SequentialRecommender
from attnsvm.rec.nn.losses import LossConfig
from attnsvm.rec.train import distributed
from attnsvm.rec.train.checkpoint import WEIGHTS, save_weights
from attnsvm.rec.train.loop import TrainingLoop
from attnsvm.rec.train.scoring import build, load_split


@dataclass(frozen=True)
class PointwiseResult:
    test: dict[str, Any]
    valid: dict[str, Any]  # at the best epoch
    best_epoch: int
    epochs: int
    train_seconds: float
    protocol: str
    history: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def score_events(
    model: SequentialRecommender,
    task: EvalTask,
    events: LabelledEvents,
    batch_size: int = 512,
) -> np.ndarray:
    """The like-logit of every labelled event, given its row's history (float64)."""
    device = next(model.parameters()).device
    context = model.config.max_len - 1
    history = task.history
    logits = []
    model.eval()
    with torch.no_grad():
        for start in range(0, len(events), batch_size):
            rows = events.rows[start : start + batch_size]
            candidates = events.items[start : start + batch_size, None]
            windows = np.concatenate([history.padded(context, rows), candidates], axis=1)
            ratings = np.concatenate(
                [history.padded_ratings(context, rows), np.zeros_like(candidates, float)], axis=1
            )
            if model.padding_free:
                windows = trim_padding(windows)
            width = windows.shape[1]
            logits.append(
                model.score_pairs(
                    torch.from_numpy(windows).to(device),
                    torch.from_numpy(ratings[:, -width:]).to(device),
                )
                .double()
                .cpu()
                .numpy()
            )
    return np.concatenate(logits) if logits else np.zeros(0)


def is_pointwise(name: str) -> bool:
    """Whether model or preset ``name`` scores (history, candidate) pairs (``score_pairs``), so
    that ``attnsvm train`` hands it to ``train_pointwise`` instead of the ranking trainer."""
    from attnsvm.rec.models.registry import MODELS, PRESETS, lookup

    if lookup(name).kind == "baseline":
        return False
    model = PRESETS[name].model if name in PRESETS else name
    return hasattr(MODELS[model].model_class, "score_pairs")


def _pointwise_model(model: SequentialRecommender, name: str) -> float:
    threshold = getattr(model.config, "like_threshold", None)
    if not hasattr(model, "score_pairs") or threshold is None:
        raise ConfigError(
            f"model {name!r} has no pointwise head (score_pairs, like_threshold): pointwise "
            "evaluation needs one, e.g. nstransformer"
        )
    return float(threshold)


def train_pointwise(
    config: RunConfig, out: str | Path | None = None, *, verbose: bool = False
) -> PointwiseResult:
    """Train ``config``'s pointwise model, keep its best validation epoch, test it; with
    ``out``, write ``out/config.json``, the best weights (``model.safetensors``) and
    ``out/pointwise.json`` (see the module docstring)."""
    from attnsvm.rec.data.datasets import load_dataset

    validate(config)
    if config.loss is None:
        config = replace(config, loss=LossConfig(name="ce", scale=0.0))
    if config.train.num_threads is not None:
        torch.set_num_threads(config.train.num_threads)
    data = config.data
    split = load_split(data)
    model = build(config, split.num_items, split.num_users)
    threshold = _pointwise_model(model, config.model.name)
    full = load_dataset(data.dataset, root=data.root, layout=data.layout()).to_sequences()
    valid_events = labelled_events(full, split.valid, threshold)
    test_events = labelled_events(full, split.test, threshold)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loop = TrainingLoop(config, split, model, distributed.Context(device=device))
    train = config.train
    liked_rate = float(np.mean(split.train.ratings >= threshold))
    prior = math.log(liked_rate / (1.0 - liked_rate))

    def judge(task: EvalTask, events: LabelledEvents) -> dict[str, Any]:
        logits = score_events(loop.model, task, events, config.eval.batch_size)
        metrics = pointwise_metrics(events.labels, logits)
        metrics["prior_LogLoss"] = log_loss(events.labels, np.full(len(events), prior))
        return metrics

    history: list[dict[str, Any]] = []
    best, best_state, best_epoch, bad_epochs = math.inf, None, 0, 0
    for epoch in range(1, train.epochs + 1):
        generator = loop.begin_epoch(epoch)
        order = torch.randperm(len(loop.examples), generator=generator).numpy()
        batches = [order[i : i + train.batch_size] for i in range(0, len(order), train.batch_size)]
        batches = batches[: train.steps_per_epoch]
        start = time.perf_counter()
        losses = [loop.train_step(index, generator) for index in batches]
        seconds = time.perf_counter() - start
        loop.epoch = epoch
        valid = judge(split.valid, valid_events)
        record = {
            "epoch": epoch,
            "train_loss": float(np.mean(losses)),
            "train_seconds": seconds,
            "valid": valid,
        }
        history.append(record)
        if verbose:
            print(
                f"epoch {epoch:>3}  loss {record['train_loss']:.4f}  valid LogLoss "
                f"{valid['LogLoss']:.4f}  AUC {valid['AUC']:.4f}  {seconds:.1f}s",
                flush=True,
            )
        if valid["LogLoss"] < best:
            best, best_epoch, bad_epochs = valid["LogLoss"], epoch, 0
            best_state = copy.deepcopy(loop.model.state_dict())
        else:
            bad_epochs += 1
            if bad_epochs >= train.patience and loop.step >= train.min_steps:
                break
    loop.model.load_state_dict(best_state)
    result = PointwiseResult(
        judge(split.test, test_events),
        history[best_epoch - 1]["valid"],
        best_epoch,
        len(history),
        float(sum(r["train_seconds"] for r in history)),
        f"{split.protocol}; pointwise: rating ≥ {threshold:g} liked, F1 at p ≥ 0.5",
        history,
    )
    if out is not None:  # the config, the best weights, then the results (written last)
        Path(out).mkdir(parents=True, exist_ok=True)
        save_config(config, Path(out) / "config.json")
        save_weights(loop.model, Path(out) / WEIGHTS)
        write_json(Path(out) / "pointwise.json", result.to_json())
    return result
