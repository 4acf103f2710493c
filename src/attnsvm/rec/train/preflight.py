"""A run's config checked against its data and its machine, before anything large is allocated.

A value can pass every range check and still be impossible here: ``eval.ks`` beyond the
catalogue, or ``data.max_len = 10⁹``, which asks torch for a positional table of 10⁹ rows and
fails deep inside (or swaps the machine to a halt). ``check_run_fits`` refuses such a run with a
``ConfigError`` naming the settings, from:

- the model built on torch's meta device (shapes, no storage): its exact parameter count, kept
  four times over in training (weights, gradients, AdamW's two moments);
- a training step's sampled negatives (``train.batch_size`` × window × ``loss.num_negatives``
  int64 ids), an evaluation batch's window ids and its scores over the whole catalogue.

These are lower bounds of what the run holds at once (activations are left out), compared with
the memory of the device it trains on, so a run that fits is never refused.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from attnsvm.rec.config import ConfigError, RunConfig
from attnsvm.rec.data.splits import Split
from attnsvm.rec.train.scoring import build

_FLOAT, _INT64 = 4, 8  # bytes


def device_memory(device: torch.device) -> int:
    """Bytes of memory of ``device`` (the machine's RAM for the CPU)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _gigabytes(size: float) -> str:
    return f"{size / 2**30:,.1f} GiB"


def check_cutoffs(config: RunConfig, catalogue: int) -> None:
    """A ``ConfigError`` if the run's cut-offs (``eval.ks``, ``eval.sampled_negatives``) exceed
    its catalogue of ``catalogue`` items: every run checks them, a baseline's too."""
    if max(config.eval.ks) > catalogue:
        raise ConfigError(
            f"eval.ks cut-off {max(config.eval.ks)} exceeds the catalogue of {catalogue} items"
        )
    sampled = config.eval.sampled_negatives
    if sampled is not None and sampled >= catalogue:
        raise ConfigError(
            f"eval.sampled_negatives = {sampled} leaves no item out of the catalogue of "
            f"{catalogue}; it must be below {catalogue}"
        )


def check_run_fits(config: RunConfig, split: Split, device: torch.device) -> None:
    """A ``ConfigError`` if the run's cut-offs exceed its catalogue or what it would hold at
    once exceeds ``device``'s memory."""
    catalogue = split.num_items
    check_cutoffs(config, catalogue)
    with torch.device("meta"):  # shapes only: nothing is allocated, whatever the sizes
        model = build(config, catalogue, split.num_users)
    window = model.config.max_len
    lengths = np.diff(split.train.offsets)
    step_window = min(window, int(lengths.max()) if lengths.size else 1)
    parameters = sum(p.numel() * p.element_size() for p in model.parameters())
    largest = max(model.named_parameters(), key=lambda named: named[1].numel())
    loss = config.resolved_loss()
    # per position; a shared set (loss.negatives) is num_negatives ids a step, nothing to count
    negatives = loss.num_negatives if loss.sampled and loss.negatives == "per_position" else 0
    eval_rows = min(config.eval.batch_size, max(len(split.valid), len(split.test), 1))
    needs = {
        f"{parameters // _FLOAT:,} parameters (the largest {largest[0]}, "
        f"{' × '.join(map(str, largest[1].shape))}) with their gradients and AdamW state": (
            4 * parameters
        ),
        f"train.batch_size × window {step_window} × loss.num_negatives = "
        f"{config.train.batch_size} × {step_window} × {negatives} negative ids": (
            config.train.batch_size * step_window * negatives * _INT64
        ),
        f"eval.batch_size × data.max_len = {eval_rows} × {window} window ids": (
            eval_rows * window * _INT64
        ),
        f"eval.batch_size × catalogue = {eval_rows} × {catalogue + 1} scores": (
            eval_rows * (catalogue + 1) * _FLOAT
        ),
    }
    total, available = sum(needs.values()), device_memory(device)
    if total > available:
        what, size = max(needs.items(), key=lambda item: item[1])
        raise ConfigError(
            f"the run needs at least {_gigabytes(total)} of memory and the {device.type} has "
            f"{_gigabytes(available)}; the most goes to {what} ({_gigabytes(size)}): lower "
            "those settings (data.max_len, model.hidden_size, train.batch_size, "
            "loss.num_negatives, eval.batch_size)"
        )
