"""What the zoo's CPU training steps cost on S3-Beauty: the every-prefix models before and after
issue 33's speed-ups, against SASRec+, with a per-part profile.

BSARec, AdaMCT, MaTrRec and AC-TSR train on every prefix ("last": one example per training item,
the loss at the last position). Issue 33 made their step cheaper without changing what it
computes:

- **last query only**: BSARec, MaTrRec and AC-TSR train through ``last_hidden``, whose last layer
  computes the last query alone (``trains_last_hidden``; AC-TSR's attack step too);
- **AC-TSR's attack step on length groups**, padding cut, the same noise and mask penalty;
- **padding cut**: AdaMCT is ``padding_free`` (its squeeze-excitation reads a cut window like
  the max_len-padded one), so the trainer cuts each batch into length groups, each at its own
  width: micro-batches of its batch of 2048;
- **BSARec's low-pass** as ``U Uᵀ x`` with a basis of the kept frequencies, not two FFTs;
- **AC-TSR's order term** ``y·o − softplus(o)``, one softplus instead of two.

"Before" switches these off in the same process (``before_issue_33``: the forward trains,
AdaMCT at the full window, AC-TSR's attack forward on the full window with every query, the FFT
low-pass, the two-softplus order term), so each row's two figures come from the same real
batches, alternated step by step. SASRec+ (all-position training, batch 128) is the reference;
its two figures differ only by noise.

    .venv/bin/python benchmarks/zoo_step.py --steps 8

Each figure is the median ms of one full trainer step (``TrainingLoop.train_step``: batch,
forward, CE, backward, AdamW; AC-TSR's attack step included) over ``--steps`` batches after two
warm-ups, one thread. Seconds an epoch = median step × steps an epoch (training only, no
validation). The profile times the same step part by part (module hooks for the embedding, the
blocks before the last, the last layer) over ``--profile-steps`` batches: medians in ms.
``--alternatives`` prints the issue-27 table instead (padding cut against the full window,
MaTrRec's scan against ``[:, t]`` indexing).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable

import torch
import torch.nn.functional as F

import conditions
import zoo  # benchmarks/ is on the path of a script run from it
from attnsvm.rec.data.batches import make_batch
from attnsvm.rec.models import actsr, bsarec, matrrec
from attnsvm.rec.models.base import SequentialRecommender
from attnsvm.rec.train import distributed
from attnsvm.rec.train.loop import TrainingLoop
from attnsvm.rec.train.scoring import load_split
from attnsvm.rec.train.trainer import training_loop

MODELS = ("sasrec+", "bsarec", "adamct", "matrrec", "actsr")
ALTERNATIVES = ("matrrec", "convformer", "ssept", "actsr")
#: ``padding_free`` before issue 33 where it differed: AdaMCT padded every window to max_len
PADDING_FREE_BEFORE = {"AdaMCT": False}
PARTS = (
    "batch",
    "embedding",
    "blocks",
    "final layer",
    "forward, rest",
    "loss",
    "backward",
    "optimizer",
    "attack step",
)


def two_softplus_spatial_scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """AC-TSR's spatial scores before issue 33: the order term with two softplus."""
    length = q.shape[2]
    positions = torch.arange(length, device=q.device)
    later = (positions[None, :] > positions[:, None]).to(q.dtype)
    order = self.order_query(q) + self.order_key(k).transpose(-2, -1)
    order_term = -(later * F.softplus(-order) + (1 - later) * F.softplus(order))
    distance = self.distance_query(q) + self.distance_key(k).transpose(-2, -1)
    gap = torch.log((positions[None, :] - positions[:, None]).abs().to(q.dtype) + 1)
    distance_term = -((gap - distance) ** 2) * self.distance_scale**2 / 2
    return (q @ k.transpose(-2, -1) + order_term + distance_term) / math.sqrt(q.shape[-1])


def fft_low_pass(self, x: torch.Tensor, queries: slice = slice(None)) -> torch.Tensor:
    """BSARec's low-pass before issue 33: the official rfft, bins zeroed, irfft."""
    spectrum = torch.fft.rfft(x, dim=1, norm="ortho")
    spectrum[:, self.keep_bins :] = 0
    return torch.fft.irfft(spectrum, n=x.shape[1], dim=1, norm="ortho")[:, queries]


def full_window_perturbed(self, item_seq: torch.Tensor) -> torch.Tensor:
    """AC-TSR's attack forward before issue 33: the whole window, every query of every layer."""
    return self(item_seq, stream="perturbed")[:, -1:]


@contextlib.contextmanager
def patched(owner: object, **values: object):
    """Set class attributes of ``owner`` for the block; restore (or remove) them after."""
    saved = {name: owner.__dict__[name] for name in values if name in owner.__dict__}
    for name, value in values.items():
        setattr(owner, name, value)
    try:
        yield
    finally:
        for name in values:
            if name in saved:
                setattr(owner, name, saved[name])
            else:
                delattr(owner, name)


@contextlib.contextmanager
def before_issue_33(model_class: type):
    """The step as it was before issue 33 (see the module docstring)."""
    values: dict[str, object] = {"trains_last_hidden": False}
    if "last_hidden" in model_class.__dict__:
        values["last_hidden"] = SequentialRecommender.last_hidden
    if model_class.__name__ in PADDING_FREE_BEFORE:
        values["padding_free"] = PADDING_FREE_BEFORE[model_class.__name__]
    with contextlib.ExitStack() as stack:
        stack.enter_context(patched(model_class, **values))
        if model_class is actsr.ACTSR:
            stack.enter_context(patched(model_class, perturbed_last_position=full_window_perturbed))
            scores = two_softplus_spatial_scores
            stack.enter_context(patched(actsr.CalibratedAttention, spatial_scores=scores))
        if model_class is bsarec.BSARec:
            stack.enter_context(patched(bsarec.FrequencyFilter, low_pass=fft_low_pass))
        yield


# every variant of every model reads the same Beauty split: load it once
beauty_split = functools.cache(load_split)


def beauty_loop(name: str) -> TrainingLoop:
    """A training loop of ``name`` in the zoo's Beauty setting, at its first epoch."""
    config = zoo.run_config("beauty", name, "paper", seed=0)
    return training_loop(config, beauty_split(config.data), distributed.init_from_env())


class PartTimer:
    """Forward seconds of the embedding, the layers before the last and the last layer, summed
    over a step's calls (module hooks; off while ``active`` is False)."""

    def __init__(self, model: SequentialRecommender) -> None:
        layers = model.encoder.blocks if hasattr(model, "encoder") else None
        layers = layers if layers is not None else getattr(model, "layers", None)
        layers = list(layers if layers is not None else model.blocks)
        modules = {"embedding": [model.embed], "blocks": layers[:-1], "final layer": layers[-1:]}
        self.seconds: dict[str, float] = defaultdict(float)
        self.active = False
        self.started: dict[int, float] = {}
        for part, members in modules.items():
            for module in members:
                module.register_forward_pre_hook(self._start)
                module.register_forward_hook(functools.partial(self._stop, part))

    def _start(self, module, _inputs) -> None:
        self.started[id(module)] = time.perf_counter()

    def _stop(self, part: str, module, _inputs, _output) -> None:
        if self.active:
            self.seconds[part] += time.perf_counter() - self.started[id(module)]


def profiled_step(loop: TrainingLoop, index, generator, timer: PartTimer) -> dict[str, float]:
    """One step as ``TrainingLoop.train_step`` runs it, timed part by part (ms)."""
    clock, model = time.perf_counter, loop.model
    timer.seconds.clear()
    start = clock()
    batch = make_batch(loop.train_rows, loop.examples, index, model.objective, model.config.max_len)
    step = loop._prepare(batch, generator)
    parts = defaultdict(float, batch=clock() - start)
    model.train()
    loop.optimizer.zero_grad(set_to_none=False)
    timer.active = True
    for rows, width in step.groups:
        inputs, begin = step.inputs[rows][:, -width:], clock()
        hidden = loop.train_model(inputs)
        forward = clock()
        loss = loop._loss_share(step, hidden, rows, width)
        if loop.aux_weights:
            loss = loss + loop._auxiliary_share(step, inputs, hidden, rows, {})
        backward = clock()
        loss.backward()
        parts["forward, rest"] += forward - begin
        parts["loss"] += backward - forward
        parts["backward"] += clock() - backward
    timer.active = False
    begin = clock()
    loop.optimizer.step()
    parts["optimizer"] = clock() - begin
    if loop.attack_optimizer is not None:
        begin = clock()
        model.adversarial_step(
            step.inputs, lambda hidden: loop._loss_share(step, hidden), loop.attack_optimizer
        )
        parts["attack step"] = clock() - begin
    parts.update(timer.seconds)
    parts["forward, rest"] -= sum(timer.seconds.values())
    return {part: 1000 * parts[part] for part in PARTS}


def compare(name: str, steps: int, profile_steps: int) -> dict:
    """Median ms a step before and after issue 33, alternated on the same batches, and each
    variant's median part profile."""
    after = beauty_loop(name)
    model_class = type(after.model)
    with before_issue_33(model_class):
        before = beauty_loop(name)
    generators = {"before": before.begin_epoch(1), "after": after.begin_epoch(1)}
    order = torch.randperm(len(after.examples), generator=torch.Generator().manual_seed(0))
    size = after.config.train.batch_size
    batches = [order[i * size : (i + 1) * size].numpy() for i in range(steps + profile_steps + 2)]
    variants = {"before": (before, lambda: before_issue_33(model_class)), "after": (after, None)}
    times: dict[str, list[float]] = {"before": [], "after": []}
    profiles: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    timers = {variant: PartTimer(loop.model) for variant, (loop, _) in variants.items()}
    with conditions.OtherWork() as other:
        for number, index in enumerate(batches):
            for variant, (loop, switch) in variants.items():
                with switch() if switch else contextlib.nullcontext():
                    if number < steps + 2:
                        start = time.perf_counter()
                        loop.train_step(index, generators[variant])
                        if number >= 2:
                            times[variant].append(1000 * (time.perf_counter() - start))
                    else:
                        profile = profiled_step(loop, index, generators[variant], timers[variant])
                        profiles[variant].append(profile)
    steps_per_epoch = math.ceil(len(after.examples) / size)
    return {
        "model": name,
        "batch": size,
        "steps_per_epoch": steps_per_epoch,
        "ms": {variant: statistics.median(values) for variant, values in times.items()},
        "profile": {
            variant: {part: statistics.median(p[part] for p in runs) for part in PARTS}
            for variant, runs in profiles.items()
        },
        "other_cores": other.cores,
    }


def print_tables(rows: list[dict]) -> None:
    epoch = {
        (row["model"], variant): row["ms"][variant] * row["steps_per_epoch"] / 1000
        for row in rows
        for variant in ("before", "after")
    }
    print(
        "| model | batch | steps/epoch | ms/step before → after | after/before "
        "| s/epoch before → after | epoch / SASRec+'s before → after | other cores busy |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        name, ms = row["model"], row["ms"]
        ratios = [
            epoch[name, variant] / epoch["sasrec+", variant] for variant in ("before", "after")
        ]
        print(
            f"| {name} | {row['batch']} | {row['steps_per_epoch']} | {ms['before']:.0f} → "
            f"{ms['after']:.0f} | {ms['after'] / ms['before']:.2f}x "
            f"| {epoch[name, 'before']:.0f} → {epoch[name, 'after']:.0f} "
            f"| {ratios[0]:.1f}x → {ratios[1]:.1f}x | {row['other_cores']:.1f} |"
        )
    print(
        "\nPer-part profile, median ms of a step (forward parts: module hooks; `forward, "
        "rest`: masks, final norm and whatever the hooks do not cover):\n"
    )
    print(f"| model | variant | {' | '.join(PARTS)} | sum |")
    print(f"|---|---|{'---|' * (len(PARTS) + 1)}")
    for row in rows:
        for variant in ("before", "after"):
            profile = row["profile"][variant]
            cells = " | ".join(f"{profile[part]:.0f}" for part in PARTS)
            print(f"| {row['model']} | {variant} | {cells} | {sum(profile.values()):.0f} |")


def indexed_scan(u, delta, A, B, C, D, scan="sequential"):
    """The alternative: the same recurrence with ``[:, t]`` slices of whole-sequence tensors."""
    decay = torch.exp(delta.unsqueeze(-1) * A)
    drive = (delta * u).unsqueeze(-1) * B.unsqueeze(2)
    state = torch.zeros_like(drive[:, 0])
    outputs = []
    for t in range(u.shape[1]):
        state = decay[:, t] * state + drive[:, t]
        outputs.append(torch.einsum("bdn,bn->bd", state, C[:, t]))
    return torch.stack(outputs, dim=1) + u * D


def step_ms(name: str, steps: int, padding_free: bool, scan: Callable | None = None) -> float:
    """Median ms of the trainer's step for ``name`` in the zoo's Beauty setting (issue 27)."""
    loop = beauty_loop(name)
    model_class = type(loop.model)
    with contextlib.ExitStack() as stack:
        stack.enter_context(patched(model_class, padding_free=padding_free))
        if scan is not None:
            stack.enter_context(patched(matrrec, selective_scan=scan))
        generator = loop.begin_epoch(1)
        order = torch.randperm(len(loop.examples), generator=generator).numpy()
        size = loop.config.train.batch_size
        batches = [order[i * size : (i + 1) * size] for i in range(steps + 2)]
        times = []
        for number, index in enumerate(batches):
            start = time.perf_counter()
            loop.train_step(index, generator)
            if number >= 2:
                times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def alternatives(names: list[str], steps: int) -> None:
    """The issue-27 table: padding cut against the full window; MaTrRec's scan."""
    rows = []
    for name in names:
        cut = step_ms(name, steps, padding_free=True)
        full = step_ms(name, steps, padding_free=False)
        rows.append((name, "padding cut to length groups (the library)", cut, cut))
        rows.append((name, "every row at the full window of 50", full, cut))
        if name == "matrrec":
            indexed = step_ms(name, steps, padding_free=True, scan=indexed_scan)
            rows.append((name, "scan with [:, t] indexing, padding cut", indexed, cut))
            before = step_ms(name, steps, padding_free=False, scan=indexed_scan)
            rows.append((name, "scan with [:, t] indexing, full window (before)", before, cut))
    print(f"torch {torch.__version__}, 1 thread, median of {steps} steps\n")
    print("| model | step | ms | time / the library's |")
    print("|---|---|---|---|")
    for name, variant, ms, library in rows:
        print(f"| {name} | {variant} | {ms:.0f} | {ms / library:.2f}x |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--profile-steps", type=int, default=3)
    parser.add_argument("--models", nargs="+", choices=sorted({*MODELS, *ALTERNATIVES}))
    parser.add_argument("--alternatives", action="store_true", help="the issue-27 table")
    args = parser.parse_args(argv)
    conditions.report()
    torch.set_num_threads(1)
    if args.alternatives:
        alternatives(args.models or list(ALTERNATIVES), args.steps)
        return 0
    names = ["sasrec+", *(n for n in args.models or MODELS if n != "sasrec+")]
    rows = []
    for name in names:
        rows.append(compare(name, args.steps, args.profile_steps))
        ms = rows[-1]["ms"]
        print(
            f"{name}: {ms['before']:.0f} → {ms['after']:.0f} ms a step "
            f"(load {conditions.load():.1f})",
            flush=True,
        )
    print(
        f"\ntorch {torch.__version__}, 1 thread, median of {args.steps} steps, "
        f"load at the end {conditions.load():.1f}\n"
    )
    print_tables(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
