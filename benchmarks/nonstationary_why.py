"""Why the Non-Stationary transformer loses to its own plain variant: its test LogLoss broken
down by the length of the history it is scored from, on the campaign's runs.

The reading under test: with the all-position (``causal``) objective every position's
statistics (μ_t, σ_t, τ_t, Δ_t) are prefix statistics, so a short history is normalised by a
mean and spread of a handful of tokens; if stationarisation is what costs, the loss should be
concentrated where the histories are short. A gap that is flat over lengths points elsewhere:
what the normalisation removes from every token (the history's mean, and with it the user's
rating level, which the ``rating_input`` features carry), or the slower learning the campaign's
patience-20 cells test. The columns "user mean" and "item mean" are how much of each bucket the
user's mean past rating, or the item's mean training rating, explains alone (a logistic
regression on it, fitted on the validation events).

    python benchmarks/nonstationary_why.py --work runs/campaign --patience 5 20

Reads ``WORK/runs/ml-100k/nonstationary-p{P}/{ns,plain}/seed{N}/run`` (the campaign's
``nst-vs-plain-*`` arms keep their best weights there) and prints, per patience, the events,
each variant's LogLoss (mean over the seeds both finished) and the difference per bucket.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from attnsvm.rec.config import load_config
from attnsvm.rec.data.datasets import load_dataset
from attnsvm.rec.eval.pointwise import labelled_events
from attnsvm.rec.train.checkpoint import WEIGHTS, load_weights
from attnsvm.rec.train.pointwise import score_events
from attnsvm.rec.train.scoring import build, load_split

BUCKETS = ((1, 9), (10, 29), (30, 99), (100, 199), (200, 10**9))  # history lengths, inclusive


def history_means(history) -> np.ndarray:
    """Each row's mean past rating (the global mean of the rows for an empty history)."""
    lengths = np.diff(history.offsets)
    sums = np.add.reduceat(history.ratings, history.offsets[:-1]) if history.ratings.size else 0
    sums = np.where(lengths > 0, sums, 0.0)
    means = np.divide(sums, lengths, out=np.zeros(len(lengths)), where=lengths > 0)
    return np.where(lengths > 0, means, history.ratings.mean())


def baseline_losses(run: Path) -> dict[str, np.ndarray]:
    """Per test event, the log-loss of two one-feature logistic regressions fitted by maximum
    likelihood on the validation events (which precede the test window): on the user's mean
    past rating ("user mean") and on the item's mean training rating, shrunk towards the
    global mean by 10 pseudo-ratings ("item mean")."""
    from scipy.optimize import minimize

    config = load_config(run / "config.json")
    split = load_split(config.data)
    data = config.data
    full = load_dataset(data.dataset, root=data.root, layout=data.layout()).to_sequences()
    threshold = float(config.model.overrides.get("like_threshold", 4.0))
    train = split.train
    counts = np.bincount(train.items, minlength=split.num_items + 1)
    sums = np.bincount(train.items, weights=train.ratings, minlength=split.num_items + 1)
    item_means = (sums + 10 * train.ratings.mean()) / (counts + 10)

    def features(task):
        events = labelled_events(full, task, threshold)
        return {
            "user mean": history_means(task.history)[events.rows],
            "item mean": item_means[events.items],
        }, events.labels.astype(np.float64)

    def fit(x, y):
        def loss(params):
            z = params[0] + params[1] * x
            return float(np.mean(np.logaddexp(0.0, z) - y * z))

        return minimize(loss, np.zeros(2), method="Nelder-Mead").x

    valid, valid_labels = features(split.valid)
    test, labels = features(split.test)
    out = {}
    for name in valid:
        a, b = fit(valid[name], valid_labels)
        z = a + b * test[name]
        out[name] = np.logaddexp(0.0, z) - labels * z
    return out


def per_event_loss(run: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(history length, log-loss)`` of every test event of the pointwise run in ``run``."""
    config = load_config(run / "config.json")
    split = load_split(config.data)
    model = build(config, split.num_items, split.num_users)
    load_weights(model, run / WEIGHTS)
    threshold = float(model.config.like_threshold)
    data = config.data
    full = load_dataset(data.dataset, root=data.root, layout=data.layout()).to_sequences()
    events = labelled_events(full, split.test, threshold)
    logits = score_events(model, split.test, events, config.eval.batch_size)
    labels = events.labels.astype(np.float64)
    losses = np.logaddexp(0.0, logits) - labels * logits
    return split.test.history.lengths[events.rows], losses


def table(work: Path, patience: int, dataset: str = "ml-100k") -> str:
    folder = work / "runs" / dataset / f"nonstationary-p{patience}"
    seeds = sorted(
        int(p.parent.name.removeprefix("seed"))
        for p in (folder / "ns").glob("seed*/run")
        if (p / "pointwise.json").is_file()
        and (folder / "plain" / p.parent.name / "run" / "pointwise.json").is_file()
    )
    if not seeds:
        return f"patience {patience}: no seed with both variants finished in {folder}"
    losses = {}
    for variant in ("ns", "plain"):
        runs = [per_event_loss(folder / variant / f"seed{s}" / "run") for s in seeds]
        lengths = runs[0][0]
        losses[variant] = np.mean([loss for _, loss in runs], axis=0)
    losses.update(baseline_losses(folder / "plain" / f"seed{seeds[0]}" / "run"))
    lines = [
        f"{dataset}, patience {patience}, seeds {seeds} (per-event losses averaged over seeds):",
        "",
        "| history length | test events | ns LogLoss | plain LogLoss | ns − plain | share of "
        "the total gap | user-mean LogLoss | item-mean LogLoss |",
        "|---|---|---|---|---|---|---|---|",
    ]
    gap = float(np.sum(losses["ns"] - losses["plain"]))
    for low, high in (*BUCKETS, (1, 10**9)):
        mask = (lengths >= low) & (lengths <= high)
        if not mask.any():
            continue
        ns, plain = losses["ns"][mask].mean(), losses["plain"][mask].mean()
        share = float(np.sum(losses["ns"][mask] - losses["plain"][mask])) / gap if gap else 0.0
        name = "all" if (low, high) == (1, 10**9) else f"{low}–{high}" if high < 10**9 else "200+"
        lines.append(
            f"| {name} | {int(mask.sum())} | {ns:.4f} | {plain:.4f} | {ns - plain:+.4f} "
            f"| {share:.0%} | {losses['user mean'][mask].mean():.4f} "
            f"| {losses['item mean'][mask].mean():.4f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("runs/campaign"))
    parser.add_argument("--patience", type=int, nargs="+", default=[5, 20])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for patience in args.patience:
        print(table(args.work, patience))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
