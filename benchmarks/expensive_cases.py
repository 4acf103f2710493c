"""The cases of ``expensive_step.py`` and their measurement, run in one interpreter per tree
(this module uses only the package's interfaces that the measured commits share).

``measure`` returns, per case, the median ms of a trainer step, the steps of an epoch and the
seconds of an epoch (or, for ``bicat-generation``, the seconds of a whole run's generation);
``profile`` prints where one step of each case spends its time, part by part (batch, forward,
main loss, auxiliary terms, backward, optimiser) and by torch operator.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

import numpy as np
import torch

import sessions
from attnsvm.rec.config import RunConfig, apply_overrides
from attnsvm.rec.data.batches import make_batch
from attnsvm.rec.train import distributed
from attnsvm.rec.train.generate import write_generation
from attnsvm.rec.train.loop import TrainingLoop
from attnsvm.rec.train.scoring import build
from epoch_cases import first_batches, split_of, whole_generation_seconds
from staged_common import ROOT, dataset
from staged_cost import stage_configs

STAGES = {
    "sasrec+": "sasrec+",
    "adt": "adt",
    "bicat-pretrain": "bicat pre-train",
    "bicat-finetune": "bicat fine-tune",
    "mrtransformer-pretrain": "mrtransformer pre-train",
    "mrtransformer-finetune": "mrtransformer fine-tune",
}
SESSION_MODELS = {"sasrec+diginetica": "sasrec+", "smm": "smm"}
GENERATION = {"mode": "no_leak", "items": 20, "below": 20}  # the bicat recipe's


def config_of(case: str, work: Path) -> RunConfig:
    if case in SESSION_MODELS:
        options = argparse.Namespace(
            root=ROOT, max_len=20, epochs=1, steps_per_epoch=None, threads=1, valid_prefixes=10_000
        )
        return sessions.run_config(SESSION_MODELS[case], 0, options)
    settings = stage_configs("beauty", dataset("beauty", ROOT, work), work / "plans")[STAGES[case]]
    if isinstance(settings, list):
        return apply_overrides(RunConfig(), settings)
    config = RunConfig.from_dict(settings)
    if case == "bicat-finetune":  # a generation from fresh pre-training weights
        config = apply_overrides(config, [f"data.synthetic_prefix={generation(work)}"])
    return config


def generation(work: Path) -> Path:
    """A generation artefact for BiCAT's fine-tuning, written once per benchmark run."""
    out = work / "generation"
    if not out.is_dir():
        config = config_of("bicat-pretrain", work)
        split = split_of(config.data)
        write_generation(build(config, split.num_items), split, out, **GENERATION)
    return out


def loop_of(case: str, work: Path) -> TrainingLoop:
    # built by hand, not by ``trainer.training_loop``: this module runs against older trees too
    config = config_of(case, work)
    split = split_of(config.data)
    model = build(config, split.num_items, split.num_users)
    return TrainingLoop(config, split, model, distributed.init_from_env())


def generation_seconds(users: int, work: Path) -> float:
    """Seconds of a whole generation from fresh pre-training weights, from ``users`` users
    (0: every user) drawn at random, scaled to every user."""
    return whole_generation_seconds(config_of("bicat-pretrain", work), GENERATION, users)


def measure(cases: list[str], steps: int, users: int, work: str) -> dict:
    """Every case's steps taken in turns (one step of each case, ``steps`` rounds, after two
    warm-up steps each), so that a change of the machine's load reaches every case alike."""
    torch.set_num_threads(1)
    out, loops, times = {}, {}, {}
    for case in cases:
        if case == "bicat-generation":
            out[case] = {"seconds": generation_seconds(users, Path(work))}
        else:
            loops[case] = loop_of(case, Path(work))
    plans = {case: first_batches(loop, steps + 2) for case, loop in loops.items()}
    for number in range(steps + 2):
        for case, loop in loops.items():
            chosen, generator = plans[case]
            start = time.perf_counter()
            loop.train_step(chosen[number], generator)
            if number >= 2:
                times.setdefault(case, []).append(time.perf_counter() - start)
    for case, loop in loops.items():
        per_step = 1000 * statistics.median(times[case])
        count = math.ceil(len(loop.examples) / loop.config.train.batch_size)
        out[case] = {"ms": per_step, "steps": count, "epoch": per_step * count / 1000}
    return out


def profile_step(loop: TrainingLoop, index: np.ndarray, generator) -> dict[str, float]:
    """Seconds of each part of one trainer step, run part by part as ``train_step`` runs it."""
    parts: dict[str, float] = {}
    tick = [time.perf_counter()]

    def lap(name: str) -> None:
        now = time.perf_counter()
        parts[name] = parts.get(name, 0.0) + now - tick[0]
        tick[0] = now

    model = loop.model
    batch = make_batch(loop.train_rows, loop.examples, index, model.objective, model.config.max_len)
    step = loop._prepare(batch, generator)
    if loop.streams.names:
        step.streams = loop.streams.batch(index, loop.step)
    lap("batch")
    model.train()
    loop.optimizer.zero_grad(set_to_none=False)
    for rows, width in step.groups:
        inputs = step.inputs[rows][:, -width:]
        hidden = loop.train_model(inputs)
        lap("forward")
        loss = loop._loss_share(step, hidden, rows, width)
        lap("main loss")
        if loop.aux_weights:
            loss = loss + loop._auxiliary_share(step, inputs, hidden, rows, {})
            lap("auxiliary terms")
        loss.backward()
        lap("backward")
    loop.optimizer.step()
    lap("optimiser")
    return parts


def profile(cases: list[str], work: Path, steps: int = 3, operators: int = 6) -> str:
    """Per case: the share of each part of its step (mean of ``steps`` steps after a warm-up)
    and the torch operators that take the most time (self CPU time, one step)."""
    torch.set_num_threads(1)
    lines = []
    for case in cases:
        if case == "bicat-generation":
            continue
        loop = loop_of(case, work)
        chosen, generator = first_batches(loop, steps + 2)
        loop.train_step(chosen[0], generator)
        totals: dict[str, float] = {}
        for index in chosen[1:-1]:
            for name, seconds in profile_step(loop, index, generator).items():
                totals[name] = totals.get(name, 0.0) + seconds / steps
        whole = sum(totals.values())
        shares = ", ".join(f"{n} {1000 * s:.0f} ms ({s / whole:.0%})" for n, s in totals.items())
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            loop.train_step(chosen[-1], generator)
        events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
        total = sum(e.self_cpu_time_total for e in events)
        top = ", ".join(f"{e.key} {e.self_cpu_time_total / total:.0%}" for e in events[:operators])
        lines += [f"{case}: {1000 * whole:.0f} ms: {shares}", f"  operators: {top}"]
    return "\n".join(lines)
