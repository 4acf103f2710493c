"""What the every-prefix models (BSARec, AdaMCT, MaTrRec, AC-TSR) cost on ML-1M, measured.

These four train on the last position of every prefix, as their official code does (one
example per training item, each a forward pass over its own window). Per model this script
times the trainer's step at two settings and prints a cost table:

- **official**: what the official code runs for ML-1M: MaTrRec's ``ml.yaml``; for the three
  whose code has no ML-1M setting, the one setting their code has (argparse defaults / Amazon
  configs, window 50), with BSARec's ML-1M α, c, heads and lr from a third-party reproduction;
- **zoo**: ``benchmarks/zoo.py``'s ML-1M setting (window 200 for every model).

Each figure is the median seconds of one full trainer step (batch built, forward, CE at the last
position, backward, AdamW; AC-TSR's attack step included) over ``--steps`` random batches after
one warm-up step, on one thread. Steps an epoch come from the data: RecBole (AdaMCT, MaTrRec,
AC-TSR) and ``attnsvm`` make one example of every prefix; BSARec's ``RecDataset`` only of the
prefixes ending in the last ``max_seq_length`` training items (fewer examples, same step).
CPU-hours a run = CPU s/step × steps/epoch × epochs, at ``--plan-epochs`` (the early-stopping
counts these models reached elsewhere in the zoo: 32–49) and at the official cap. ``--profile``:
the top operators of one step. ``--analyses``: ``gradient_gap`` and ``last_query_rows`` below.
``--write-configs DIR``: the official settings as ``attnsvm train --config`` files (per model and
seed), for ``benchmarks/gpu/prefix_models_ml1m.sh`` on a GPU host.

    .venv/bin/python benchmarks/prefix_models_cost.py --steps 3 --profile
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

import zoo  # benchmarks/ is on the path of a script run from it
from attnsvm.rec.config import RunConfig, save_config
from conditions import load, machine

MODELS = ("bsarec", "adamct", "matrrec", "actsr")
PLAN_EPOCHS = 50
#: BSARec on S3-Beauty, window 50, batch 256: 514 steps an epoch in 7.4 s on an H200 shared by
#: four runs (RESULTS.md, "What the missing ML-1M rows cost"): 14 ms a step.
H200_SHARED_STEP_S = 7.4 / 514


@dataclass(frozen=True)
class Official:
    """A model's official ML-1M setting, or its code's only one (``SOURCES``: where each is)."""

    window: int
    batch_size: int
    lr: float
    epochs: int  # the cap; every one stops early with patience 10
    overrides: dict[str, Any] = field(default_factory=dict)
    examples: str = "every prefix"  # or "last window" (BSARec's RecDataset)


SOURCES = {
    "bsarec": "yehjin-shin/BSARec@34036fd src/utils.py parse_args: max_seq_length 50, batch "
    "256, epochs 200, patience 10 (no ML-1M config or log in the repo); src/dataset.py "
    "RecDataset: prefixes of seq[-(max_len+2):-2] only; ML-1M α 0.3, c 9, 4 heads, lr 5e-4: "
    "third-party Janhutter/BSARec@0653d13 experiments/jobfiles/generate_hparams.py",
    "adamct": "juyongjiang/AdaMCT@0787f24 config/Amazon_Beauty.yaml: MAX_ITEM_LIST_LENGTH 50, "
    "train_batch_size 2048, lr 0.02, epochs 300, stopping_step 10, d 16, 2 layers, 2 heads, "
    "kernel 5; the code has Amazon configs only (no ML-1M)",
    "matrrec": "Unintelligentmumu/MaTrRec@4e63f46 ml.yaml (README: run_recbole.py "
    "--dataset=ml-1m --config_files=ml.yaml): MAX_ITEM_LIST_LENGTH 200, train_batch_size 2048, "
    "lr 1e-3, epochs 300, stopping_step 10, dropout 0.2, 1 layer, d 64, d_state 32, 1 head",
    "actsr": "AIM-SE/AC-TSR@85f8035 config/amazon-beauty.yaml: MAX_ITEM_LIST_LENGTH 50, 3 "
    "layers, 4 heads, inner 128; @182dd1d config/config_t.yaml: batch 256, lr 1e-4, epochs "
    "200, stopping_step 10; the code has no ML-1M config",
}
ADAMCT = dict(zoo.PAPER["adamct"].overrides)  # the zoo's AdaMCT row is the official config
OFFICIAL: dict[str, Official] = {
    "bsarec": Official(50, 256, 5e-4, 200, dict(alpha=0.3, cutoff=9, num_heads=4), "last window"),
    "adamct": Official(50, 2048, 0.02, 300, ADAMCT),
    "matrrec": Official(200, 2048, 1e-3, 300, dict(dropout=0.2, attention_dropout=0.2)),
    "actsr": Official(50, 256, 1e-4, 200),
}


def official_config(name: str, seed: int, root: Path = zoo.ROOT) -> RunConfig:
    """The zoo's ML-1M run of ``name`` with the official code's window, batch, lr, epochs and
    model settings in place of the zoo's."""
    base = zoo.run_config("ml-1m", name, "paper", seed, root)
    setting = OFFICIAL[name]
    model = replace(base.model, overrides={**base.model.overrides, **setting.overrides})
    return replace(
        base,
        model=model,
        data=replace(base.data, max_len=setting.window),
        train=replace(
            base.train, batch_size=setting.batch_size, lr=setting.lr, epochs=setting.epochs
        ),
    )


def example_count(lengths: np.ndarray, window: int, examples: str) -> int:
    """Training examples an epoch from the training sequences' ``lengths``."""
    if examples == "last window":  # BSARec: seq[-(max_len + 2):-2], each prefix incl. length 1
        return int(np.minimum(lengths, window).sum())
    return int(np.maximum(lengths - 1, 0).sum())  # every prefix predicting its next item


def step_seconds(config: RunConfig, split, steps: int, profile: bool) -> tuple[float, float, str]:
    """Median wall and CPU seconds of the trainer's step over ``steps`` random batches after
    one warm-up; with ``profile``, the top operators of one more step. On a loaded machine the
    wall time includes waiting for a core; the CPU time does not."""
    from attnsvm.rec.train import distributed, training_loop

    loop = training_loop(config, split, distributed.init_from_env())
    generator = loop.begin_epoch(1)
    order = torch.randperm(len(loop.examples), generator=generator).numpy()
    size = config.train.batch_size
    batches = [order[i * size : (i + 1) * size] for i in range(steps + 2)]
    loop.train_step(batches[0], generator)  # warm-up: allocator, first-call kernel choices
    walls, cpus = [], []
    for index in batches[1 : steps + 1]:
        start, cpu = time.perf_counter(), time.process_time()
        loop.train_step(index, generator)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    top = ""
    if profile:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            loop.train_step(batches[-1], generator)
        top = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)
    return statistics.median(walls), statistics.median(cpus), top


def cost_rows(names, steps: int, profile: bool, root: Path, batch_cap: int) -> list[dict]:
    """One row per model and setting; a batch over ``batch_cap`` is timed at ``batch_cap`` rows
    and scaled by batch / cap (all of the step but AdamW's update is per example; MaTrRec's scan
    at 2048 × 200 would need over 18 GB here)."""
    from attnsvm.rec.train.scoring import load_split

    split = load_split(official_config(names[0], 0, root).data)  # windows are cut per batch
    rows = []
    for name in names:
        zoo_config = zoo.run_config("ml-1m", name, "paper", 0, root)
        for setting_name, config in (
            ("official", official_config(name, 0, root)),
            ("zoo", zoo_config),
        ):
            lengths, window = split.train.lengths, config.data.max_len
            batch = config.train.batch_size
            timed = replace(config, train=replace(config.train, batch_size=min(batch, batch_cap)))
            before = load()
            seconds, cpu, top = step_seconds(timed, split, steps, profile)
            after, scale = load(), batch / timed.train.batch_size
            count = example_count(lengths, window, "every prefix")  # what attnsvm trains
            row = {
                "model": name,
                "setting": setting_name,
                "window": window,
                "batch": batch,
                "timed_batch": timed.train.batch_size,
                "lr": config.train.lr,
                "cap": config.train.epochs,
                "examples": count,
                "official_examples": example_count(lengths, window, OFFICIAL[name].examples)
                if setting_name == "official"
                else None,
                "steps": -(-count // batch),
                "s_step": seconds * scale,
                "cpu_step": cpu * scale,
                "load": (before, after),
            }
            rows.append(row)
            print(
                f"{name} {setting_name}: {seconds:.3f} s/step wall, {cpu:.3f} s CPU at batch "
                f"{timed.train.batch_size} (load {before:.1f}→{after:.1f})",
                flush=True,
            )
            if top:
                print(f"\n#### {name}, {setting_name} setting\n\n```\n{top}\n```\n", flush=True)
    return rows


def table(rows: list[dict], plan_epochs: int) -> str:
    lines = [
        "| model | setting | window | batch | lr | examples/epoch (official code) "
        "| examples/epoch (attnsvm) | steps/epoch | s/step wall / CPU (1 thread) | CPU-h/epoch "
        f"| CPU-h/run at {plan_epochs} epochs | CPU-h at the cap (epochs) "
        f"| GPU-h/run at {plan_epochs} epochs (estimate) | load 1-min before→after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        epoch_h = r["cpu_step"] * r["steps"] / 3600  # CPU time: what the run needs of a core
        gpu = (
            f"{H200_SHARED_STEP_S * r['steps'] * plan_epochs / 3600:.2f}"
            if r["model"] == "bsarec" and r["window"] == 50 and r["batch"] == 256
            else "—"
        )
        official = "—" if r["official_examples"] is None else f"{r['official_examples']:,}"
        timed = "" if r["timed_batch"] == r["batch"] else f" (timed at {r['timed_batch']})"
        lines.append(
            f"| {r['model']} | {r['setting']} | {r['window']} | {r['batch']}{timed} | {r['lr']:g} "
            f"| {official} | {r['examples']:,} | {r['steps']:,} | {r['s_step']:.3f} / "
            f"{r['cpu_step']:.3f} | {epoch_h:.2f} "
            f"| {epoch_h * plan_epochs:.1f} | {epoch_h * r['cap']:.0f} ({r['cap']}) | {gpu} "
            f"| {r['load'][0]:.1f}→{r['load'][1]:.1f} |"
        )
    sources = [f"- {name}: {SOURCES[name]}" for name in dict.fromkeys(r["model"] for r in rows)]
    return "\n".join([*lines, "", "Official settings, with sources:", *sources])


def gradient_gap(name: str, split, length: int, train_mode: bool, seed: int = 0) -> float:
    """``|g_prefix − g_all| / |g_prefix|`` on a user's first ``length + 1`` training items:
    ``Σ_t CE(model(s[:t])[-1], s[t])`` with each prefix its own row (the official batches) against
    ``Σ_t CE(model(s[:n])[t - 1], s[t])`` in one all-position row. Equal functions of the weights
    for a causal, padding-free model in eval mode; in training mode each prefix row draws its own
    dropout masks, the all-position row one draw for all its targets."""
    from attnsvm.rec.train.scoring import build

    config = official_config(name, seed)
    config = replace(config, data=replace(config.data, max_len=length))
    lengths = split.train.lengths
    row = int(np.flatnonzero(lengths > length)[0])
    start = split.train.offsets[row]
    sequence = torch.from_numpy(split.train.items[start : start + length + 1].astype(np.int64))
    targets = sequence[1:]
    prefixes = torch.zeros(length, length, dtype=torch.long)
    for t in range(1, length + 1):
        prefixes[t - 1, length - t :] = sequence[:t]
    gradients = []
    for per_prefix in (True, False):
        torch.manual_seed(seed)
        model = build(config, split.num_items, split.num_users)
        model.train(train_mode)
        hidden = model(prefixes)[:, -1] if per_prefix else model(sequence[None, :-1])[0]
        logits = hidden @ model.output_embedding().T
        torch.nn.functional.cross_entropy(logits, targets, reduction="sum").backward()
        grads = [p.grad.flatten() for p in model.parameters() if p.grad is not None]
        gradients.append(torch.cat(grads))
    return float((gradients[0] - gradients[1]).norm() / gradients[0].norm())


def last_query_rows(split, batches: int, batch_size: int) -> list[str]:
    """Full forward against the model's ``last_hidden`` (the final layer's last query alone,
    what training through ``training_forward`` computes): the largest difference of the last hidden
    state in eval mode and the median CPU s of forward + CE + backward (training mode)."""
    from attnsvm.rec.data.batches import make_batch, make_examples
    from attnsvm.rec.train.scoring import build

    examples = make_examples(split.train, "last")
    rows = [
        "| model | window | batch | full fwd+bwd CPU s | last query CPU s | ratio "
        "| max abs diff of the last hidden state (eval) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, window in (("bsarec", 50), ("bsarec", 200), ("matrrec", 200)):
        config = official_config(name, 0)
        config = replace(config, data=replace(config.data, max_len=window))
        model = build(config, split.num_items, split.num_users)
        order = np.random.default_rng(0).permutation(len(examples))
        index = [order[i * batch_size : (i + 1) * batch_size] for i in range(batches + 1)]
        data = [make_batch(split.train, examples, i, "last", window) for i in index]
        model.eval()
        with torch.no_grad():
            gap = max(
                float((model(b.inputs)[:, -1] - model.last_hidden(b.inputs)).abs().max())
                for b in data[:2]
            )
        model.train()
        seconds = {}
        for variant, hidden_of in (
            ("full", lambda seq, model=model: model(seq)[:, -1]),
            ("last query", lambda seq, model=model: model.last_hidden(seq)),
        ):
            times = []
            for number, batch in enumerate(data):
                start = time.process_time()
                logits = hidden_of(batch.inputs) @ model.output_embedding().T
                torch.nn.functional.cross_entropy(logits, batch.targets).backward()
                model.zero_grad()
                if number:  # the first is a warm-up
                    times.append(time.process_time() - start)
            seconds[variant] = statistics.median(times)
        rows.append(
            f"| {name} | {window} | {batch_size} | {seconds['full']:.3f} "
            f"| {seconds['last query']:.3f} | {seconds['full'] / seconds['last query']:.2f}x "
            f"| {gap:.1e} |"
        )
    return rows


def write_configs(out: Path, seeds: list[int], root: Path) -> None:
    """One ``attnsvm train --config`` file per model and seed: the official ML-1M settings."""
    out.mkdir(parents=True, exist_ok=True)
    for name in MODELS:
        for seed in seeds:
            config = official_config(name, seed, root)
            # full-CE logits all at once: memory only (a GPU has it), the same loss
            config = replace(config, loss=replace(config.loss, ce_chunk_size=None))
            save_config(config, out / f"{name}-official-seed{seed}.json")
            print(out / f"{name}-official-seed{seed}.json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up")
    parser.add_argument("--batch-cap", type=int, default=256, help="largest batch timed")
    parser.add_argument("--plan-epochs", type=int, default=PLAN_EPOCHS)
    parser.add_argument("--profile", action="store_true", help="top operators of one step")
    parser.add_argument("--root", type=Path, default=zoo.ROOT, help="folder of the raw datasets")
    parser.add_argument("--write-configs", type=Path, help="write the official configs here")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--analyses", action="store_true", help="gradient check and last-query step, then exit"
    )
    args = parser.parse_args(argv)
    if args.write_configs:
        write_configs(args.write_configs, args.seeds, args.root.resolve())
        return 0
    torch.set_num_threads(1)
    if args.analyses:
        from attnsvm.rec.train.scoring import load_split

        split = load_split(official_config("matrrec", 0, args.root).data)
        for name in ("matrrec", "actsr"):
            for train_mode in (False, True):
                gap = gradient_gap(name, split, 30, train_mode)
                mode = "train (dropout)" if train_mode else "eval (no dropout)"
                print(f"{name}, {mode}: |g_prefix − g_all| / |g_prefix| = {gap:.2e}", flush=True)
        print("\n".join(last_query_rows(split, args.steps, 256)))
        return 0
    info = machine()
    print(
        f"CPU {info['cpu']} ({', '.join(info['flags'])}), {info['cores']} cores, torch "
        f"{torch.__version__} ({info['torch_cpu_capability']}), 1 thread; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    rows = cost_rows(args.models, args.steps, args.profile, args.root, args.batch_cap)
    print()
    print(table(rows, args.plan_epochs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
