"""``train(config, run_dir)``: read the data, build the model, train, early-stop, test, publish.

Per epoch the loop (``loop.py``) trains on the objective's examples and ranks the full catalogue
for the validation users; the weights with the best ``eval.valid_metric`` (NDCG@10 by default)
are kept. Training stops after ``train.epochs`` or ``train.patience`` epochs without improvement
(not before ``train.min_steps`` optimiser steps), the best weights are evaluated on the test
users and the run directory is published (``checkpoint.py`` has the layout).
``train.keep = "last"`` instead trains the full budget and keeps the final weights (a fixed
budget, or data whose validation target is not like the test target, such as the planted demo
data). ``train.init_from`` starts from another run's weights (``warm_start.py``); a non-neural
baseline is fitted instead (``baselines.py``).

Under ``torchrun`` every process draws the whole global batch and keeps its shard
(``distributed.py``); dropout masks then differ from a single process, nothing else.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from attnsvm._atomic import write_json
from attnsvm.errors import shown
from attnsvm.process import ThreadChoice, choose_threads, configure_unless_chosen, use_threads
from attnsvm.rec.config import RunConfig, load_config, validate
from attnsvm.rec.data.splits import Split
from attnsvm.rec.eval.sampled import sampled_evaluate
from attnsvm.rec.models import resolve
from attnsvm.rec.models.registry import lookup
from attnsvm.rec.train import distributed
from attnsvm.rec.train.baselines import train_baseline
from attnsvm.rec.train.callbacks import EpochState
from attnsvm.rec.train.checkpoint import (
    RESUME,
    WEIGHTS,
    RunDirectory,
    RunDirError,
    RunResult,
    default_run_dir,
    load_resume_state,
    load_weights,
    published_result,
    save_resume_state,
    save_weights,
)
from attnsvm.rec.train.loop import TrainingError, TrainingLoop
from attnsvm.rec.train.preflight import check_run_fits
from attnsvm.rec.train.run_lock import holding_run_locks
from attnsvm.rec.train.scoring import (
    build,
    evaluate_model,
    load_split,
    ranking_progress,
    score_function,
)
from attnsvm.rec.train.warm_start import init_from

__all__ = ["RunResult", "TrainingError", "default_run_dir", "train", "training_loop"]


def train(
    config: RunConfig,
    run_dir: str | Path | None = None,
    callbacks: Sequence[Any] = (),
    *,
    resume: bool = False,
    show_progress: bool = True,
) -> RunResult:
    """Train, early-stop, test and publish ``run_dir``; ``resume=True`` continues it.

    A non-neural baseline (``pop``, ``sknn``, ``vsknn``, ``vstan``) is fitted instead
    (:mod:`attnsvm.rec.train.baselines`). The process's threads and allocator are set as the
    CLI sets them unless the caller chose (``attnsvm.process.configure_unless_chosen``)."""
    configure_unless_chosen()
    with holding_run_locks():  # a run that fails in-process leaves its folder unlocked
        if not resume and lookup(config.model.name).baseline:
            return train_baseline(config, run_dir)
        context = distributed.init_from_env()
        try:
            return _train(config, run_dir, callbacks, resume, show_progress, context)
        finally:
            distributed.shutdown(context)


def training_loop(
    config: RunConfig, split: Split | None = None, context: distributed.Context | None = None
) -> TrainingLoop:
    """A fresh loop of ``config`` before its first epoch, to step a model by hand (a notebook,
    a benchmark): ``begin_epoch(n)``, then ``train_step(index, generator)`` per batch of
    ``loop.examples``, or ``run_epoch(progress)``. The split is ``config.data``'s unless given
    (one split serves many configs of a dataset); the model is built from ``train.seed`` with
    the split's items and users; ``context`` defaults to the one ``train()`` takes (a GPU when
    there is one, the torchrun group under torchrun). The config is checked as ``train()``
    checks it; what ``train()`` adds is the run directory, ``train.init_from``, early stopping
    and the test."""
    validate(config)
    split = load_split(config.data) if split is None else split
    context = distributed.init_from_env() if context is None else context
    check_run_fits(config, split, context.device)
    model = build(config, split.num_items, split.num_users)
    return TrainingLoop(config, split, model, context)


def _interrupted(run_dir, context) -> RunDirectory:
    """The interrupted run at ``run_dir``, locked by the main process."""
    if run_dir is None:
        raise ValueError("resume needs the run directory")
    return RunDirectory.for_resume(run_dir, lock=context.is_main)


def _restore(loop: TrainingLoop, path: Path) -> None:
    state = load_resume_state(path, (*TrainingLoop.COUNTERS, "model", "optimizer", "scheduler"))
    try:
        loop.restore(state)
    except (KeyError, TypeError, ValueError, RuntimeError) as error:  # a state of another run
        raise RunDirError(
            f"{path}: does not fit this run ({shown(str(error))}); delete it and --resume "
            "again to train the run from its first epoch"
        ) from None


def _thread_choice(config: RunConfig, history: list[dict[str, Any]]) -> ThreadChoice:
    """The run's thread count (``attnsvm.process``): ``train.num_threads``, else the count an
    interrupted run trained with (the count changes float reduction order), else the process's
    (the CLI's or the library's choice, or whatever the caller of ``train()`` set)."""
    if config.train.num_threads is not None:
        return use_threads(choose_threads(config.train.num_threads))
    if history and "threads" in history[-1]:
        cores = len(os.sched_getaffinity(0))
        return use_threads(ThreadChoice(history[-1]["threads"], cores, None, "the resumed run"))
    return configure_unless_chosen()


def _start(
    config: RunConfig, run: RunDirectory | None, run_dir, context
) -> tuple[TrainingLoop, RunDirectory]:
    """The loop, restored from the interrupted ``run``'s ``resume.pt`` or fresh (then the run
    directory's header is written and ``train.init_from`` applied)."""
    if run is None:
        validate(config)
    split = load_split(config.data)
    check_run_fits(config, split, context.device)
    model = build(config, split.num_items, split.num_users)
    if run is not None and run.resumable:
        loop = TrainingLoop(config, split, model, context)
        _restore(loop, run.work / RESUME)
        return loop, run
    # a new run, or one interrupted before its first epoch ended: the seed makes them the same
    warm = None
    if config.train.init_from is not None:
        warm = init_from(model, config.train.init_from, split.item_ids, config.train.init_strict)
    loop = TrainingLoop(config, split, model, context)
    if run is None:
        if run_dir is None:
            run_dir = distributed.broadcast_object(default_run_dir(config), context)
        run = RunDirectory.create(run_dir) if context.is_main else RunDirectory(run_dir)
    if context.is_main:
        resolved = replace(config, loss=loop.loss)
        model_info = {
            "model": resolve(config.model.name)[0],
            "model_config": model.config.to_dict(),
        }
        run.write_header(resolved, model_info, split)
        if warm is not None:
            write_json(run.work / "init_from.json", warm.to_json())
            Console(stderr=True, markup=False).print(warm.summary(), highlight=False)
    distributed.barrier(context)
    distributed.broadcast_parameters(model, context)
    return loop, run


def _train(config, run_dir, callbacks, resume, show_progress, context) -> RunResult:
    run = None
    if resume:
        run = _interrupted(run_dir, context)
        if run.complete:  # interrupted after its results, before its rename: only that is left
            if context.is_main:
                run.finish()
            distributed.barrier(context)
            return published_result(run.final)
        config = load_config(run.work / "config.json")
        if lookup(config.model.name).baseline:
            return train_baseline(config, run=run)
    loop, run = _start(config, run, run_dir, context)
    config, model, split = loop.config, loop.model, loop.split
    threads = _thread_choice(config, loop.history)
    if show_progress and context.is_main:
        console = Console(stderr=True, markup=False)
        console.print(f"threads: {threads.describe()}", highlight=False)
        if loop.valid_note is not None:
            console.print(loop.valid_note, highlight=False)
    for callback in callbacks:
        if context.is_main and hasattr(callback, "on_train_begin"):
            callback.on_train_begin(model, run.work)
    writer = _tensorboard(run.work / "tensorboard") if context.is_main else None
    metric, keep_last = config.eval.valid_metric, config.train.keep == "last"
    stopped_early = False
    with _progress(show_progress and context.is_main) as progress:
        while loop.epoch < config.train.epochs:
            record = loop.run_epoch(progress)
            score = record["valid"][metric]
            if score > loop.best or keep_last:
                loop.best, loop.best_epoch, loop.bad_epochs = score, loop.epoch, 0
                if context.is_main:
                    save_weights(model, run.work / WEIGHTS)
            else:
                loop.bad_epochs += 1
            loop.history.append(record)
            if context.is_main:
                save_resume_state(run.work / RESUME, loop.state())
                run.write_log(loop.history)
                if writer is not None:
                    _log_tensorboard(writer, record)
                improved = not keep_last and loop.best_epoch == loop.epoch
                progress.console.print(_summary(record, metric, improved))
                state = EpochState(
                    loop.epoch, loop.step, model, record["train_loss"], record["valid"], run.work
                )
                for callback in callbacks:
                    callback.on_epoch_end(state)
            distributed.barrier(context)
            patient = loop.bad_epochs < config.train.patience or loop.step < config.train.min_steps
            if not keep_last and not patient:
                stopped_early = True
                break
    if writer is not None:
        writer.close()
    load_weights(model, run.work / WEIGHTS)
    with _progress(show_progress and context.is_main) as progress:
        test = evaluate_model(
            model,
            split.test,
            split.num_items,
            config.eval,
            popularity=loop.popularity,
            context=context,
            bf16=config.train.bf16,
            progress=ranking_progress(progress, "test"),
        )
    best_record = next(r for r in loop.history if r["epoch"] == loop.best_epoch)
    train_seconds = float(sum(r["train_seconds"] for r in loop.history))
    if context.is_main:
        metrics: dict[str, Any] = {
            "protocol": f"{split.protocol}, {test.protocol}",
            "test": test.metrics,
            "valid": best_record["valid"],
            "best_epoch": loop.best_epoch,
            "epochs": loop.epoch,
            "stopped_early": stopped_early,
            "train_seconds": train_seconds,
            # a resumed run may have trained on more than one machine
            "devices": sorted({r["device"] for r in loop.history if "device" in r}),
            "steps": loop.step,
            "threads": threads.to_json(),
        }
        if config.eval.sampled_negatives is not None:
            sampled = sampled_evaluate(
                score_function(model, split.test, context.device),
                split.test,
                split.num_items,
                config.eval.sampled_negatives,
                config.eval.sampled_sampler,
                seed=config.train.seed,
                ks=config.eval.ks,
                item_popularity=loop.popularity,
                batch_size=config.eval.batch_size,
            )
            metrics["test_sampled"] = sampled.metrics
        run.publish(metrics, test)
    distributed.barrier(context)
    return RunResult(
        run.final,
        test.metrics,
        best_record["valid"],
        loop.best_epoch,
        loop.epoch,
        stopped_early,
        train_seconds,
    )


def _progress(enabled: bool) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]:>8.0f} {task.fields[unit]}/s"),
        TextColumn("{task.fields[note]}"),
        TimeRemainingColumn(),
        disable=not enabled,
        console=Console(stderr=True),
    )


def _tensorboard(folder: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(str(folder))


def _log_tensorboard(writer, record: dict[str, Any]) -> None:
    writer.add_scalar("train/loss", record["train_loss"], record["epoch"])
    writer.add_scalar("train/samples_per_second", record["samples_per_second"], record["epoch"])
    for name, value in record["valid"].items():
        writer.add_scalar(f"valid/{name}", value, record["epoch"])
    for name, value in record.get("aux", {}).items():
        writer.add_scalar(f"aux/{name}", value, record["epoch"])


def _summary(record: dict[str, Any], metric: str, improved: bool) -> str:
    """One epoch's line; ``*`` marks a new best validation score (the checkpoint kept so far)."""
    mark = " *" if improved else ""
    return (
        f"epoch {record['epoch']:>3}  loss {record['train_loss']:.4f}  "
        f"valid {metric} {record['valid'][metric]:.4f}{mark}  "
        f"{record['samples_per_second']:.0f} samples/s  "
        f"{record['train_seconds']:.1f}s + eval {record['valid_seconds']:.1f}s"
    )
