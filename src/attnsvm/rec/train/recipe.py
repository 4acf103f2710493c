"""Staged recipes: runs in a row, each a normal run directory, each later one starting from the
results of earlier ones (``train.init_from``, ``data.synthetic_prefix``).

::

    attnsvm train --recipe bicat --data beauty --root ../shared/data --out runs/bicat
    attnsvm train --recipe bicat ... --set train.epochs=50 --set generate:mode=faithful
    attnsvm train --resume runs/bicat           # continues at the stage it stopped in

``--set KEY=VALUE`` applies to every training stage, ``--set STAGE:KEY=VALUE`` to one stage (a
generation stage takes ``mode``, ``items``, ``below``). A recipe is a built-in name (``RECIPES``)
or a JSON/TOML file of the same shape: ``name`` and a list ``stage`` of tables with ``name``,
``kind`` (``train`` | ``generate``), ``settings`` (a run config's sections, or the generation's
options), and optionally ``start_from`` (a training stage: train from that stage's weights; a
generation stage: generate with that run) and ``prefix_from`` (prepend that generation's items).

Layout of ``OUT``: ``recipe.json`` (every stage's resolved settings and folder, written before
the first stage runs, so a resume runs exactly what was asked), one folder per stage
(``1-pretrain``, ``2-generate``, ``3-finetune``), and in the last stage's run directory
``lineage.json``, the stages it descends from. A stage whose folder is complete is skipped; an
interrupted training stage resumes from its last epoch; an interrupted generation is redone.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnsvm._atomic import write_json
from attnsvm.rec.config import RunConfig, apply_overrides
from attnsvm.rec.config_base import ConfigError, coerce
from attnsvm.rec.models.registry import OFFICIAL_BCE
from attnsvm.rec.train.checkpoint import RESUME, RunDirectory, finished_run

FORMAT, VERSION, RECIPE_FILE = "attnsvm-recipe", 1, "recipe.json"
GENERATE_OPTIONS = {"mode": str, "items": int, "below": int}


@dataclass(frozen=True)
class Stage:
    name: str
    kind: str  # "train" | "generate"
    settings: dict[str, Any]
    start_from: str | None = None
    prefix_from: str | None = None


# juyongjiang/BiCAT run_pre_train.sh / run_fine_tuning.sh for Beauty (network: the preset)
_BICAT_TRAIN = {"epochs": 200, "batch_size": 128, "betas": [0.9, 0.98], "grad_clip": None}
_BICAT = (
    Stage(
        "pretrain",
        "train",
        {
            "model": {"name": "bicat", "forward_weight": 0.4},
            "data": {"reverse_train": True},
            "train": {**_BICAT_TRAIN, "keep": "last"},
        },
    ),
    Stage("generate", "generate", {"mode": "no_leak", "items": 20, "below": 20}, "pretrain"),
    Stage(
        "finetune",
        "train",
        {
            "model": {"name": "bicat", "kl_weight": 1.0},
            "data": {"synthetic_items": 15, "synthetic_below": 18},
            "loss": {**OFFICIAL_BCE.to_dict(), "last_targets": 12},
            "train": {**_BICAT_TRAIN, "keep": "last"},
            "eval": {"sampled_negatives": 100},
        },
        "pretrain",
        "generate",
    ),
)
# mamuyang/MrTransformer run scripts: lr 3e-4, batch 512, 6,000 warm-up steps; pre-training on
# the swap loss alone. The official budgets (1.5M + 1M steps) are far beyond these epochs.
_MR_TRAIN = {"batch_size": 512, "lr": 3e-4, "warmup_steps": 6000}
_MRTRANSFORMER = (
    Stage(
        "pretrain",
        "train",
        {
            "model": {"name": "mrtransformer", "swap_weight": 1.0},
            "loss": {"name": "ce", "scale": 0.0},
            "train": {**_MR_TRAIN, "epochs": 50, "keep": "last"},
        },
    ),
    Stage(
        "finetune",
        "train",
        {
            "model": {"name": "mrtransformer", "coverage_weight": 1.0},
            "train": {**_MR_TRAIN, "epochs": 200},
        },
        "pretrain",
    ),
)
RECIPES: dict[str, tuple[Stage, ...]] = {"bicat": _BICAT, "mrtransformer": _MRTRANSFORMER}


@dataclass(frozen=True)
class RecipeResult:
    folder: Path
    last_run: Path
    test: dict[str, float]
    best_epoch: int


def load_recipe(name_or_file: str) -> tuple[str, tuple[Stage, ...]]:
    """A built-in recipe by name, or a recipe file (``.json`` or ``.toml``)."""
    if name_or_file in RECIPES:
        return name_or_file, RECIPES[name_or_file]
    path = Path(name_or_file)
    if not path.is_file():
        raise ConfigError(f"unknown recipe {name_or_file!r} (built in: {', '.join(RECIPES)})")
    try:
        text = path.read_text()
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
        stages = tuple(Stage(**stage) for stage in data["stage"])
        return str(data.get("name", path.stem)), stages
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(f"{path}: not a recipe file ({error})") from None


def _check(stages: tuple[Stage, ...]) -> None:
    seen: dict[str, str] = {}
    for stage in stages:
        if stage.kind not in ("train", "generate") or stage.name in seen or ":" in stage.name:
            raise ConfigError(
                f"recipe stage {stage.name!r}: kind must be train or generate, names unique "
                "and without ':'"
            )
        if stage.kind == "generate" and seen.get(stage.start_from) != "train":
            raise ConfigError(f"recipe stage {stage.name!r} generates with an earlier train stage")
        for parent, kind in ((stage.start_from, "train"), (stage.prefix_from, "generate")):
            if parent is not None and seen.get(parent) != kind:
                raise ConfigError(f"recipe stage {stage.name!r}: {parent!r} is no earlier {kind}")
        seen[stage.name] = stage.kind
    if not stages or stages[-1].kind != "train":
        raise ConfigError("a recipe ends with a training stage")


def _generate_options(settings: dict, overrides: list[str], stage: str) -> dict[str, Any]:
    options = dict(settings)
    for assignment in overrides:
        key, _, value = assignment.partition("=")
        if key not in GENERATE_OPTIONS:
            raise ConfigError(f"--set {stage}:{key}: a generation takes {list(GENERATE_OPTIONS)}")
        options[key] = coerce(value, GENERATE_OPTIONS[key], f"{stage}:{key}", "command line")
    return options


def resolve_recipe(
    name_or_file: str, out: Path, data: str | None, root: str | None, overrides: list[str]
) -> dict[str, Any]:
    """The recipe's ``recipe.json``: every stage's folder and full settings, parents resolved."""
    name, stages = load_recipe(name_or_file)
    _check(stages)
    out = out.resolve()
    folders = {s.name: out / f"{i}-{s.name}" for i, s in enumerate(stages, start=1)}
    shared = [o for o in overrides if ":" not in o.partition("=")[0]]
    resolved = []
    for stage in stages:
        own = [
            o.split(":", 1)[1]
            for o in overrides
            if o.partition("=")[0].startswith(stage.name + ":")
        ]
        if stage.kind == "generate":
            settings = _generate_options(stage.settings, own, stage.name)
        else:
            config = RunConfig.from_dict(stage.settings, source=f"recipe stage {stage.name}")
            base = [f"data.dataset={data}"] if data is not None else []
            base += [f"data.root={root}"] if root is not None else []
            if stage.start_from:
                base.append(f"train.init_from={folders[stage.start_from]}")
            if stage.prefix_from:
                base.append(f"data.synthetic_prefix={folders[stage.prefix_from]}")
            settings = apply_overrides(config, [*base, *shared, *own]).to_dict()
        entry = {"name": stage.name, "kind": stage.kind, "folder": str(folders[stage.name])}
        resolved.append({**entry, "settings": settings, "start_from": stage.start_from})
        resolved[-1]["prefix_from"] = stage.prefix_from
    unknown = {o.partition(":")[0] for o in overrides if ":" in o.partition("=")[0]}
    unknown -= set(folders)
    if unknown:
        raise ConfigError(f"--set: no recipe stage {sorted(unknown)} (stages: {list(folders)})")
    return {"format": FORMAT, "version": VERSION, "recipe": name, "stages": resolved}


def run_recipe(
    name_or_file: str,
    out: Path,
    data: str | None = None,
    root: str | None = None,
    overrides: list[str] = (),
    show_progress: bool = True,
) -> RecipeResult:
    """Resolve the recipe into ``out`` (which must not exist yet) and run every stage."""
    if out.exists():
        raise ConfigError(f"{out}: exists already; continue a recipe there with --resume {out}")
    plan = resolve_recipe(name_or_file, out, data, root, list(overrides))
    out.mkdir(parents=True)
    write_json(out / RECIPE_FILE, plan)
    return resume_recipe(out, show_progress)


def resume_recipe(out: Path, show_progress: bool = True) -> RecipeResult:
    """Run every stage of ``out/recipe.json`` that is not complete yet, in order."""
    try:
        plan = json.loads((out / RECIPE_FILE).read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"{out}: no readable {RECIPE_FILE} ({error})") from None
    if plan.get("format") != FORMAT or plan.get("version") != VERSION:
        raise ConfigError(f"{out / RECIPE_FILE}: not a recipe plan of version {VERSION}")
    stages = plan["stages"]
    for stage in stages:
        folder = Path(stage["folder"])
        run = RunDirectory(folder)
        if run.final.is_dir():
            continue
        if stage["kind"] == "generate":
            _run_generation(stage, stages, run)
            continue
        from attnsvm.rec.train.trainer import train

        resume = (run.partial / RESUME).exists()
        if run.partial.exists() and not resume:  # stopped before its first epoch ended
            shutil.rmtree(run.partial)
        config = RunConfig() if resume else RunConfig.from_dict(stage["settings"])
        train(config, folder, resume=resume, show_progress=show_progress)
    last = finished_run(stages[-1]["folder"])
    parents = [{k: s[k] for k in ("name", "kind", "folder")} for s in stages[:-1]]
    write_json(last / "lineage.json", {"recipe": plan["recipe"], "parents": parents})
    metrics = json.loads((last / "metrics.json").read_text())
    return RecipeResult(out, last, metrics["test"], metrics["best_epoch"])


def _run_generation(stage: dict, stages: list[dict], run: RunDirectory) -> None:
    from attnsvm.rec.train.generate import write_generation
    from attnsvm.rec.train.runs import load_run
    from attnsvm.rec.train.scoring import load_split

    if run.partial.exists():  # a generation is redone, never resumed
        shutil.rmtree(run.partial)
    source = next(s["folder"] for s in stages if s["name"] == stage["start_from"])
    loaded = load_run(source)
    options = stage["settings"]
    write_generation(
        loaded.model,
        load_split(loaded.config.data),
        run.final,
        mode=options["mode"],
        items=options["items"],
        below=options["below"],
        source=str(loaded.run_dir),
    )
