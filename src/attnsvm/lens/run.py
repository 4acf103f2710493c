"""The lens on a finished run: every number the report shows, computed and returned, none written.

``analyse_run(run_dir)`` opens the run with its test split (``attnsvm.rec.train.runs.open_run``),
takes ``sequences`` test users (a seeded sample), extracts every requested head (``extract``),
scores the history tokens (``scores``), reads each head as Att-SVMs (``analysis``) and returns a
``LensResult``. ``attnsvm.lens.report`` writes it out.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from safetensors import SafetensorError, safe_open
from threadpoolctl import threadpool_limits

from attnsvm._files import require_regular
from attnsvm.errors import cut
from attnsvm.lens.analysis import HeadAnalysis, analyse_head
from attnsvm.lens.extract import (
    HeadView,
    LensError,
    extract,
    float64_copy,
    head_factors,
    head_grid,
)
from attnsvm.lens.scores import counterfactual_scores, linear_scores
from attnsvm.lens.solve import SOFT_MARGIN_C
from attnsvm.rec.data.sequences import EvalTask
from attnsvm.rec.train.checkpoint import METRICS, read_metrics
from attnsvm.rec.train.runs import LoadedRun, open_run

EXAMPLE_USERS = 4  # users the report shows one by one
TOP_K = 10  # recommendations listed per example user
#: Fewest Att-SVM constraints per head (rivals of the selected token, over all sequences) for
#: which heads are analysed in worker processes. A spawned worker first imports torch, cvxpy
#: and the package (about 5 s on a busy 2-core machine); a head of 50 ML-100K sequences (4,724
#: constraints) solves in 3-7 s there, and 2 workers made that report slower (39.5 s
#: against 25.2 s in one process, 2026-12-06).
PARALLEL_CONSTRAINTS = 20_000


@dataclass(frozen=True)
class LensResult:
    """One run read by the lens: the sampled test rows and, per head, its view, scores, analysis."""

    run: LoadedRun
    users: np.ndarray  # (n,) internal user ids of the sampled test rows
    windows: np.ndarray  # (n, L) their left-padded histories
    targets: np.ndarray  # (n,) each history's true next item (internal id)
    views: list[HeadView]
    scores: list[dict[str, np.ndarray]]  # per view: score kind → (n, L) token scores
    analyses: list[HeadAnalysis]  # per view
    recommendations: np.ndarray  # (≤ EXAMPLE_USERS, TOP_K) of the first users, seen excluded
    notes: list[str]
    checkpoint_epoch: int | None
    C: float

    def planted_recovery(self) -> dict[str, float] | None:
        """On the built-in planted data (dataset ``synthetic``): per head, the share of the
        sampled test sequences whose selected token holds the planted trigger item (an older
        copy of the same trigger carries the same information and counts); None elsewhere."""
        if self.run.config.data.dataset != "synthetic":
            return None
        from attnsvm.rec.data.synthetic import builtin_planted

        _, truth = builtin_planted()
        users = self.run.user_ids[self.users].astype(np.int64)  # external id = generator row
        planted = truth.planted[users]
        recovery = {}
        for a in self.analyses:
            chosen = self.windows[np.arange(len(users)), a.selected]
            hit = chosen[planted] == truth.trigger_item[users][planted]
            recovery[f"L{a.layer}H{a.head}"] = float(hit.mean()) if hit.size else float("nan")
        return recovery

    def summary(self, titles: Path | None = None) -> dict:
        """The JSON form (``lens.json``); ``titles``: the titles file the report used, if any."""
        return {
            "run": str(self.run.run_dir),
            "model": self.run.config.model.name,
            "sequences": len(self.users),
            "users": self.run.user_ids[self.users].tolist(),
            "score_kinds": list(self.analyses[0].optimal),
            "soft_margin_C": self.C,
            "checkpoint_epoch": self.checkpoint_epoch,
            "titles": str(titles) if titles else None,
            "notes": self.notes,
            "heads": [a.summary for a in self.analyses],
            "planted_trigger_recovery": self.planted_recovery(),
        }


def analyse_run(
    run_dir,
    sequences: int = 200,
    layer: int | None = None,
    head: int | None = None,
    *,
    C: float = SOFT_MARGIN_C,
    seed: int = 0,
    progress: bool = True,
) -> LensResult:
    """The lens's reading of ``run_dir``'s best checkpoint on ``sequences`` test users.

    BLAS runs on one thread meanwhile: the Att-SVM solves factorise many small matrices, where
    more BLAS threads only add start-up and contention (a 128×128 Cholesky took 12 ms with
    OpenBLAS's threads on a busy 2-core machine, 0.5 ms without).
    """
    if sequences < 1:
        raise LensError(f"sequences must be ≥ 1, got {sequences}")
    opened = open_run(run_dir, "test")
    run = opened.run
    if run.baseline:
        raise LensError(
            f"{run.run_dir}: {run.config.model.name} is a non-neural baseline; "
            "it has no attention to read"
        )
    with threadpool_limits(limits=1, user_api="blas"):
        return _analyse(run, opened.task, sequences, layer, head, C, seed, progress)


def _analyse(
    run: LoadedRun,
    test: EvalTask,
    sequences: int,
    layer: int | None,
    head: int | None,
    C: float,
    seed: int,
    progress: bool,
) -> LensResult:
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(test.users), size=min(sequences, len(test.users)), replace=False))
    max_len = run.model.config.max_len  # the model's window
    windows = test.history.padded(max_len, rows)
    targets = np.array([test.targets.row(r)[0] for r in rows])
    item_seq = run.model.scoring_input(torch.from_numpy(windows))
    model64 = float64_copy(run.model)
    grid = head_grid(model64, layer, head)
    # a personalised model (SSE-PT) is read with each sampled user's own embedding, a
    # time-aware one (STRec) with the histories' event times
    extras = run.model.extra_kwargs(**_available_inputs(test, rows, max_len))
    views = extract(model64, item_seq, grid, extras)
    checkpoint_epoch = _checkpoint_epoch(run.run_dir)
    notes = [
        f"token scores use the true next item (the test target of the run's split); "
        f"soft-margin C = {C} where a hard-margin Att-SVM is infeasible"
    ]
    jobs = []
    with _progress(progress) as bar:
        task = bar.add_task(
            "lens: token scores", total=len(views) * len(rows), rate=0.0, unit="sequences"
        )
        started = time.perf_counter()
        for view in views:
            scores = {}
            # the linear head's direct path is derived for TransformerEncoder blocks only; the
            # counterfactual re-runs any model
            for kind, score in (
                ("linear", linear_scores),
                ("counterfactual", counterfactual_scores),
            ):
                try:
                    scores[kind] = _in_chunks(score, model64, item_seq, targets, view, extras)
                except LensError as error:
                    if str(error) not in notes:
                        notes.append(str(error))
            done = (len(jobs) + 1) * len(rows)
            bar.update(task, completed=done, rate=done / (time.perf_counter() - started))
            snapshots = [
                (epoch, W)
                for epoch, W in _snapshots(run.run_dir, view.layer, view.head)
                if checkpoint_epoch is None or epoch <= checkpoint_epoch
            ]
            jobs.append((view, scores, snapshots))
        task = bar.add_task("lens: Att-SVMs per head", total=len(jobs), rate=0.0, unit="heads")
        started = time.perf_counter()

        def solved() -> None:
            done = bar.tasks[task].completed + 1
            bar.update(task, completed=done, rate=done / (time.perf_counter() - started))

        analyses = _analyse_heads(jobs, C, solved)
    if not (run.run_dir / "attention").is_dir():
        notes.append(
            "no attention/ snapshots in the run directory (train with the "
            "AttentionSnapshots callback to follow the correlation over epochs)"
        )
    return LensResult(
        run,
        test.users[rows],
        windows,
        targets,
        views,
        [scores for _, scores, _ in jobs],
        analyses,
        _recommendations(run.model, windows, extras),
        notes,
        checkpoint_epoch,
        C,
    )


def _progress(enabled: bool) -> Progress:
    """A bar per stage with its rate, so a long report never sits silent."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]:.1f} {task.fields[unit]}/s"),
        TimeRemainingColumn(),
        disable=not enabled,
        transient=True,
        console=Console(stderr=True),
    )


def _in_chunks(score, model64, item_seq, targets, view, extras, chunk: int = 32) -> np.ndarray:
    """``score`` of every sequence, ``chunk`` sequences at a time (the scores are per sequence)."""
    parts = []
    for start in range(0, len(targets), chunk):
        rows = slice(start, start + chunk)
        part_extras = {name: value[rows] for name, value in extras.items()}
        parts.append(
            score(model64, item_seq[rows], targets[rows], view.layer, view.head, part_extras)
        )
    return np.concatenate(parts)


def _available_inputs(test: EvalTask, rows: np.ndarray, max_len: int) -> dict:
    """What the test histories offer a model beyond its items: users, and times and ratings
    (aligned with the windows) where the data has them."""
    history = test.history
    available = {"users": torch.from_numpy(test.users[rows])}
    if history.times is not None:
        available["timestamps"] = torch.from_numpy(history.padded_times(max_len, rows))
    if history.ratings is not None:
        available["ratings"] = torch.from_numpy(history.padded_ratings(max_len, rows))
    return available


def _recommendations(model, windows: np.ndarray, extras: dict) -> np.ndarray:
    """Top-``TOP_K`` items (internal ids) after the first ``EXAMPLE_USERS`` windows, seen items
    excluded; equal scores keep the lower item id first, as in evaluation."""
    with torch.inference_mode():
        scores = model.score_last(torch.from_numpy(windows), **extras)  # appends a mask token
    top = []
    for i in range(min(EXAMPLE_USERS, len(windows))):
        row = scores[i].clone()
        row[torch.from_numpy(windows[i][windows[i] > 0])] = -torch.inf
        top.append(torch.sort(row, descending=True, stable=True).indices[:TOP_K].numpy())
    return np.array(top)


def _snapshots(run_dir: Path, layer: int, head: int) -> list[tuple[int, np.ndarray]]:
    """``(epoch, W_selection)`` of one head from ``attention/epoch_*.safetensors``."""
    rows = []
    for path in sorted((run_dir / "attention").glob("epoch_*.safetensors")):
        try:
            W = _snapshot(path, layer, head)
        except (SafetensorError, OSError, json.JSONDecodeError, LookupError, TypeError) as error:
            raise LensError(f"{path}: damaged attention snapshot ({cut(str(error))})") from None
        if W is not None:
            rows.append((int(re.findall(r"\d+", path.stem)[0]), W))
    return rows


def _snapshot(path: Path, layer: int, head: int) -> np.ndarray | None:
    """One head's ``W_selection`` in one snapshot file (None if the file lacks the layer)."""
    with safe_open(require_regular(path), framework="pt") as file:
        keys = set(file.keys())
        meta = file.metadata() or {}

        def get(name, keys=keys, file=file):
            return file.get_tensor(name) if name in keys else None

        prefix = f"layer{layer}."
        if prefix + "q_weight" not in keys:
            return None
        heads = json.loads(meta.get("num_heads", "[1]"))[layer]
        K, Q = head_factors(
            get(prefix + "q_weight"),
            get(prefix + "q_bias"),
            get(prefix + "k_weight"),
            get(prefix + "k_bias"),
            head,
            heads,
        )
    W = K @ Q.T / np.sqrt(K.shape[1])
    W[-1] = 0.0
    return W


def _checkpoint_epoch(run_dir: Path) -> int | None:
    """The epoch whose weights ``model.safetensors`` holds (``metrics.json``), if recorded.

    The Att-SVMs are posed on that model's hidden states, so only the ``W`` of epochs up to it
    are compared with them: later snapshots belong to a model the report does not read.
    """
    return read_metrics(run_dir)["best_epoch"] if (run_dir / METRICS).is_file() else None


def _analyse_job(job, C: float) -> HeadAnalysis:
    view, scores, snapshots = job
    with threadpool_limits(limits=1, user_api="blas"):
        return analyse_head(view, scores, C=C, snapshots=snapshots)


def _analyse_heads(jobs: list, C: float, done: Callable[[], None]) -> list[HeadAnalysis]:
    """``analyse_head`` of every ``(view, scores, snapshots)``, in job order. Heads are
    independent and their Att-SVM solves single-threaded, so with several cores and at least
    ``PARALLEL_CONSTRAINTS`` constraints per head they run in as many processes (spawned, so
    that no forked torch or OpenMP state is inherited)."""
    workers = min(len(jobs), os.cpu_count() or 1)
    constraints = min((int(view.valid.sum()) - len(view.valid) for view, _, _ in jobs), default=0)
    if workers <= 1 or constraints < PARALLEL_CONSTRAINTS:
        analyses = []
        for job in jobs:
            analyses.append(_analyse_job(job, C))
            done()
        return analyses
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(_analyse_job, job, C) for job in jobs]
        analyses = []
        for future in futures:
            analyses.append(future.result())
            done()
    return analyses
