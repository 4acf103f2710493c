"""The state of one run in progress and its optimiser step.

``TrainingLoop`` holds everything a resume must restore (weights, optimisers, schedule, RNG,
counters, history) and runs one epoch: shuffle the objective's examples (``data/batches.py``), one
optimiser step per global batch, then rank the validation users.

One step: ``_prepare`` turns a batch into what the loss needs on the device (the model's cloze
masking, or under ``"last"`` its ``scoring_input``; negatives, the flat index of each target, the
length groups), then the closure sums, per length group and within ``model.training_step()``,
the main loss (``LossConfig.compute``) and the **auxiliary losses** as shares of the global mean,
so the gradient is the same whatever the number of groups or processes.

Auxiliary losses: weighted terms, a model's own (``auxiliary_weights()``, ``auxiliary_losses``)
and ``loss.l2_emb`` (``½‖E‖²`` on the item table, the official SASRec's). A term of weight 0 is
never computed; every other's unweighted epoch mean is logged under ``aux`` in ``log.jsonl``; the
terms in ``auxiliary_streams()`` also get those streams' rows (``streams.py``). Training rows are
read after the data transforms (``data/transforms.py``).

Reproducibility: each epoch re-seeds two streams from (seed, epoch) — the data/negative/mask
generator and torch's global RNG (dropout) — so an epoch's randomness does not depend on what ran
before it and a resumed run replays the same epochs exactly.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from rich.progress import Progress

from attnsvm.errors import ExpectedFailure
from attnsvm.rec.config import ConfigError, RunConfig
from attnsvm.rec.data.batches import Batch, Examples, make_batch, make_examples
from attnsvm.rec.data.samplers import avoid_row_items, log_q, negative_sampler
from attnsvm.rec.data.splits import Split
from attnsvm.rec.data.transforms import training_rows
from attnsvm.rec.models import SequentialRecommender
from attnsvm.rec.nn.embedding import sparse_row_gradients
from attnsvm.rec.train import distributed
from attnsvm.rec.train.optim import OPTIMIZERS, adamw, warmup
from attnsvm.rec.train.scoring import (
    autocast,
    check_inputs_available,
    evaluate_model,
    ranking_progress,
    validation_task,
)
from attnsvm.rec.train.streams import TrainingStreams


class TrainingError(ExpectedFailure, RuntimeError):
    """Training cannot go on: the loss diverged (NaN or infinite)."""


def epoch_seed(seed: int, epoch: int, stream: int) -> int:
    """An independent 63-bit seed per (run seed, epoch, stream)."""
    return int(np.random.SeedSequence([seed, epoch, stream]).generate_state(2, np.uint64)[0] >> 1)


@dataclass
class StepInputs:
    """One batch's share of this process, on the device, ready for the loss."""

    inputs: torch.Tensor  # (B, L) after any cloze masking
    targets: torch.Tensor  # (B, L) or (B,)
    mask: torch.Tensor  # which targets exist (device), same shape as targets
    host_mask: torch.Tensor  # the same on the host, so counts never wait on the device
    total: int  # targets in the global batch: the mean's denominator
    negatives: torch.Tensor | None
    flat: torch.Tensor  # index of each target position into the per-position negatives
    extras: dict[str, torch.Tensor | None]  # users, timestamps, ratings of the windows
    groups: list[tuple[torch.Tensor | slice, int]]  # (rows, width) length groups
    streams: dict[str, torch.Tensor] = field(default_factory=dict)  # the model's training streams
    log_q: torch.Tensor | None = None  # the sampled loss's log-q correction for this step


class TrainingLoop:
    """State of one run in progress (kept in one place so resume can save and restore it)."""

    def __init__(
        self,
        config: RunConfig,
        split: Split,
        model: SequentialRecommender,
        context: distributed.Context,
    ) -> None:
        self.config, self.split, self.context = config, split, context
        check_inputs_available(model, split, config.data.dataset)
        self.model = model.to(context.device)
        self.loss = config.resolved_loss()
        self.train_rows = training_rows(split, config.data)
        self.examples: Examples = make_examples(self.train_rows, model.objective)
        self.popularity = np.bincount(split.train.items, minlength=split.num_items + 1)
        self.log_q = log_q(self.loss.sampler, self.popularity) if self.loss.sampled else None
        self.sampler = None  # this epoch's negative sampler, re-seeded per epoch
        self.aux_weights = {k: w for k, w in model.auxiliary_weights().items() if w != 0}
        self.streams = TrainingStreams.for_model(
            model, split.train, self.train_rows, self.examples, config.train.seed
        )
        if self.loss.l2_emb:
            if not model.item_tables():
                raise ConfigError(
                    f"loss.l2_emb penalises the item table and {type(model).__name__} has none "
                    "(its items are built from their features); set loss.l2_emb = 0"
                )
            self.aux_weights["l2_emb"] = self.loss.l2_emb
        train = config.train
        # a min-max model trains its attack parameters in its own ascent step, nothing else does
        attack = model.attack_parameters()
        attacked = {id(p) for p in attack}
        trained = [p for p in model.parameters() if id(p) not in attacked]
        # a large catalogue's step is bound by passes over its item tables: sparse row gradients
        large = not train.compile and bool(sparse_row_gradients(model, split.num_items))
        self.optimizer = OPTIMIZERS[train.optimizer](trained, train, fused=large)
        if attack and context.distributed:
            alone = "'s adversarial step is single-process only; run it without torchrun"
            raise ConfigError(type(model).__name__ + alone)
        self.attack_optimizer = adamw(attack, train) if attack else None
        self.scheduler = warmup(self.optimizer, train.warmup_steps)
        forward = model.training_forward(self.aux_weights.keys() - {"l2_emb"})
        self.train_model = _compiled(forward) if train.compile else forward
        # all validation users, or a sample where the config or the catalogue's size says so
        valid = validation_task(split.valid, config.eval, split.num_items, config.train.seed)
        self.valid_task, self.valid_note = valid
        self.epoch = self.step = self.best_epoch = self.bad_epochs = 0
        self.best = -math.inf
        self.history: list[dict[str, Any]] = []
        self.aux_sums: dict[str, float] = {}

    # -- resume state ---------------------------------------------------------------------

    COUNTERS = ("epoch", "step", "best", "best_epoch", "bad_epochs", "history")

    def state(self) -> dict[str, Any]:
        attack = self.attack_optimizer
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "attack_optimizer": attack.state_dict() if attack else None,
            "scheduler": self.scheduler.state_dict(),
            "torch_rng": torch.get_rng_state(),
            **{name: getattr(self, name) for name in self.COUNTERS},
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.attack_optimizer is not None:
            self.attack_optimizer.load_state_dict(state["attack_optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        for name in self.COUNTERS:
            setattr(self, name, state[name])

    # -- one optimiser step ---------------------------------------------------------------

    def _prepare(self, batch: Batch, generator: torch.Generator) -> StepInputs:
        inputs, targets = batch.inputs, batch.targets
        if self.model.objective == "cloze":
            inputs, targets = self.model.mask_items(inputs, generator=generator)
        elif self.model.objective == "last":
            # trained on what it is scored on: the last position of its scoring input (a model
            # may append a token there, as SMM its mask token; identity for the others)
            inputs = self.model.scoring_input(inputs)
        per_position = targets.ndim == 2
        has_target = targets != 0 if per_position else torch.ones_like(targets, dtype=torch.bool)
        if per_position and self.loss.last_targets is not None:
            has_target[:, : -self.loss.last_targets] = False
        total = int(has_target.sum())
        negatives, step_log_q = None, self.log_q
        positives = targets[has_target] if per_position else targets
        if self.sampler is not None and self.loss.negatives != "per_position":
            negatives, step_log_q = self.loss.shared_negatives(self.sampler, positives, self.log_q)
        elif self.sampler is not None:
            negatives = self.sampler.sample(positives, self.loss.num_negatives)
            if self.loss.negatives_avoid_row:
                # the row's items before any cloze masking: its inputs and its targets
                row_items = torch.cat([batch.inputs, batch.targets.reshape(len(inputs), -1)], 1)
                rows = torch.nonzero(has_target)[:, 0] if per_position else torch.arange(total)
                negatives = avoid_row_items(negatives, rows.numpy(), row_items, self.sampler)
        owned = distributed.shard(len(inputs), self.context)
        before = int(has_target[: owned.start].sum())
        host_mask = has_target[owned]
        count = int(host_mask.sum())
        device = self.context.device
        mask = host_mask.to(device)
        if negatives is not None:  # per position (2-D): this shard's rows; shared: all
            negatives = negatives[before : before + count] if negatives.ndim == 2 else negatives
            negatives = negatives.to(device)
        columns = {"users": batch.users, "timestamps": batch.times, "ratings": batch.ratings}
        extras = {k: None if v is None else v[owned].to(device) for k, v in columns.items()}
        return StepInputs(
            inputs[owned].to(device),
            targets[owned].to(device),
            mask,
            host_mask,
            total,
            negatives,
            torch.cumsum(mask.reshape(-1), 0).view_as(mask) - 1,
            extras,
            self._length_groups(inputs[owned]),
            log_q=None if step_log_q is None else step_log_q.to(device),
        )

    def _loss_share(
        self, step: StepInputs, hidden: torch.Tensor, rows=slice(None), width: int | None = None
    ) -> torch.Tensor:
        """The main loss of ``inputs[rows][:, -width:]`` as its share of the batch mean."""
        per_position = step.targets.ndim == 2
        columns = slice(None) if width is None else slice(-width, None)
        mask = step.mask[rows][:, columns] if per_position else step.mask[rows]
        host = step.host_mask[rows]
        group = int((host[:, columns] if per_position else host).sum())
        if not group or not self.loss.scale:
            return hidden.sum() * 0.0
        hidden = hidden[mask] if per_position else hidden[:, -1]
        positives = step.targets[rows][:, columns][mask] if per_position else step.targets[rows]
        negatives = step.negatives
        if negatives is not None and negatives.ndim == 2:
            negatives = negatives[
                step.flat[rows][:, columns][mask] if per_position else step.flat[rows]
            ]
        loss = self.loss.compute(
            hidden,
            positives,
            self.model.output_embedding(),
            self.model.output_bias(),
            negatives,
            step.log_q,
        )
        # shares of the global mean: summing gradients over groups and processes gives its
        # gradient whatever the number of groups and processes
        return loss * (self.loss.scale * group / step.total)

    def _auxiliary_share(
        self, step: StepInputs, inputs: torch.Tensor, hidden: torch.Tensor, rows, extras
    ) -> torch.Tensor:
        """``Σ weight · term`` of the auxiliary losses on a length group, as its batch share."""
        per_position = step.targets.ndim == 2
        share = (int(step.host_mask[rows].sum()) if per_position else len(inputs)) / step.total
        terms: dict[str, torch.Tensor] = {}
        model_terms = [name for name in self.aux_weights if name != "l2_emb"]
        if model_terms:
            streams = TrainingStreams.for_group(step.streams, rows, inputs.shape[1])
            terms.update(
                self.model.auxiliary_losses(model_terms, inputs, hidden, **extras, **streams)
            )
        if "l2_emb" in self.aux_weights:
            terms["l2_emb"] = 0.5 * self.model.items.input.weight.pow(2).sum()
        total = hidden.new_zeros(())
        for name, term in terms.items():
            self.aux_sums[name] = self.aux_sums.get(name, 0.0) + float(term.detach()) * share
            total = total + self.aux_weights[name] * term
        return total * share

    def train_step(self, index: np.ndarray, generator: torch.Generator) -> float:
        batch = make_batch(
            self.train_rows, self.examples, index, self.model.objective, self.model.config.max_len
        )
        step = self._prepare(batch, generator)
        if self.streams.names:
            owned = distributed.shard(len(index), self.context)
            step.streams = {
                name: values[owned].to(self.context.device)
                for name, values in self.streams.batch(index, self.step).items()
            }
        device, bf16 = self.context.device, self.config.train.bf16

        def closure() -> float:
            self.optimizer.zero_grad(set_to_none=False)
            value = torch.zeros((), dtype=torch.float64, device=device)
            with self.model.training_step():
                for rows, width in step.groups:
                    inputs = step.inputs[rows][:, -width:]
                    available = {
                        k: None if v is None else (v[rows] if v.ndim == 1 else v[rows][:, -width:])
                        for k, v in step.extras.items()
                    }
                    extras = self.model.extra_kwargs(**available)
                    with autocast(device, bf16):
                        hidden = self.train_model(inputs, **extras)
                        loss = self._loss_share(step, hidden, rows, width)
                        if self.aux_weights:
                            loss = loss + self._auxiliary_share(step, inputs, hidden, rows, extras)
                    loss.backward()
                    value += loss.detach().double()
            distributed.all_reduce_gradients(self.model, self.context)
            value = distributed.sum_scalar(float(value), self.context)
            if not math.isfinite(value):
                raise TrainingError(
                    f"training loss became {value} at epoch {self.epoch + 1}, step "
                    f"{self.step + 1} (lr {self.scheduler.get_last_lr()[0]:.3g}); lower "
                    "train.lr, set train.grad_clip, or turn off train.bf16"
                )
            if self.config.train.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.train.grad_clip)
            return value

        self.model.train()
        value = self.optimizer.step(closure)
        if self.attack_optimizer is not None:
            with autocast(device, bf16):
                self.model.adversarial_step(
                    step.inputs,
                    lambda hidden: self._loss_share(step, hidden),
                    self.attack_optimizer,
                )
        self.scheduler.step()
        self.step += 1
        return float(value)

    def _length_groups(self, inputs: torch.Tensor) -> list[tuple[torch.Tensor | slice, int]]:
        """``(rows, width)`` pieces of a left-padded batch: for a padding-free model, up to
        ``train.length_groups`` groups of rows of similar length, each cut to its longest row
        (the columns cut are padding in all of its rows); otherwise the whole batch."""
        width = inputs.shape[1]
        groups = min(self.config.train.length_groups, len(inputs))
        if not self.model.padding_free or groups < 2:
            return [(slice(None), width)]
        lengths = (inputs != 0).sum(dim=1)
        order = torch.argsort(lengths, stable=True)
        return [
            (rows, max(1, int(lengths[rows[-1]]))) for rows in torch.tensor_split(order, groups)
        ]

    # -- one epoch ------------------------------------------------------------------------

    def begin_epoch(self, epoch: int) -> torch.Generator:
        """Re-seed the epoch's streams; returns the generator of its order and cloze masks."""
        seed = self.config.train.seed
        torch.manual_seed(epoch_seed(seed, epoch, 1))
        if self.loss.sampled:
            self.sampler = negative_sampler(
                self.loss.sampler, self.popularity, epoch_seed(seed, epoch, 2)
            )
        self.aux_sums = {}
        return torch.Generator().manual_seed(epoch_seed(seed, epoch, 0))

    def run_epoch(self, progress: Progress) -> dict[str, Any]:
        train = self.config.train
        epoch = self.epoch + 1
        generator = self.begin_epoch(epoch)
        order = torch.randperm(len(self.examples), generator=generator).numpy()
        batches = [order[i : i + train.batch_size] for i in range(0, len(order), train.batch_size)]
        if train.steps_per_epoch is not None:
            batches = batches[: train.steps_per_epoch]
        task = progress.add_task(
            f"epoch {epoch}", total=len(batches), rate=0, unit="samples", note=""
        )
        start = time.perf_counter()
        losses, samples = [], 0
        for index in batches:
            losses.append(self.train_step(index, generator))
            samples += len(index)
            elapsed = time.perf_counter() - start
            progress.update(task, advance=1, rate=samples / elapsed, note=f"loss {losses[-1]:.4f}")
        train_seconds = time.perf_counter() - start
        progress.remove_task(task)
        start = time.perf_counter()
        valid = evaluate_model(
            self.model,
            self.valid_task,
            self.split.num_items,
            self.config.eval,
            context=self.context,
            bf16=train.bf16,
            progress=ranking_progress(progress, f"epoch {epoch} valid"),
        )
        self.epoch = epoch
        record = {
            "epoch": epoch,
            "step": self.step,
            "train_loss": float(np.mean(losses)),
            "lr": self.scheduler.get_last_lr()[0],
            "train_seconds": train_seconds,
            "device": distributed.describe(self.context),
            "threads": torch.get_num_threads(),
            "samples_per_second": samples / train_seconds,
            "valid_seconds": time.perf_counter() - start,
            "valid": valid.metrics,
        }
        if len(self.valid_task) < len(self.split.valid):
            record["valid_users"] = len(self.valid_task)
        if self.aux_sums:
            # each term's batch mean (this process's share under DDP), averaged over the steps
            record["aux"] = {k: v / len(batches) for k, v in self.aux_sums.items()}
        return record


def _compiled(forward: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``forward`` (the model, or its ``last_position``) compiled as one graph for every batch
    shape: dynamic shapes, since the length groups cut each batch to its own width, and scalar
    outputs captured, so the dropout's seed draw (``rec/nn/dropout.py``) stays in the graph."""
    torch._dynamo.config.capture_scalar_outputs = True
    return torch.compile(forward, dynamic=True)
