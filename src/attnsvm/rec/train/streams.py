"""Training streams: what a model's auxiliary terms read beyond the batch's windows.

A model names the streams its active auxiliary terms need in ``auxiliary_streams()``; the
training loop builds them once per run (``TrainingStreams``) and, at every step, the batch's
rows of each (``batch``), which reach ``auxiliary_losses`` as keywords. They never reach
``forward``, scoring or evaluation, and a model that names none gets nothing (the plain run).

- ``"source"`` (B, max_len + 1): each example's window *before* the data transforms
  (``attnsvm.rec.data.transforms``), with the example's final target as its last column: the
  last ``max_len + 1`` items of the untransformed row up to the example's end, the two rows
  aligned at their last items. Without transforms it is the example's inputs and target; with
  ``data.reverse_train`` the row in chronological order (BiCAT's forward constraint); with a
  synthetic prefix the row without it (BiCAT's original stream).
- ``"partner"`` (B, max_len + 1): the inputs and target of a neighbouring example, one of the
  model config's ``pair_neighbours`` nearest by the items of their windows
  (``attnsvm.rec.data.pairs``), drawn uniformly per step from (seed, step), so a resumed run
  draws the same partners.

Within a step the trainer may cut a padding-free model's batch into length groups, each to
its own width W; ``for_group`` cuts ``source`` to its last W + 1 columns (its real items never
outnumber the window's by more than the target) and leaves ``partner`` whole.
"""

from __future__ import annotations

import numpy as np
import torch

from attnsvm.rec.config_base import ConfigError
from attnsvm.rec.data.batches import Examples, windows
from attnsvm.rec.data.pairs import nearest_examples
from attnsvm.rec.data.sequences import Sequences

STREAMS = ("source", "partner")


class TrainingStreams:
    """The streams a model's auxiliary terms read, for the examples of one run."""

    def __init__(
        self,
        names: tuple[str, ...],
        source_rows: Sequences,
        train_rows: Sequences,
        examples: Examples,
        max_len: int,
        *,
        num_items: int = 0,
        neighbours: int = 0,
        seed: int = 0,
    ) -> None:
        unknown = sorted(set(names) - set(STREAMS))
        if unknown:
            raise ConfigError(f"unknown training stream(s) {unknown} (known: {STREAMS})")
        if len(source_rows) != len(train_rows):
            raise ValueError("the data transforms must keep one training row per row")
        self.names, self.seed, self.max_len = tuple(names), seed, max_len
        self.source_rows, self.train_rows, self.examples = source_rows, train_rows, examples
        self.partners = None
        if "partner" in names:
            self.partners = nearest_examples(train_rows, examples, max_len, num_items, neighbours)

    @classmethod
    def for_model(
        cls, model, source_rows: Sequences, train_rows: Sequences, examples: Examples, seed: int
    ) -> TrainingStreams:
        names, config = tuple(model.auxiliary_streams()), model.config
        if "partner" in names and not hasattr(config, "pair_neighbours"):
            raise ConfigError(
                f"{type(model).__name__} reads the partner stream, so its config needs "
                "pair_neighbours, the number of neighbours a partner is drawn from"
            )
        return cls(
            names,
            source_rows,
            train_rows,
            examples,
            config.max_len,
            num_items=model.num_items,
            neighbours=getattr(config, "pair_neighbours", 0),
            seed=seed,
        )

    def _window(self, rows: Sequences, row: np.ndarray, end: np.ndarray) -> torch.Tensor:
        """Left-padded (B, max_len + 1): ``rows.row(r)[:end]``'s last items, end exclusive."""
        starts = rows.offsets[row]
        return torch.from_numpy(windows(rows.items, starts, starts + end, self.max_len + 1))

    def batch(self, index: np.ndarray, step: int) -> dict[str, torch.Tensor]:
        """Each stream's rows for the examples ``index`` of a global batch, at optimiser step
        ``step``."""
        out: dict[str, torch.Tensor] = {}
        examples = self.examples
        row, end = examples.rows[index], examples.ends[index]
        if "source" in self.names:
            # the same distance from the row's end in the row before the transforms
            shift = self.train_rows.lengths[row] - self.source_rows.lengths[row]
            out["source"] = self._window(self.source_rows, row, np.maximum(end + 1 - shift, 0))
        if self.partners is not None:
            rng = np.random.default_rng([self.seed, step, 7])
            choice = rng.integers(self.partners.shape[1], size=index.size)
            partner = self.partners[index, choice]
            partner_row = examples.rows[partner]
            out["partner"] = self._window(self.train_rows, partner_row, examples.ends[partner] + 1)
        return out

    @staticmethod
    def for_group(streams: dict[str, torch.Tensor], rows, width: int) -> dict[str, torch.Tensor]:
        """The streams of one length group: ``rows`` of the batch, ``source`` cut to ``width +
        1`` columns."""
        out = {name: values[rows] for name, values in streams.items()}
        if "source" in out:
            out["source"] = out["source"][:, -(width + 1) :]
        return out
