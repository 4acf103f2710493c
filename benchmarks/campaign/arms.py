"""What a campaign arm is and how its runs are made, cached and read.

An *arm* is one trained system under one setting (``ml-100k/sdat-no-gru``): a function of the
seed that trains (or plays) it in its own folder and returns its metrics. Arms are shared by the
claims that name them, so a run is made once per seed whatever number of claims compare it. The
:class:`Workspace` caches each finished arm as ``WORK/arms/<key>/seed<N>.json`` (metrics, epochs,
the CPU seconds it cost), and an interrupted arm resumes from its run folder (the trainer's own
resume point).

A run longer than a cell (gSASRec's patience-200 run) is trained in *slices*: the arm stops
after the epoch that spends its slice of CPU (:class:`SliceLimit`), the cell ends without rows
(:class:`SliceSpent`), and the next cell resumes the run where it stopped; the CPU seconds of
every slice add up in the arm's record.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import resource
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a cell imports torch only when an arm it makes trains (start-up in seconds)
    from attnsvm.rec.config import RunConfig


@dataclass(frozen=True)
class Outcome:
    """What an arm's run gave: metric name → value, and the epochs it trained."""

    metrics: dict[str, float]
    epochs: int


@dataclass(frozen=True)
class Arm:
    """A system under one setting, trained by ``make(seed, workspace) → Outcome``.

    ``system`` is the registry name of what is trained (``sam`` for the SAM-trained arm, ``crr``
    for CRR's stage 2, ``popularity`` for a non-neural policy).
    """

    key: str
    system: str
    make: Callable[[int, Workspace], Outcome] = field(compare=False, repr=False)
    needs: tuple[str, ...] = ()  # arms whose runs this one starts from (a stage-1 run)


class SliceSpent(Exception):
    """A sliced arm used its cell's CPU; its run resumes from its last epoch in the next cell."""


class SliceLimit:
    """Trainer callback: stop after the epoch that spends ``minutes`` of this process's CPU
    (the run's resume point is written before the callbacks run)."""

    def __init__(self, minutes: float) -> None:
        self.deadline = cpu_seconds() + minutes * 60

    def on_epoch_end(self, state) -> None:
        if cpu_seconds() >= self.deadline:
            raise SliceSpent(f"{state.run_dir}: slice spent after epoch {state.epoch}")


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class Workspace:
    """The campaign's work folder: arm results cached by (key, seed), run folders beside them.

    With ``results`` (the campaign's CSV), an arm that a finished cell recorded there counts as
    made even where this folder lost it (a new machine): its record is read back from those rows
    (the reported metrics, epochs, CPU seconds and commit) to be compared again, and its cost
    counts in the estimates; an arm whose run another one starts from (``needs``) is made again,
    since the rows hold no run. ``commit`` is written into the records made here."""

    def __init__(
        self, root: Path, arms: dict[str, Arm], results: Path | None = None, commit: str = ""
    ) -> None:
        self.root = Path(root)
        self.arms = arms
        self.commit = commit
        self.recorded = recorded_arms(results) if results is not None else {}

    def folder(self, key: str, seed: int) -> Path:
        """Where arm ``key`` keeps its run(s) for ``seed``."""
        return self.root / "runs" / key / f"seed{seed}"

    def _record(self, key: str, seed: int) -> Path:
        return self.root / "arms" / key / f"seed{seed}.json"

    def done(self, key: str, seed: int, *, run_needed: bool = False) -> bool:
        """Made here, or (unless its run is needed) recorded in the results."""
        if self._record(key, seed).is_file():
            return True
        return not run_needed and (key, seed) in self.recorded

    def _spent(self, key: str, seed: int) -> Path:
        return self._record(key, seed).with_suffix(".slices")

    def minutes_left(self, key: str, seed: int, guess: float, *, run_needed: bool = False) -> float:
        """CPU-minutes arm ``key`` still needs for ``seed``: none when made; else its mean
        measured cost over the seeds that made it, here or in the results (``guess`` where
        none has), less the slices this seed already spent on it."""
        if self.done(key, seed, run_needed=run_needed):
            return 0.0
        made = {
            int(path.stem.removeprefix("seed")): json.loads(path.read_text())["cpu_seconds"]
            for path in (self.root / "arms" / key).glob("seed*.json")
        }
        for (other, made_seed), record in self.recorded.items():
            if other == key:
                made.setdefault(made_seed, record["cpu_seconds"])
        cost = sum(made.values()) / 60 / len(made) if made else guess
        spent = self._spent(key, seed)
        return max(0.0, cost - (float(spent.read_text()) / 60 if spent.is_file() else 0.0))

    def result(
        self, key: str, seed: int, metric: str | None = None, *, run_needed: bool = False
    ) -> dict[str, Any]:
        """The arm's record, made first when missing: ``metrics``, ``epochs``, ``cpu_seconds``
        (and ``commit``). One read back from the results serves unless its run is needed or
        it lacks ``metric`` (the rows keep the reported metrics only)."""
        record = self._record(key, seed)
        if record.is_file():
            return json.loads(record.read_text())
        restored = None if run_needed else self.recorded.get((key, seed))
        if restored is not None and (metric is None or metric in restored["metrics"]):
            return restored
        arm = self.arms[key]
        for need in arm.needs:  # made first, so that the CPU below is this arm's own
            self.result(need, seed, run_needed=True)
        spent = self._spent(key, seed)
        earlier = float(spent.read_text()) if spent.is_file() else 0.0
        start = cpu_seconds()
        try:
            outcome = arm.make(seed, self)
        except SliceSpent:
            spent.parent.mkdir(parents=True, exist_ok=True)
            spent.write_text(f"{earlier + cpu_seconds() - start:.1f}\n")
            raise
        data = {
            "key": key,
            "system": arm.system,
            "seed": seed,
            "metrics": {name: float(value) for name, value in outcome.metrics.items()},
            "epochs": int(outcome.epochs),
            # its dependencies (a stage-1 run) have records of their own
            "cpu_seconds": round(earlier + cpu_seconds() - start, 1),
            "commit": self.commit,
        }
        record.parent.mkdir(parents=True, exist_ok=True)
        partial = record.with_suffix(".tmp")
        partial.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(partial, record)
        return data


def recorded_arms(results: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """Each (arm, seed)'s record as the results' rows give it back: the reported metrics, the
    epochs, CPU seconds and commit of its latest run (a run made again on another machine
    replaces the earlier one's)."""
    if not results.is_file():
        return {}
    records: dict[tuple[str, int], dict[str, Any]] = {}
    with results.open(newline="") as handle:
        for row in csv.DictReader(handle):  # appended as cells finish: later rows are newer
            run = {
                "key": row["arm"],
                "system": row["system"],
                "seed": int(row["seed"]),
                "epochs": int(row["epochs"]),
                "cpu_seconds": float(row["cpu_seconds"]),
                "commit": row["commit"],
            }
            record = records.get((run["key"], run["seed"]))
            if record is None or any(record[name] != value for name, value in run.items()):
                record = records[(run["key"], run["seed"])] = {**run, "metrics": {}}
            record["metrics"][row["metric"]] = float(row["value"])
    return records


def fresh(folder: Path) -> bool:
    """Whether ``folder`` must be made; a leftover interrupted work folder is removed."""
    shutil.rmtree(folder.with_name(folder.name + ".incomplete"), ignore_errors=True)
    return not folder.is_dir()


def trained(
    key: str, system: str, config: Callable[[int], RunConfig], slice_minutes: float | None = None
) -> Arm:
    """An arm trained by the library's ``train`` from ``config(seed)``, read from its test
    metrics (leave-one-out or temporal, full ranking: whatever the config says); trained in
    slices of ``slice_minutes`` CPU-minutes when given."""

    def make(seed: int, space: Workspace) -> Outcome:
        callbacks = [SliceLimit(slice_minutes)] if slice_minutes else []
        run = train_run(config(seed), space.folder(key, seed) / "run", callbacks)
        return read_run(run)

    return Arm(key, system, make)


def train_run(config: RunConfig, path: Path, callbacks=()) -> Path:
    """Train ``config`` into ``path``: skipped when finished, resumed when interrupted after an
    epoch, started afresh when stopped before its first epoch ended (nothing to resume)."""
    from attnsvm.rec.train.checkpoint import RunDirectory
    from attnsvm.rec.train.trainer import train

    if not path.is_dir():
        partial = RunDirectory(path).partial
        resume = (partial / "resume.pt").exists()
        if partial.exists() and not resume:  # stopped before its first epoch ended
            shutil.rmtree(partial)
        train(config, path, callbacks, resume=resume, show_progress=False)
    return path


def read_run(run: Path) -> Outcome:
    """A finished run's test metrics (``HR@10``, ``NDCG@10``, …, and where it has them its
    labelled sampled ones, ``NDCG@10 (sampled: 100 uniform)``) and epoch count."""
    metrics = json.loads((run / "metrics.json").read_text())
    test = {**metrics["test"], **metrics.get("test_sampled", {})}
    return Outcome({k: float(v) for k, v in test.items()}, int(metrics["epochs"]))


def recipe_arm(
    key: str,
    system: str,
    recipe: str,
    dataset: str,
    root: str,
    overrides,
    shared: dict[str, str] | None = None,
) -> Arm:
    """An arm trained by a staged recipe (``rec/train/recipe.py``: BiCAT's pre-training,
    generation and fine-tuning; MrTransformer's pre-training and fine-tuning) on ``dataset``,
    ``overrides(seed)`` its ``--set`` assignments; read from the last stage's test metrics. An
    interrupted recipe resumes at the stage it stopped in. ``shared`` maps a stage to the arm
    whose run it is (the same settings, trained once for the recipes that share it): that run
    is copied in as the finished stage, after checking its config is the stage's."""
    shared = shared or {}

    def make(seed: int, space: Workspace) -> Outcome:
        from attnsvm._atomic import write_json
        from attnsvm.rec.config import RunConfig, load_config
        from attnsvm.rec.train.recipe import RECIPE_FILE, resolve_recipe, resume_recipe

        out = space.folder(key, seed) / "recipe"
        if not (out / RECIPE_FILE).is_file():
            shutil.rmtree(out, ignore_errors=True)  # stopped before its plan was written
            plan = resolve_recipe(recipe, out, dataset, root, overrides(seed))
            for stage in plan["stages"]:
                if stage["name"] in shared:
                    space.result(shared[stage["name"]], seed)
                    run = space.folder(shared[stage["name"]], seed) / "run"
                    wanted = RunConfig.from_dict(stage["settings"])
                    wanted = dataclasses.replace(wanted, loss=wanted.resolved_loss())
                    if load_config(run / "config.json") != wanted:  # a run's loss is resolved
                        raise ValueError(f"{run}: not the settings of {key}'s {stage['name']}")
                    shutil.copytree(run, stage["folder"])
            out.mkdir(parents=True, exist_ok=True)
            write_json(out / RECIPE_FILE, plan)  # last: a plan means its copies are whole
        result = resume_recipe(out, show_progress=False)
        return read_run(result.last_run)

    needs = tuple(shared.values())
    return Arm(key, system, make, needs=needs)
