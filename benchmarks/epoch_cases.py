"""The rows of ``epoch_table.py`` and their measurement, run in one fresh interpreter per (git
tree, dataset). This module is imported from this tree's ``benchmarks/`` by an interpreter whose
``attnsvm`` may be an older commit's, so it uses only the package interfaces that the measured
commits share.

A row is one of the twenty seed papers' systems in the setting it trains in on S3-Beauty and
ML-1M: the zoo's "paper" setting (``zoo.run_config``), SAM as SASRec+'s zoo setting with
``train.optimizer = "sam"``, BERT4Rec in K&V's setting (``train_published.py``) at the zoo's
window, and the stages of the ``bicat`` and ``mrtransformer`` recipes at the zoo's window (the
fine-tunings from fresh weights: weights do not change a step's cost; BiCAT's on a generation
from fresh pre-training weights). A row that cannot train on the data, or has no epoch, is
"n/a" with its reason. ``measure`` returns per row the median ms of a trainer step, the steps of
an epoch and the seconds of an epoch (``bicat-generation``: the seconds of a whole run's
generation), an error, or the n/a reason. MrTransformer's pre-training first searches every
training window's nearest windows (once per run, before epoch 1): that search is estimated
before its loop is built, and where it would take hours the row is n/a instead.
"""

from __future__ import annotations

import contextlib
import functools
import math
import signal
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

import train_published  # a sibling script: K&V's BERT4Rec setting
import zoo
from attnsvm.rec.config import DataConfig, RunConfig, apply_overrides
from attnsvm.rec.data.batches import Examples, make_examples
from attnsvm.rec.data.pairs import nearest_examples, window_sets
from attnsvm.rec.data.sequences import Sequences
from attnsvm.rec.data.splits import Split
from attnsvm.rec.data.transforms import training_rows
from attnsvm.rec.train import distributed
from attnsvm.rec.train.generate import generate_prior_items, generation_contexts, write_generation
from attnsvm.rec.train.loop import TrainingLoop
from attnsvm.rec.train.recipe import resolve_recipe
from attnsvm.rec.train.scoring import build, load_split

DATASETS = {"beauty": "S3-Beauty", "ml-1m": "ML-1M"}
#: a loop whose partner search has not finished after this is stopped and its row is n/a: the
#: loop would wait on it before its first step (the sparse product alone took days on ML-1M)
PARTNER_SEARCH_LIMIT_S = 900.0
#: the product terms of the timed sample search: about one block of the library's search
SAMPLE_TERMS = 20_000_000


@dataclass(frozen=True)
class Row:
    """One row of the table: the paper's short name, what runs, and how."""

    paper: str
    label: str
    # "zoo" (a zoo setting), "bert4rec", "stage" (a recipe stage), "generation" or "n/a"
    kind: str
    zoo_name: str = ""
    train: tuple[tuple[str, object], ...] = ()  # overrides of the zoo setting's train section
    recipe: str = ""
    stage: str = ""
    # n/a rows: why, from the dataset's name and its split (what the data has)
    reason: Callable[[str, Split], str] | None = None
    # its loop first searches every training window's nearest windows (MrTransformer's swap
    # partners): estimated before the loop is built, and not run where it would take hours
    partner_search: bool = False


def _lacks(split: Split, column: str, dataset: str) -> str:
    """The data fact behind an n/a reason, read from the split rather than assumed."""
    values = split.train.ratings if column == "ratings" else split.train.times
    return f"{DATASETS[dataset]} has {'none' if values is None else 'them'}"


def _no_timestamps(name: str) -> Callable[[str, Split], str]:
    return lambda dataset, split: (
        f"{name} reads event timestamps and {_lacks(split, 'times', dataset)} "
        "(the zoo skips it there and runs it on ML-100K, which has them)"
    )


ROWS: dict[str, Row] = {
    "sasrec+": Row("SASRec+ (reference)", "sasrec+", "zoo", "sasrec+"),
    "sam": Row(
        "SAM (loss landscape)",
        "sasrec+, train.optimizer=sam (ρ 0.05)",
        "zoo",
        "sasrec+",
        train=(("optimizer", "sam"), ("sam_rho", 0.05)),
    ),
    "strec": Row("STRec", "strec", "zoo", "strec"),
    "etrec": Row("ETRec", "etrec", "zoo", "etrec"),
    "bsarec": Row("BSARec", "bsarec", "zoo", "bsarec"),
    "ssept": Row("SSE-PT", "ssept", "zoo", "ssept"),
    "srt": Row("Scaling SR with Transformers", "srt", "zoo", "srt"),
    "actsr": Row("AC-TSR", "actsr", "zoo", "actsr"),
    "bert4rec": Row("Transformers, kNN, sampled metrics", "bert4rec (K&V setting)", "bert4rec"),
    "matrrec": Row("MaTrRec", "matrrec", "zoo", "matrrec"),
    "nstransformer": Row(
        "Non-Stationary transformer",
        "nstransformer",
        "n/a",
        reason=lambda dataset, split: (
            "a pointwise like/dislike model (rating ≥ 4), trained by its own pointwise trainer, "
            f"that reads ratings: {_lacks(split, 'ratings', dataset)} (its runs: ML-100K, "
            "nonstationary.py)"
        ),
    ),
    "crr": Row(
        "CRR",
        "crr (stage 2)",
        "n/a",
        reason=lambda dataset, split: (
            "stage 2 of a finished causal run with ratings as rewards (rl/crr_trainer.py "
            f"refuses data without them): {_lacks(split, 'ratings', dataset)} (its runs: "
            "ML-100K, crr_ml100k.py)"
        ),
    ),
    "smm": Row(
        "SMM (encoder-only sessions)",
        "smm",
        "n/a",
        reason=lambda dataset, split: (
            "no zoo setting on leave-one-out data: a session model, set on Diginetica's "
            "session split (its epoch there: expensive_step.py --cases smm)"
        ),
    ),
    "adt": Row("ADT", "adt", "zoo", "adt"),
    "bicat-pretrain": Row("BiCAT", "bicat-pretrain", "stage", recipe="bicat", stage="pretrain"),
    "bicat-finetune": Row("BiCAT", "bicat-finetune", "stage", recipe="bicat", stage="finetune"),
    "bicat-generation": Row("BiCAT", "bicat-generation (a whole run)", "generation"),
    "sdat": Row("SDAT", "sdat", "zoo", "sdat"),
    "mrtransformer-pretrain": Row(
        "MrTransformer",
        "mrtransformer-pretrain",
        "stage",
        recipe="mrtransformer",
        stage="pretrain",
        partner_search=True,
    ),
    "mrtransformer-finetune": Row(
        "MrTransformer", "mrtransformer-finetune", "stage", recipe="mrtransformer", stage="finetune"
    ),
    "adamct": Row("AdaMCT", "adamct", "zoo", "adamct"),
    "convformer": Row("ConvFormer", "convformer", "zoo", "convformer"),
    "pi-transformer": Row(
        "Online continual learning",
        "pi-transformer (streams)",
        "n/a",
        reason=lambda dataset, split: (
            "streams only: one prequential pass over the time-ordered event log (attnsvm "
            f"stream), no epochs; it also reads event times: {_lacks(split, 'times', dataset)}"
        ),
    ),
    "rlt4rec": Row(
        "RLT4Rec",
        "rlt4rec",
        "n/a",
        reason=lambda dataset, split: (
            "trained on simulated cold-start episodes by its own episode trainer "
            f"(sim/rlt4rec_training.py) and reads ratings: {_lacks(split, 'ratings', dataset)}"
        ),
    ),
}
for _name in ("strec", "sdat"):  # the zoo's time-aware models: n/a where the data has no times
    ROWS[_name] = replace(ROWS[_name], reason=_no_timestamps(_name))


def _split_key(data: DataConfig) -> DataConfig:
    """The fields ``load_split`` does not read cleared: every row of a dataset shares its split
    (the window and the training-row transforms are the loop's business)."""
    return replace(
        data,
        max_len=None,
        reverse_train=False,
        synthetic_prefix=None,
        synthetic_items=0,
        synthetic_below=0,
    )


@functools.cache
def _split(key: DataConfig) -> Split:
    return load_split(key)


def split_of(data: DataConfig) -> Split:
    return _split(_split_key(data))


def zoo_config(row: Row, dataset: str) -> RunConfig:
    config = zoo.run_config(dataset, row.zoo_name, "paper", seed=0, root=zoo.ROOT)
    return replace(config, train=replace(config.train, **dict(row.train)))


def bert4rec_config(dataset: str) -> RunConfig:
    """K&V's BERT4Rec (their ML-1M run in ``train_published.py``: CE over masked positions,
    batch 128, dropout 0.1) on the dataset at the zoo's window: the zoo has no BERT4Rec row."""
    config = train_published.RUNS["bert4rec"][0]
    data = DataConfig(dataset, root=str(zoo.ROOT), max_len=zoo.DATASETS[dataset])
    return replace(config, data=data, train=replace(config.train, seed=0, num_threads=1))


def recipe_stages(recipe: str, dataset: str, work: Path) -> dict[str, dict]:
    """The recipe's stages by name, at the zoo's window (the recipe itself leaves it to the
    network's own, BiCAT's 100)."""
    window = [f"data.max_len={zoo.DATASETS[dataset]}"]
    plan = resolve_recipe(recipe, work / recipe, dataset, str(zoo.ROOT), window)
    return {stage["name"]: stage for stage in plan["stages"]}


def stage_config(row: Row, dataset: str, work: Path) -> RunConfig:
    config = RunConfig.from_dict(recipe_stages(row.recipe, dataset, work)[row.stage]["settings"])
    if row.label == "bicat-finetune":  # its generated prefixes, from fresh pre-training weights
        config = apply_overrides(config, [f"data.synthetic_prefix={generation(dataset, work)}"])
    return config


def config_of(name: str, dataset: str, work: Path) -> RunConfig:
    row = ROWS[name]
    if row.kind == "zoo":
        return zoo_config(row, dataset)
    if row.kind == "bert4rec":
        return bert4rec_config(dataset)
    return stage_config(row, dataset, work)


def generation(dataset: str, work: Path) -> Path:
    """A whole BiCAT generation for the fine-tuning stage, written once per dataset and shared
    by the trees measured (``epoch_table.py`` runs this tree first: its generation is faster)."""
    out = work / f"generation-{dataset}"
    if not out.is_dir():
        config = config_of("bicat-pretrain", dataset, work)
        split = split_of(config.data)
        options = recipe_stages("bicat", dataset, work)["generate"]["settings"]
        write_generation(build(config, split.num_items), split, out, **options)
    return out


def generation_seconds(dataset: str, users: int, work: Path) -> float:
    """Seconds of a whole BiCAT generation from fresh pre-training weights, in the recipe's
    settings, from ``users`` users drawn at random (0: every user), scaled to every user."""
    options = recipe_stages("bicat", dataset, work)["generate"]["settings"]
    return whole_generation_seconds(config_of("bicat-pretrain", dataset, work), options, users)


def whole_generation_seconds(config: RunConfig, options: dict, users: int) -> float:
    """Seconds of a whole generation (``options``: mode, items, below) from fresh weights of
    ``config`` (BiCAT's pre-training stage), timed on ``users`` users drawn at random (0: every
    user) and scaled to every user."""
    split = split_of(config.data)
    model = build(config, split.num_items)
    contexts = generation_contexts(split, options["mode"])
    everyone = len(contexts)
    if 0 < users < everyone:
        chosen = np.sort(np.random.default_rng(0).choice(everyone, size=users, replace=False))
        items = np.concatenate([contexts.row(int(r)) for r in chosen])
        offsets = np.concatenate([[0], np.cumsum(contexts.lengths[chosen])]).astype(np.int64)
        contexts = Sequences(offsets, items, contexts.users[chosen])
    start = time.perf_counter()
    generate_prior_items(model, contexts, options["items"], options["below"])
    return (time.perf_counter() - start) * everyone / len(contexts)


@dataclass(frozen=True)
class PartnerSearch:
    seconds: float  # estimated, the whole search
    windows: int  # training windows, each searched against every other
    neighbours: int  # nearest windows kept per window
    sampled: int  # windows of the timed sample search


def product_terms(sets) -> float:
    """Terms of the sparse product ``sets setsᵀ`` that ``nearest_examples`` forms (its cost
    measure too): per window, the number of windows holding each of its items, summed."""
    counts = np.bincount(sets.indices, minlength=sets.shape[1])
    return float(np.asarray(sets @ counts).sum())


def partner_search(config: RunConfig, split: Split) -> PartnerSearch:
    """MrTransformer's partner search (``pairs.nearest_examples``: every training window's
    nearest windows by their items, once per run, before epoch 1) as a sparse product alone
    would take it, estimated: the library's search timed on random windows whose product has
    about ``SAMPLE_TERMS`` terms (so few per row that it forms the product), scaled by the whole
    product's terms (counted exactly)."""
    model = build(config, split.num_items)
    rows = training_rows(split, config.data)
    examples = make_examples(rows, model.objective)
    window, items = model.config.max_len, split.num_items
    size, whole = len(examples), product_terms(window_sets(rows, examples, window, items))
    # m random windows share about m² · whole / size² terms
    sampled = min(size, int(math.sqrt(SAMPLE_TERMS / whole) * size) + 1)
    chosen = np.sort(np.random.default_rng(0).choice(size, sampled, replace=False))
    sample = Examples(examples.rows[chosen], examples.ends[chosen])
    terms = product_terms(window_sets(rows, sample, window, items))
    neighbours = model.config.pair_neighbours
    start = time.perf_counter()
    nearest_examples(rows, sample, window, items, neighbours)
    seconds = (time.perf_counter() - start) * whole / terms
    return PartnerSearch(seconds, size, neighbours, sampled)


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.0f} h"


def loop_of(name: str, dataset: str, work: Path) -> TrainingLoop:
    # built by hand, not by ``trainer.training_loop``: this module runs against older trees too
    config = config_of(name, dataset, work)
    split = split_of(config.data)
    model = build(config, split.num_items, split.num_users)
    return TrainingLoop(config, split, model, distributed.init_from_env())


def first_batches(loop: TrainingLoop, count: int) -> tuple[list[np.ndarray], torch.Generator]:
    """The first ``count`` batches of epoch 1's order, as the loop's own epoch draws them."""
    generator = loop.begin_epoch(1)
    order = torch.randperm(len(loop.examples), generator=generator).numpy()
    size = loop.config.train.batch_size
    return [order[i * size : (i + 1) * size] for i in range(count)], generator


def failure(error: BaseException) -> str:
    """An exception as one short line for a table cell."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0] if lines else ''}".replace("|", "/")
    return text if len(text) <= 200 else text[:197] + "..."


def unavailable(name: str, dataset: str) -> str | None:
    """Why the row has no epoch on ``dataset`` (None: it has one)."""
    row = ROWS[name]
    if row.reason is None or (row.kind == "zoo" and zoo.runs_on(row.zoo_name, dataset)):
        return None
    return row.reason(dataset, split_of(zoo_config(ROWS["sasrec+"], dataset).data))


def prepare(name: str, dataset: str, users: int, work: Path) -> tuple[dict, TrainingLoop | None]:
    """A row's result so far (n/a, a generation's seconds, the seconds a partner search made
    its loop take to build) and its loop where it has steps to time."""
    row = ROWS[name]
    reason = unavailable(name, dataset)
    if reason is not None:
        return {"na": reason}, None
    if row.kind == "generation":
        return {"seconds": generation_seconds(dataset, users, work)}, None
    if not row.partner_search:
        return {}, loop_of(name, dataset, work)
    start = time.perf_counter()
    try:
        with deadline(PARTNER_SEARCH_LIMIT_S):
            loop = loop_of(name, dataset, work)
    except TimeoutError:
        config = config_of(name, dataset, work)
        search = partner_search(config, split_of(config.data))
        reason = (
            f"before its first epoch a run searches each of its {search.windows:,} training "
            f"windows' {search.neighbours} nearest windows (pairs.nearest_examples, once per "
            f"run), which had not finished after {duration(PARTNER_SEARCH_LIMIT_S)} on one "
            f"thread (the sparse product alone: ≈ {duration(search.seconds)}, timed on "
            f"{search.sampled:,} random windows and scaled), so it never reaches an epoch here"
        )
        return {"na": reason}, None
    return {"build_s": time.perf_counter() - start}, loop


@contextlib.contextmanager
def deadline(seconds: float):
    """Raise ``TimeoutError`` in this (main) thread once ``seconds`` have passed."""

    def expire(signum, frame):
        raise TimeoutError(f"{seconds:.0f} s passed")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def measure(dataset: str, names: list[str], steps: int, users: int, work: str) -> dict:
    """Every row of ``names`` on ``dataset``: its loop built, then the rows' steps taken in
    turns (one step of each row, ``steps`` rounds after two warm-up rounds), so that a change
    of the machine's load reaches every row alike. A row that fails is reported, not fatal."""
    torch.set_num_threads(1)
    out: dict[str, dict] = {}
    loops: dict[str, TrainingLoop] = {}
    for name in names:
        try:
            out[name], loop = prepare(name, dataset, users, Path(work))
        except Exception as error:  # one row's failure is that row's cell
            out[name], loop = {"error": failure(error)}, None
        if loop is not None:
            loops[name] = loop
    plans = {name: first_batches(loop, steps + 2) for name, loop in loops.items()}
    times: dict[str, list[float]] = {name: [] for name in loops}
    for number in range(steps + 2):
        for name, loop in list(loops.items()):
            chosen, generator = plans[name]
            start = time.perf_counter()
            try:
                loop.train_step(chosen[number], generator)
            except Exception as error:  # e.g. an API the old tree lacks
                out[name] = {"error": failure(error)}
                del loops[name]
                continue
            if number >= 2:  # two warm-up steps: first-call allocations and kernel choices
                times[name].append(time.perf_counter() - start)
    for name, loop in loops.items():
        per_step = 1000 * statistics.median(times[name])
        size = loop.config.train.batch_size
        count = math.ceil(len(loop.examples) / size)
        epoch = per_step * count / 1000
        out[name].update(ms=per_step, steps=count, batch=size, epoch=epoch)
    return out
