"""``train_crr(stage1_run, run_dir)``: CRR stage 2 as its own trainer beside the supervised loop.

Stage 1 is any finished causal run (SASRec+ on ML-100K by default in the benchmark). Stage 2
reads its ``config.json`` and data, builds the same model and loads its weights through
``train.init_from`` (strict: same parameters, same catalogue), then trains the actor and twin
critics of ``crr.py`` on transitions from each user's last ``max_len`` training events, with
ratings as rewards (data without ratings is refused). Every epoch shuffles the users (seeded
from ``(seed, epoch)``), logs every loss term and the advantage-weight statistics, and ranks
the validation users with the shared evaluator; the epoch with the best validation score
(``crr.select``) is kept, with the run's ``train.patience``. Epoch 0 in ``log.jsonl`` is the
stage-1 model itself, for reference; it is never kept.

The run directory is a run like any other (``checkpoint.RunDirectory``): ``config.json`` (the
stage-1 config with this stage's ``train`` section, ``init_from`` naming stage 1),
``model.json`` and ``model.safetensors`` (the actor), ``init_from.json``, ``log.jsonl``,
``test_eval.json`` and ``metrics.json``, plus ``crr.json`` (the CRR settings) — so ``attnsvm
evaluate``, ``recommend`` and ``compare`` work on it. ``metrics.json`` adds ``test_liked``: the
metrics over the test users whose held-out item they rated ≥ ``crr.like_threshold``. There is
no ``--resume``: an interrupted ``RUN.incomplete`` is deleted and the run started again.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnsvm._atomic import write_json
from attnsvm.rec.config import ConfigError, RunConfig, load_config, validate
from attnsvm.rec.data.batches import make_batch, make_examples
from attnsvm.rec.models import resolve
from attnsvm.rec.models.registry import lookup
from attnsvm.rec.rl.crr import CRRConfig, Networks, crr_losses, polyak, target_copy
from attnsvm.rec.rl.rated import STAGES, rated_metrics, target_ratings
from attnsvm.rec.train import distributed
from attnsvm.rec.train.checkpoint import (
    WEIGHTS,
    RunDirectory,
    finished_run,
    load_weights,
    save_weights,
)
from attnsvm.rec.train.loop import TrainingError, epoch_seed
from attnsvm.rec.train.optim import adamw
from attnsvm.rec.train.scoring import build, check_inputs_available, evaluate_model, load_split
from attnsvm.rec.train.warm_start import init_from

#: stage 2's own schedule over the stage-1 run's train section [our reading: a small actor lr
#: keeps the policy near stage 1 while the critics learn]
CRR_TRAIN = {"epochs": 30, "lr": 1e-4, "batch_size": 64, "patience": 5, "warmup_steps": 0}


def crr_run_config(stage1: str | Path, overrides: dict[str, Any] | None = None) -> RunConfig:
    """The stage-1 run's config with stage 2's train section and ``init_from`` = stage 1."""
    path = finished_run(stage1)
    config = load_config(path / "config.json")
    if lookup(config.model.name).baseline:
        raise ConfigError(
            f"{path}: a {config.model.name!r} baseline run has no network to start from; CRR "
            "stage 2 needs a causal model's run (sasrec+, …)"
        )
    train = dataclasses.replace(
        config.train, **{**CRR_TRAIN, **(overrides or {}), "init_from": str(path.resolve())}
    )
    config = dataclasses.replace(config, train=train)
    validate(config)
    return config


def train_crr(config: RunConfig, crr: CRRConfig, run_dir: str | Path, *, log=print) -> dict:
    """Train stage 2 from ``config.train.init_from`` and publish ``run_dir``; returns the
    published ``metrics.json``."""
    if config.train.init_from is None:
        raise ConfigError("CRR starts from a stage-1 run: set train.init_from")
    name = resolve(config.model.name)[0]
    split = load_split(config.data)
    if split.train.ratings is None:
        raise ConfigError(
            f"CRR needs ratings as rewards and dataset {config.data.dataset!r} has none "
            "(use ml-100k or ml-latest-small)"
        )
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    actor = build(config, split.num_items, split.num_users)
    if actor.objective != "causal":
        raise ConfigError(f"CRR's transitions need a causal model; {name!r} is {actor.objective}")
    check_inputs_available(actor, split, config.data.dataset)
    warm = init_from(actor, config.train.init_from, split.item_ids, strict=True)
    # checked before the run directory exists: a threshold no target reaches averages nothing
    targets = {stage: target_ratings(config.data, getattr(split, stage), stage) for stage in STAGES}
    for stage, rated in targets.items():
        if not (rated >= crr.like_threshold).any():
            raise ConfigError(
                f"crr.like_threshold = {crr.like_threshold}: no {stage} user rated their target "
                f"that high (the ratings lie in {rated.min():g}..{rated.max():g})"
            )
    torch.manual_seed(epoch_seed(config.train.seed, 0, 3))  # the critics' heads
    networks = Networks(actor, crr).to(device)
    run = RunDirectory.create(run_dir)
    try:
        model_info = {"model": name, "model_config": actor.config.to_dict()}
        run.write_header(config, model_info, split)
        write_json(run.work / "init_from.json", warm.to_json())
        write_json(run.work / "crr.json", crr.to_dict())
        return _Stage2(config, crr, split, networks, device, run, targets, log).train()
    finally:
        run.release()


class _Stage2:
    def __init__(self, config, crr, split, networks, device, run, targets, log) -> None:
        self.config, self.crr, self.split, self.run, self.log = config, crr, split, run, log
        self.networks, self.device = networks, device
        self.target = target_copy(networks)
        train = config.train
        self.actor_optimizer = adamw(networks.actor.parameters(), train)
        critic_train = dataclasses.replace(train, lr=crr.critic_lr)
        self.critic_optimizer = adamw(networks.critic_parameters(), critic_train)
        self.examples = make_examples(split.train, "cloze")  # windows ending at the last event
        ratings = split.train.ratings
        self.scale = (float(ratings.min()), float(ratings.max()))
        self.targets = targets  # each evaluation stage's users' ratings of their targets
        self.step = 0

    def train(self) -> dict:
        config, networks = self.config, self.networks
        history = [self._record(0, {}, 0.0)]  # stage 1, for reference
        best, best_epoch, bad = -np.inf, 0, 0
        self.log(f"stage 1: {self._summary(history[0])}")
        for epoch in range(1, config.train.epochs + 1):
            start = time.perf_counter()
            stats = self._epoch(epoch)
            record = self._record(epoch, stats, time.perf_counter() - start)
            history.append(record)
            score = record["valid_score"]
            if score > best:
                best, best_epoch, bad = score, epoch, 0
                save_weights(networks.actor, self.run.work / WEIGHTS)
            else:
                bad += 1
            self.run.write_log(history)
            self.log(
                f"epoch {epoch:>3}  {self._summary(record)}{' *' if best_epoch == epoch else ''}"
            )
            if bad >= config.train.patience:
                break
        return self._publish(history, best_epoch)

    def _epoch(self, epoch: int) -> dict[str, float]:
        train, networks = self.config.train, self.networks
        generator = torch.Generator().manual_seed(epoch_seed(train.seed, epoch, 0))
        torch.manual_seed(epoch_seed(train.seed, epoch, 1))
        order = torch.randperm(len(self.examples), generator=generator).numpy()
        networks.train()
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}  # the actor's terms exist on actor steps only
        batches = [order[i : i + train.batch_size] for i in range(0, len(order), train.batch_size)]
        max_len = networks.actor.config.max_len
        for index in batches:
            batch = make_batch(self.split.train, self.examples, index, "cloze", max_len)
            actor_step = self.step % self.crr.actor_every == 0
            critic_loss, actor_loss, stats = crr_losses(
                networks,
                self.target,
                batch.inputs.to(self.device),
                batch.ratings.to(self.device),
                self.crr,
                self.scale,
                actor_step,
            )
            loss = critic_loss if actor_loss is None else critic_loss + actor_loss
            if not torch.isfinite(loss):
                raise TrainingError(f"CRR's loss became {loss.item()} at epoch {epoch}")
            self.actor_optimizer.zero_grad(set_to_none=True)
            self.critic_optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if train.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(networks.actor.parameters(), train.grad_clip)
                torch.nn.utils.clip_grad_norm_(networks.critic_parameters(), train.grad_clip)
            self.critic_optimizer.step()
            self.actor_optimizer.step()
            polyak(self.target, networks, self.crr.tau)
            self.step += 1
            for key, value in stats.items():
                sums[key] = sums.get(key, 0.0) + value
                counts[key] = counts.get(key, 0) + 1
        return {key: value / counts[key] for key, value in sums.items()}

    def _evaluate(self, task, ratings):
        context = distributed.Context(device=self.device)
        result = evaluate_model(
            self.networks.actor, task, self.split.num_items, self.config.eval, context=context
        )
        return result, rated_metrics(result, ratings, self.crr.like_threshold)

    def _record(self, epoch: int, stats: dict[str, float], seconds: float) -> dict[str, Any]:
        valid, liked = self._evaluate(self.split.valid, self.targets["valid"])
        score = (
            liked["HR@10"]
            if self.crr.select == "liked"
            else valid.metrics[self.config.eval.valid_metric]
        )
        return {
            "epoch": epoch,
            "step": self.step,
            "train_seconds": seconds,
            "device": distributed.describe(distributed.Context(device=self.device)),
            "crr": stats,
            "valid": valid.metrics,
            "valid_liked": liked,
            "valid_score": score,
        }

    def _summary(self, record: dict[str, Any]) -> str:
        metric = self.config.eval.valid_metric
        terms = record["crr"]
        losses = "  ".join(
            f"{k} {terms[k]:.4f}"
            for k in ("q1_loss", "actor_loss", "advantage_positive")
            if k in terms
        )
        return (
            f"{losses}  valid {metric} {record['valid'][metric]:.4f}  liked HR@10 "
            f"{record['valid_liked']['HR@10']:.4f}"
        )

    def _publish(self, history: list[dict[str, Any]], best_epoch: int) -> dict:
        load_weights(self.networks.actor, self.run.work / WEIGHTS)
        test, liked = self._evaluate(self.split.test, self.targets["test"])
        metrics = {
            "protocol": f"{self.split.protocol}, {test.protocol}",
            "test": test.metrics,
            "test_liked": liked,
            "valid": history[best_epoch]["valid"],
            "best_epoch": best_epoch,
            "epochs": len(history) - 1,
            "stopped_early": len(history) - 1 < self.config.train.epochs,
            "train_seconds": float(sum(r["train_seconds"] for r in history)),
            "devices": [history[-1]["device"]],
            "steps": self.step,
        }
        self.run.publish(metrics, test)
        return metrics
