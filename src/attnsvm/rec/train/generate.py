"""Generated pseudo-prior items (BiCAT stage 2, after ASReP): a reverse-trained model extends
every short history backwards in time, and the items go to a synthetic-prefix artefact.

For each user whose context is shorter than ``below``, the model, trained on rows newest first,
reads the context newest first and its top-scoring item (never one the context or the items
generated so far hold) is the item *before* the oldest; that item joins the context and the
next round asks again, until ``items`` rounds or the context reaches ``below``. The items are
written in that order (``attnsvm.rec.data.transforms``: external ids, ``"synthetic": true``),
into a folder that is published whole (``NAME.incomplete`` renamed when complete).

**What the generator reads** (``mode``):

- ``"no_leak"`` (the default): the user's training items only. Nothing the model is later
  validated or tested on can shape a generated item.
- ``"faithful"``: what the official code lets it read, ASReP's ``data_augment``: the user's
  whole sequence, the validation and test items included. Those held-out items then steer which
  items are prepended to the training rows, so validation and test metrics of the fine-tuned
  model are no longer measured on unseen data; this mode exists to reproduce the published
  numbers and to measure what the leak is worth, beside ``"no_leak"``.

Differences from the official code, none of them a switch: the official candidate list is
``range(itemnum)``, which leaves out the last item id and lets the padding id 0 be chosen;
here every real item is a candidate and padding never is.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from attnsvm.rec.config_base import ConfigError
from attnsvm.rec.data.batches import windows
from attnsvm.rec.data.sequences import EvalTask, Sequences
from attnsvm.rec.data.splits import Split
from attnsvm.rec.data.transforms import reverse_rows, write_synthetic_prefix
from attnsvm.rec.models import SequentialRecommender

MODES = ("no_leak", "faithful")


def _append_targets(rows: Sequences, task: EvalTask) -> Sequences:
    """``rows`` (one per user) with each evaluated user's targets appended, in order."""
    position = {int(u): r for r, u in enumerate(rows.users.tolist())}
    extra = np.zeros(len(rows), dtype=np.int64)
    target_rows = np.array([position[int(u)] for u in task.users.tolist()], dtype=np.int64)
    extra[target_rows] = task.targets.lengths
    lengths = rows.lengths + extra
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    items = np.zeros(offsets[-1], dtype=np.int64)
    row = np.repeat(np.arange(len(rows)), rows.lengths)
    items[offsets[row] + np.arange(rows.items.size) - rows.offsets[row]] = rows.items
    owner = np.repeat(target_rows, task.targets.lengths)
    within = np.arange(task.targets.items.size) - np.repeat(
        task.targets.offsets[:-1], task.targets.lengths
    )
    items[offsets[owner] + rows.lengths[owner] + within] = task.targets.items
    return Sequences(offsets, items, rows.users)


def generation_contexts(split: Split, mode: str) -> Sequences:
    """Each user's context, oldest first: training items, plus (``faithful``) the validation
    and test targets."""
    if mode not in MODES:
        raise ConfigError(f"generation mode must be one of {MODES}, got {mode!r}")
    rows = Sequences(split.train.offsets, split.train.items, split.train.users)
    if mode == "faithful":
        rows = _append_targets(_append_targets(rows, split.valid), split.test)
    return rows


def generate_prior_items(
    model: SequentialRecommender,
    contexts: Sequences,
    items: int,
    below: int,
    batch_size: int = 512,
) -> Sequences:
    """Per row of ``contexts`` (oldest first), the generated items in generation order (the
    first one just before the row's oldest item); rows of ``below`` items or more get none.

    Each row's items depend on that row alone (the model scores in eval mode), so the rows are
    generated in batches of rows that want as many rounds (most first, then by length), a round
    scores only the rows still generating, and a padding-free model reads each round's windows
    cut to their longest row: the same items as one round per row at the full window."""
    max_len = model.config.max_len
    reversed_rows = reverse_rows(contexts)
    lengths = contexts.lengths
    wanted = np.minimum(np.maximum(below - lengths, 0), items)
    active = np.flatnonzero(wanted > 0)
    active = active[np.lexsort((lengths[active], -wanted[active]))]
    generated = np.zeros((len(contexts), max(items, 1)), dtype=np.int64)
    model.eval()
    with torch.inference_mode():
        for start in range(0, active.size, batch_size):
            rows = active[start : start + batch_size]
            starts = reversed_rows.offsets[rows]
            history = windows(reversed_rows.items, starts, starts + lengths[rows], max_len)
            seen = torch.zeros(rows.size, model.num_items + 1, dtype=torch.bool)
            counts = lengths[rows]
            row_of = np.repeat(np.arange(rows.size), counts)
            flat = np.repeat(contexts.offsets[rows] - np.cumsum(counts) + counts, counts)
            flat = contexts.items[flat + np.arange(counts.sum())]
            seen[torch.from_numpy(row_of), torch.from_numpy(flat)] = True
            seen[:, 0] = True
            sequence = torch.from_numpy(history)
            remaining = torch.from_numpy(wanted[rows])
            live = torch.arange(rows.size)
            for round_ in range(int(wanted[rows].max())):
                live = live[remaining[live] > round_]
                window = sequence[live]
                if model.padding_free:
                    window = window[:, -max(1, int((window != 0).sum(1).max())) :]
                scores = model.score_last(window).masked_fill(seen[live], float("-inf"))
                best = scores.argmax(1)
                generated[rows[live.numpy()], round_] = best.numpy()
                seen[live, best] = True
                sequence[live] = torch.cat([sequence[live, 1:], best[:, None]], dim=1)
    counts = np.where(wanted > 0, wanted, 0)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    keep = np.arange(generated.shape[1])[None, :] < counts[:, None]
    return Sequences(offsets, generated[keep], contexts.users)


def write_generation(
    model: SequentialRecommender,
    split: Split,
    out: Path,
    *,
    mode: str = "no_leak",
    items: int = 20,
    below: int = 20,
    source: str = "",
) -> Path:
    """Generate for every user of ``split`` and write the artefact into ``out`` (a folder,
    published whole); returns ``out``."""
    from attnsvm.rec.train.checkpoint import RunDirectory

    if items < 1 or below < 1:
        raise ConfigError(f"generation needs items ≥ 1 and below ≥ 1, got {items} and {below}")
    start = time.perf_counter()
    contexts = generation_contexts(split, mode)
    generated = generate_prior_items(model, contexts, items, below)
    folder = RunDirectory.create(out)
    reads = "training items only" if mode == "no_leak" else "training, validation and test items"
    header = {
        "mode": mode,
        "reads": reads,
        "source_run": source,
        "items": items,
        "below": below,
        "users": int((generated.lengths > 0).sum()),
        "generated": int(generated.items.size),
        "seconds": time.perf_counter() - start,
    }
    write_synthetic_prefix(
        folder.work,
        split.user_ids[generated.users],
        generated.offsets,
        split.item_ids[generated.items],
        header,
    )
    return folder.finish()
